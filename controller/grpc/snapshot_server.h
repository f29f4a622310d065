#pragma once

// The controller's side of snapshot distribution (proto/kwd/v1/discovery.proto):
// a gRPC server (callback API, one reactor and one writer per subscribed
// proxy) that pushes every new snapshot the pipeline publishes, tracks what
// each proxy ACKed and NACKed, and derives the `Programmed` condition of
// every LogonGroup and UrlMapping from it.
//
// Each new version becomes one shared response (its nonce is a server-wide
// sequence number, so it is unique on every stream) and, when only server
// lists changed, one shared endpoint-only delta (common/snapshot_delta.h)
// for the proxies that run the previous version and accept deltas. Each is
// serialized once, when published, and every stream writes those bytes (a
// reference to the same slices): 50 proxies cost one serialization, not 50.
// A slow subscriber's queue holds at most one update, the newest. Whole
// snapshots to streams that have none yet are written a few at a time
// (SnapshotServerOptions::max_initial_sends), so that a reconnect storm does
// not hold up the updates of the proxies already connected.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "controller/compile/compile.h"
#include "controller/grpc/programmed.h"
#include "controller/pipeline/pipeline.h"
#include "kwd/v1/discovery.pb.h"

namespace grpc {
class ByteBuffer;
class Server;
}  // namespace grpc

namespace kwd::snapshot_server {

// PEM files. The server presents cert_path/key_path; with client_ca_path set,
// proxies must present a certificate signed by that CA or their handshake is
// refused (and logged). The files are read again every `refresh`, so renewed
// certificates (cert-manager, a rotated Secret) take effect without a restart;
// replace them atomically (a Secret volume does).
struct ServerTls {
  std::string cert_path;
  std::string key_path;
  std::string client_ca_path;
  std::chrono::seconds refresh{10};
};

// Checks that the files are readable, hold PEM certificates and a key that
// belongs to the certificate; errors name the flag and the file.
bool CheckServerTls(const ServerTls& tls, std::string* error);

struct SnapshotServerOptions {
  std::string listen = "127.0.0.1:18000";  // HOST:PORT; port 0 picks one (see port())
  std::optional<ServerTls> tls;
  // HTTP/2 pings on idle streams: a proxy that vanished without closing its
  // TCP connection is dropped after keepalive_time + keepalive_timeout.
  std::chrono::milliseconds keepalive_time{10'000};
  std::chrono::milliseconds keepalive_timeout{5'000};
  // A proxy that has not answered (ACK or NACK) a snapshot sent to it for
  // this long is still listed but no longer counted for Programmed, and
  // counted in kwd_controller_unresponsive_proxies, until it answers.
  std::chrono::milliseconds ack_timeout{30'000};
  // Whole snapshots to streams that have had none from this server yet (a
  // proxy that connects with no version, or with one the controller no
  // longer serves) being written at once; the others wait, first come first
  // served, and get the newest version when their turn comes. gRPC writes
  // every stream on its own, with no priority between them: without a limit
  // a reconnect storm of 1,000 proxies puts 1,000 whole snapshots in flight,
  // and an endpoint change to the proxies already connected is handled
  // behind all of them. 0: no limit. Updates to connected proxies, "you are
  // current" replies and deltas never wait.
  int max_initial_sends = 32;
  // A first whole snapshot keeps its place among max_initial_sends for at
  // most this long: a proxy that does not read (or reads slowly) gives it up
  // then, and its write goes on without it.
  std::chrono::milliseconds initial_send_timeout{1'000};
};

// One connected proxy as the server sees it.
struct ProxyStatus {
  uint64_t stream_id = 0;
  std::string peer;
  // With mutual TLS: the client certificate's identity (its first subject
  // alternative name, else its common name). The node id is then this
  // identity, plus "/<node id it sent>" when that differs: a proxy cannot
  // name itself after another certificate's proxy.
  std::string certificate_identity;
  ProxyVersions versions;
  std::string sent_version;  // the newest version pushed to it
  bool awaiting_reply = false;
  std::chrono::system_clock::time_point connected_at;  // the stream opened
};

// The Programmed condition of one object of the current snapshot.
struct ProgrammedStatus {
  std::string kind;
  std::string namespace_;
  std::string name;
  int64_t generation = 0;
  compile::Condition condition;
};

class SnapshotServer final : public pipeline::SnapshotSink {
 public:
  SnapshotServer(SnapshotServerOptions options, MetricsRegistry* metrics);
  ~SnapshotServer() override;
  SnapshotServer(const SnapshotServer&) = delete;
  SnapshotServer& operator=(const SnapshotServer&) = delete;

  // Binds and starts serving. False with `error` when the address cannot be
  // bound or the TLS files do not load. Routes gRPC core's log lines (process-
  // wide) into common/log.h.
  bool Start(std::string* error);
  // The bound port (after Start).
  int port() const { return port_; }
  // Ends every stream and stops; idempotent.
  void Stop();

  // Pipeline thread: a new compile result. Pushed only if its version differs.
  void Publish(std::shared_ptr<const compile::CompileResult> result) override;

  std::string current_version() const;
  std::vector<ProxyStatus> Proxies() const;
  // Programmed for every object of the current compile result, in its order.
  std::vector<ProgrammedStatus> ProgrammedConditions() const;
  // Programmed for one object (the status writer's view of it).
  compile::Condition ProgrammedFor(const compile::ObjectStatus& object) const;
  // What the proxies connected to this server run and reject.
  std::vector<ProxyVersions> LocalProxies() const;
  // The last SetRemoteProxies (admin page).
  std::vector<ProxyVersions> RemoteProxies() const;
  // The proxies of the other controller replicas (ReplicaReports): counted
  // with the local ones for Programmed. Notifies like a proxy change when
  // they differ from the last ones.
  void SetRemoteProxies(std::vector<ProxyVersions> proxies);
  // Called (on a gRPC thread, without locks held) whenever a proxy connects,
  // disconnects, ACKs or NACKs: e.g. to refresh status conditions. Not on
  // Publish: its caller (the pipeline) diffs statuses right after.
  void SetOnProxiesChanged(std::function<void()> callback);

  class Subscriber;  // the per-stream reactor (snapshot_server.cc)

 private:
  class Service;
  // A SnapshotResponse serialized once, for every stream it goes to
  // (snapshot_server.cc).
  struct EncodedResponse;
  // Serializes `response` once, the way the generated handler would for
  // each Write (the same call, so the same bytes).
  static std::shared_ptr<const EncodedResponse> Encode(const v1::SnapshotResponse& response);
  // One version for one stream: whole, and maybe as a delta.
  struct Update {
    std::shared_ptr<const EncodedResponse> full;
    std::shared_ptr<const EncodedResponse> delta;  // null: none
  };
  struct StreamState {
    Subscriber* subscriber = nullptr;
    ProxyStatus status;
    bool hello_seen = false;
    bool first_pushed = false;  // PushLocked ran for it once
    uint64_t held_ticket = 0;   // its key in held_: its first snapshot waits; 0: not
    std::string last_nonce;
    std::chrono::steady_clock::time_point sent_at{};
  };

  // Called by the reactors.
  uint64_t Register(Subscriber* subscriber, std::string peer, std::string certificate_identity);
  void Unregister(uint64_t stream_id);
  void HandleRequest(uint64_t stream_id, const v1::SnapshotRequest& request);
  // A write to start once mu_ is released (Subscriber::Push).
  struct PendingWrite {
    Subscriber* subscriber;
    const grpc::ByteBuffer* bytes;
  };
  // Under mu_: queue the current snapshot on a stream (or, answering its
  // first request, a "you are current" reply), as a delta when allowed and
  // the stream's proxy runs the delta's base. A write to start is added to
  // `writes`: the caller starts them with WriteAll after releasing mu_, so
  // that sending (which gRPC may do on the calling thread) does not hold up
  // other streams' requests.
  void PushLocked(StreamState& stream, bool hello, bool allow_delta,
                  std::vector<PendingWrite>* writes);
  static void WriteAll(const std::vector<PendingWrite>& writes);
  // Under mu_: whether another first whole snapshot may be written now.
  bool InitialSlotFreeLocked() const;
  // Under mu_: starts the first snapshots that wait (held_), oldest first,
  // while max_initial_sends allows.
  void AdmitHeldLocked(std::vector<PendingWrite>* writes);
  // Under mu_: `stream_id` gives up its place among the first sends, or
  // stops waiting for one (it went); the next ones start.
  void LeaveInitialSendLocked(uint64_t stream_id, std::vector<PendingWrite>* writes);
  // A stream's first write completed (or failed): its place, if it held
  // one, goes to the next stream that waits.
  void FirstWriteDone(uint64_t stream_id);
  // Under mu_: gives up the places held longer than initial_send_timeout
  // (their writes go on); the earliest deadline of those that remain.
  std::optional<std::chrono::steady_clock::time_point> ExpireInitialSendsLocked(
      std::chrono::steady_clock::time_point now, std::vector<PendingWrite>* writes);
  // Drops history_ entries no proxy names any more (the current version
  // stays). Runs on every answer: it looks up version_uses_ and
  // remote_versions_ instead of going through every stream.
  void PruneHistoryLocked();
  // Under mu_: sets a stream's acked_version or nacked_version (`field`),
  // keeping version_uses_ counted.
  void SetVersionLocked(std::string* field, std::string value);
  void CountVersionLocked(const std::string& version, int uses);
  // Under mu_: wakes WatchAcks, only when what it waits for changed: a
  // stream counted unresponsive answers, is pushed to again or goes, or a
  // new deadline comes before the one it waits for. Not on every push and
  // ACK: with 1,000 proxies that was 2,000 wake-ups per version, each
  // going through every stream under mu_.
  void WakeAckWatcherLocked(bool was_unresponsive,
                            std::optional<std::chrono::steady_clock::time_point> deadline);
  std::vector<ProxyVersions> LocalProxiesLocked() const;
  // The local proxies, then the remote ones.
  std::vector<ProxyVersions> ConnectedLocked() const;
  // ConnectedLocked(), folded (FoldProxies): kept while nothing it depends
  // on changed, so that a status resync's ProgrammedFor of every object
  // (serve, Kubernetes mode, on every proxy change) folds 1,000 proxies
  // once, not once per object.
  const std::vector<ProxyFold>& FoldedLocked() const;
  SnapshotLookup LookupLocked() const;
  void NotifyChanged();
  // Whether a stream's proxy has left a snapshot unanswered for longer than
  // options_.ack_timeout.
  bool UnresponsiveLocked(const StreamState& stream,
                          std::chrono::steady_clock::time_point now) const;
  // Wakes when a sent snapshot's ACK timeout passes, so that Programmed
  // stops waiting for a proxy that does not answer, and when a first send's
  // place times out (ExpireInitialSendsLocked).
  void WatchAcks(std::stop_token stop);

  const SnapshotServerOptions options_;
  MetricsRegistry* metrics_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::shared_ptr<const compile::CompileResult> current_;
  std::shared_ptr<const EncodedResponse> current_response_;  // shared by streams
  // The same version as a delta from the previous one; null when more than
  // endpoints changed.
  std::shared_ptr<const EncodedResponse> current_delta_response_;
  uint64_t next_nonce_ = 1;
  uint64_t next_stream_id_ = 1;
  std::map<uint64_t, StreamState> streams_;
  // The streams whose first whole snapshot is being written (at most
  // options_.max_initial_sends), with when it started.
  std::map<uint64_t, std::chrono::steady_clock::time_point> initial_sends_;
  // The streams whose first snapshot waits for a place, by ticket (the
  // order they came in): stream ids.
  std::map<uint64_t, uint64_t> held_;
  uint64_t next_held_ticket_ = 1;
  // Snapshots some connected proxy runs or rejected, by version (for Programmed).
  std::map<std::string, std::shared_ptr<const compile::CompileResult>, std::less<>> history_;
  // How many local streams name each version as acked or nacked, and the
  // versions the remote proxies name: what keeps a history_ entry.
  std::map<std::string, int, std::less<>> version_uses_;
  std::set<std::string, std::less<>> remote_versions_;
  std::function<void()> on_changed_;
  std::vector<ProxyVersions> remote_;  // SetRemoteProxies
  // Changes whenever what ConnectedLocked returns may change (a hello, an
  // answer, a push, a disconnect, remote proxies), but for the time an
  // awaited answer's timeout passes: FoldedLocked's cache is valid while
  // folded_epoch_ is this and the clock has not passed folded_until_.
  uint64_t proxies_epoch_ = 1;
  mutable std::vector<ProxyFold> folded_;
  mutable uint64_t folded_epoch_ = 0;
  mutable std::chrono::steady_clock::time_point folded_until_{};
  bool stopped_ = false;
  std::condition_variable_any ack_wake_;
  uint64_t ack_events_ = 0;  // WakeAckWatcherLocked: WatchAcks looks again
  // When WatchAcks wakes by itself next (nullopt: only when woken).
  std::optional<std::chrono::steady_clock::time_point> ack_watch_until_;
  std::jthread ack_watcher_;  // WatchAcks, from Start to Stop

  Gauge* connected_ = nullptr;
  Gauge* unresponsive_ = nullptr;
  Gauge* remote_proxies_ = nullptr;
  Gauge* snapshot_bytes_ = nullptr;
  Gauge* initial_waiting_ = nullptr;
  Counter* pushes_ = nullptr;
  Counter* acks_ = nullptr;
  Counter* nacks_ = nullptr;
  Counter* delta_pushes_ = nullptr;
  Histogram* push_to_ack_seconds_ = nullptr;
};

// Passes each result to several sinks (e.g. the admin port and the gRPC server).
class FanOutSink final : public pipeline::SnapshotSink {
 public:
  explicit FanOutSink(std::vector<pipeline::SnapshotSink*> sinks) : sinks_(std::move(sinks)) {}
  void Publish(std::shared_ptr<const compile::CompileResult> result) override {
    for (auto* sink : sinks_) {
      sink->Publish(result);
    }
  }

 private:
  std::vector<pipeline::SnapshotSink*> sinks_;
};

}  // namespace kwd::snapshot_server
