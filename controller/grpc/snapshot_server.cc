#include "controller/grpc/snapshot_server.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/file.h"
#include "common/grpc_log.h"
#include "common/log.h"
#include "common/pem_files.h"
#include "common/snapshot_delta.h"
#include "kwd/v1/discovery.grpc.pb.h"

namespace kwd::snapshot_server {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The verified client certificate's identity: its first subject
// alternative name, else its common name; "" without one.
std::string CertificateIdentity(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) {
    return "";
  }
  for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
    std::vector<grpc::string_ref> values = auth->FindPropertyValues(property);
    if (!values.empty()) {
      return PrintableText(std::string_view(values.front().data(), values.front().size()),
                           kMaxNodeIdBytes);
    }
  }
  return "";
}

}  // namespace

struct SnapshotServer::EncodedResponse {
  std::string version;     // version_info
  std::string nonce;       // nonce
  std::string delta_base;  // delta.base_version; empty: not a delta
  grpc::ByteBuffer bytes;  // the serialized SnapshotResponse, as written
};

std::shared_ptr<const SnapshotServer::EncodedResponse> SnapshotServer::Encode(
    const v1::SnapshotResponse& response) {
  auto encoded = std::make_shared<EncodedResponse>();
  encoded->version = response.version_info();
  encoded->nonce = response.nonce();
  if (response.has_delta()) {
    encoded->delta_base = response.delta().base_version();
  }
  bool own_buffer = false;
  grpc::Status status = grpc::SerializationTraits<v1::SnapshotResponse>::Serialize(
      response, &encoded->bytes, &own_buffer);
  if (!status.ok()) {
    // Only when the message exceeds protobuf's 2 GiB limit.
    Log(LogLevel::kError, "grpc", "cannot serialize a snapshot response",
        {{"version", encoded->version}, {"error", status.error_message()}});
    std::abort();
  }
  return encoded;
}

bool CheckServerTls(const ServerTls& tls, std::string* error) {
  return CheckKeyPairFiles("--grpc-tls-cert", tls.cert_path, "--grpc-tls-key", tls.key_path,
                           error) &&
         (tls.client_ca_path.empty() ||
          CheckCertificateFile("--grpc-client-ca", tls.client_ca_path, error));
}

// One stream. Reads run one at a time (each StartRead after the previous
// request was handled); writes run one at a time with at most one newer
// update waiting. StartWrite and Finish are called without mu_ (or the
// server's lock) held: gRPC may run the completion on the calling thread.
//
// Whether an update goes out whole or as a delta is decided when it is
// written, not when it is queued: a delta applies only on top of the
// version this stream delivered last, which a replaced waiting update may
// have changed.
class SnapshotServer::Subscriber final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Subscriber(SnapshotServer* server, grpc::CallbackServerContext* context) : server_(server) {
    std::string identity;
    if (server_->options_.tls && !server_->options_.tls->client_ca_path.empty()) {
      identity = CertificateIdentity(*context);
    }
    stream_id_ = server_->Register(this, context->peer(), std::move(identity));
    StartRead(&request_bytes_);
  }

  // The proxy's first request: what it runs and whether it takes deltas.
  void Hello(const std::string& running_version, bool accepts_deltas) {
    std::lock_guard lock(mu_);
    base_version_ = running_version;
    accepts_deltas_ = accepts_deltas;
  }

  // A NACK of the newest response: the proxy runs `running_version`.
  // Returns whether that response was a delta.
  bool Rejected(const std::string& running_version) {
    std::lock_guard lock(mu_);
    base_version_ = running_version;
    return last_written_delta_;
  }

  struct Pushed {
    // The bytes the caller must pass to Write, without any lock held; null
    // when a running write's completion (or Release) takes the update.
    const grpc::ByteBuffer* bytes = nullptr;
    bool whole = false;  // `bytes` are not a delta
    bool held = false;   // held until Release (hold_whole)
  };
  // Thread-safe. Queues `update` (replacing one that waits). When no write
  // is in flight, starts it: the bytes to Write. With `hold_whole`, an
  // update that would start as a whole snapshot (not a delta) is held
  // instead, until Release. Until a started Write completes the stream is
  // not finished (Close waits for the write in flight), so the subscriber
  // stays alive for the caller.
  Pushed Push(Update update, bool hold_whole) {
    std::lock_guard lock(mu_);
    Pushed pushed;
    if (closing_) {
      return pushed;
    }
    if (in_flight_ || held_) {
      waiting_ = std::move(update);
      return pushed;
    }
    if (hold_whole && !DeltaAppliesLocked(update)) {
      waiting_ = std::move(update);
      held_ = true;
      pushed.held = true;
      return pushed;
    }
    pushed.bytes = ChooseLocked(std::move(update));
    pushed.whole = !last_written_delta_;
    return pushed;
  }
  // Thread-safe. Starts the held update, the newest pushed: the bytes to
  // Write as with Push; null when the stream is closing.
  const grpc::ByteBuffer* Release() {
    std::lock_guard lock(mu_);
    if (!held_) {
      return nullptr;
    }
    held_ = false;
    if (closing_ || !waiting_) {
      return nullptr;
    }
    const grpc::ByteBuffer* bytes = ChooseLocked(std::move(*waiting_));
    waiting_.reset();
    return bytes;
  }
  void Write(const grpc::ByteBuffer* bytes) { StartWrite(bytes); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Close();
      return;
    }
    // What the generated handler would do (and then fail the call when the
    // bytes are no SnapshotRequest).
    request_.Clear();
    if (!grpc::SerializationTraits<v1::SnapshotRequest>::Deserialize(&request_bytes_, &request_)
             .ok()) {
      Log(LogLevel::kWarn, "grpc", "unparsable request on a snapshot stream: closing it",
          {{"stream", std::to_string(stream_id_)}});
      Close();
      return;
    }
    server_->HandleRequest(stream_id_, request_);
    StartRead(&request_bytes_);
  }

  void OnWriteDone(bool ok) override {
    const grpc::ByteBuffer* next = nullptr;
    bool finish = false;
    bool first = false;
    {
      std::lock_guard lock(mu_);
      in_flight_.reset();
      first = !first_write_done_;
      first_write_done_ = true;
      if (!ok) {
        closing_ = true;
      }
      if (!closing_ && waiting_) {
        next = ChooseLocked(std::move(*waiting_));
      }
      waiting_.reset();
      finish = closing_ && !finished_;
      finished_ = finished_ || finish;
    }
    if (first) {
      server_->FirstWriteDone(stream_id_);  // its place goes to the next
    }
    if (next != nullptr) {
      StartWrite(next);
    } else if (finish) {
      Finish(grpc::Status::OK);
    }
  }

  void OnDone() override {
    server_->Unregister(stream_id_);
    delete this;
  }

 private:
  // Under mu_: whether `update` would go out as a delta.
  bool DeltaAppliesLocked(const Update& update) const {
    return accepts_deltas_ && update.delta && update.delta->delta_base == base_version_;
  }
  // Under mu_: the bytes to write for `update`, now in flight.
  const grpc::ByteBuffer* ChooseLocked(Update update) {
    last_written_delta_ = DeltaAppliesLocked(update);
    in_flight_ = last_written_delta_ ? std::move(update.delta) : std::move(update.full);
    base_version_ = in_flight_->version;
    if (last_written_delta_ && server_->delta_pushes_ != nullptr) {
      server_->delta_pushes_->Inc();
    }
    return &in_flight_->bytes;
  }

  void Close() {
    bool finish = false;
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      waiting_.reset();
      finish = !in_flight_ && !finished_;
      finished_ = finished_ || finish;
    }
    if (finish) {
      Finish(grpc::Status::OK);
    }
  }

  SnapshotServer* server_;
  uint64_t stream_id_ = 0;
  grpc::ByteBuffer request_bytes_;
  v1::SnapshotRequest request_;
  std::mutex mu_;
  std::shared_ptr<const EncodedResponse> in_flight_;
  std::optional<Update> waiting_;
  // The version the proxy runs once it applied everything written so far.
  std::string base_version_;
  bool accepts_deltas_ = false;
  bool last_written_delta_ = false;
  bool held_ = false;  // waiting_ waits for Release, not for a write
  bool first_write_done_ = false;
  bool closing_ = false;
  bool finished_ = false;
};

// The generated service with StreamSnapshots taking and giving bytes: the
// same method, the same wire format, but responses are written as the
// ByteBuffers Encode made once per version (each Write refs their
// slices) instead of being serialized again for every stream.
class SnapshotServer::Service final
    : public v1::SnapshotDiscovery::WithRawCallbackMethod_StreamSnapshots<
          v1::SnapshotDiscovery::Service> {
 public:
  explicit Service(SnapshotServer* server) : server_(server) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamSnapshots(
      grpc::CallbackServerContext* context) override {
    return new Subscriber(server_, context);
  }

 private:
  SnapshotServer* server_;
};

SnapshotServer::SnapshotServer(SnapshotServerOptions options, MetricsRegistry* metrics)
    : options_(std::move(options)), metrics_(metrics), service_(std::make_unique<Service>(this)) {
  if (metrics_ != nullptr) {
    connected_ = &metrics_->GetGauge("kwd_controller_connected_proxies",
                                     "Proxies with an open snapshot stream.");
    unresponsive_ = &metrics_->GetGauge(
        "kwd_controller_unresponsive_proxies",
        "Connected proxies that left a snapshot unanswered longer than --proxy-ack-timeout "
        "(listed, not counted for Programmed).");
    remote_proxies_ = &metrics_->GetGauge(
        "kwd_controller_remote_proxies",
        "Proxies of the other controller replicas, from their reports (counted for Programmed).");
    snapshot_bytes_ = &metrics_->GetGauge("kwd_controller_snapshot_bytes",
                                          "Serialized size of the current snapshot.");
    initial_waiting_ = &metrics_->GetGauge(
        "kwd_controller_first_snapshots_waiting",
        "Proxies that connected and wait for their first whole snapshot: 32 are written at "
        "once, so that a reconnect storm does not hold up the updates to the others.");
    pushes_ = &metrics_->GetCounter("kwd_controller_snapshot_pushes_total",
                                    "Snapshot responses queued to proxies.");
    acks_ = &metrics_->GetCounter("kwd_controller_snapshot_acks_total",
                                  "Snapshot responses proxies accepted (ACK).");
    nacks_ = &metrics_->GetCounter("kwd_controller_snapshot_nacks_total",
                                   "Snapshot responses proxies rejected (NACK).");
    delta_pushes_ = &metrics_->GetCounter(
        "kwd_controller_snapshot_delta_pushes_total",
        "Snapshot responses sent as endpoint-only deltas instead of whole snapshots.");
    push_to_ack_seconds_ =
        &metrics_->GetHistogram("kwd_controller_snapshot_push_to_ack_seconds",
                                "Time from queuing a snapshot to a proxy until its ACK or NACK.");
  }
}

SnapshotServer::~SnapshotServer() {
  Stop();
}

bool SnapshotServer::Start(std::string* error) {
  // A refused proxy (no certificate, another CA, plain text) shows up as gRPC
  // core's "Handshake failed" line: keep it in our format.
  RouteGrpcLogsToKwdLog();
  // The distribution's abseil is built without NDEBUG, so each absl::Mutex
  // gRPC takes also went through abseil's deadlock detector (GraphCycles):
  // 4-6% of the controller's CPU with 1,000 streams (perf, fleet_bench).
  // Off, as in a release build of abseil. Process-wide.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (options_.tls) {
    // Checked here as well as by the caller: gRPC would take unreadable files
    // and then fail every handshake.
    if (!CheckServerTls(*options_.tls, error)) {
      return false;
    }
    const ServerTls& tls = *options_.tls;
    auto refresh = static_cast<unsigned int>(std::max<int64_t>(1, tls.refresh.count()));
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        tls.key_path, tls.cert_path, tls.client_ca_path, refresh);
    grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
    tls_options.watch_identity_key_cert_pairs();
    if (!tls.client_ca_path.empty()) {
      tls_options.watch_root_certs();
      tls_options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    } else {
      tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    }
    credentials = grpc::experimental::TlsServerCredentials(tls_options);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  builder.AddListeningPort(options_.listen, credentials, &port_);
  builder.RegisterService(service_.get());
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(options_.keepalive_time.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(options_.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Proxies ping as often as we do; without these the server would answer
  // their pings with GOAWAY ("too_many_pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(options_.keepalive_time.count() / 2));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxSendMessageSize(-1);
  // A second controller on the same address must fail to bind, not share
  // the port and split the proxies between two configurations.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    *error = "cannot serve gRPC on " + options_.listen;
    server_.reset();
    return false;
  }
  ack_watcher_ = std::jthread([this](std::stop_token stop) { WatchAcks(stop); });
  Log(LogLevel::kInfo, "grpc", "snapshot server listening",
      {{"address", options_.listen},
       {"port", std::to_string(port_)},
       {"tls", !options_.tls                          ? "off"
               : options_.tls->client_ca_path.empty() ? "on"
                                                      : "mutual"}});
  return true;
}

void SnapshotServer::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) {
      return;
    }
    stopped_ = true;
  }
  if (ack_watcher_.joinable()) {
    ack_watcher_.request_stop();
    ack_watcher_.join();
  }
  if (server_) {
    // Cancels every stream at once; proxies keep serving their snapshot and reconnect.
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
}

uint64_t SnapshotServer::Register(Subscriber* subscriber, std::string peer,
                                  std::string certificate_identity) {
  std::lock_guard lock(mu_);
  uint64_t id = next_stream_id_++;
  StreamState& stream = streams_[id];
  stream.subscriber = subscriber;
  stream.status.stream_id = id;
  stream.status.peer = PrintableText(peer, 256);
  stream.status.certificate_identity = std::move(certificate_identity);
  stream.status.connected_at = std::chrono::system_clock::now();
  return id;
}

void SnapshotServer::Unregister(uint64_t stream_id) {
  std::vector<PendingWrite> writes;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(stream_id);
    if (it == streams_.end()) {
      return;
    }
    if (it->second.hello_seen) {
      Log(LogLevel::kInfo, "grpc", "proxy disconnected",
          {{"node", it->second.status.versions.node_id}, {"peer", it->second.status.peer}});
      if (connected_ != nullptr) {
        connected_->Add(-1);
      }
    }
    ++proxies_epoch_;
    WakeAckWatcherLocked(UnresponsiveLocked(it->second, std::chrono::steady_clock::now()),
                         std::nullopt);
    CountVersionLocked(it->second.status.versions.acked_version, -1);
    CountVersionLocked(it->second.status.versions.nacked_version, -1);
    if (it->second.held_ticket != 0) {
      held_.erase(it->second.held_ticket);
      if (initial_waiting_ != nullptr) {
        initial_waiting_->Set(static_cast<double>(held_.size()));
      }
    }
    streams_.erase(it);
    // Normally its write's completion gave its place back already.
    LeaveInitialSendLocked(stream_id, &writes);
    PruneHistoryLocked();
  }
  WriteAll(writes);
  NotifyChanged();
}

void SnapshotServer::WriteAll(const std::vector<PendingWrite>& writes) {
  for (const auto& [subscriber, bytes] : writes) {
    subscriber->Write(bytes);
  }
}

bool SnapshotServer::InitialSlotFreeLocked() const {
  return options_.max_initial_sends <= 0 ||
         initial_sends_.size() < static_cast<size_t>(options_.max_initial_sends);
}

void SnapshotServer::AdmitHeldLocked(std::vector<PendingWrite>* writes) {
  if (held_.empty()) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  bool admitted = false;
  while (!held_.empty() && InitialSlotFreeLocked()) {
    const uint64_t stream_id = held_.begin()->second;
    held_.erase(held_.begin());
    auto it = streams_.find(stream_id);
    if (it == streams_.end()) {
      continue;  // not so: Unregister takes it out of held_
    }
    it->second.held_ticket = 0;
    // Null when it is closing: then it takes no place.
    if (const grpc::ByteBuffer* bytes = it->second.subscriber->Release()) {
      initial_sends_.emplace(stream_id, now);
      writes->push_back({it->second.subscriber, bytes});
      admitted = true;
    }
  }
  if (initial_waiting_ != nullptr) {
    initial_waiting_->Set(static_cast<double>(held_.size()));
  }
  if (admitted) {
    // Their places time out then.
    WakeAckWatcherLocked(false, now + options_.initial_send_timeout);
  }
}

void SnapshotServer::LeaveInitialSendLocked(uint64_t stream_id,
                                            std::vector<PendingWrite>* writes) {
  if (initial_sends_.erase(stream_id) != 0) {
    AdmitHeldLocked(writes);
  }
}

void SnapshotServer::FirstWriteDone(uint64_t stream_id) {
  std::vector<PendingWrite> writes;
  {
    std::lock_guard lock(mu_);
    LeaveInitialSendLocked(stream_id, &writes);
  }
  WriteAll(writes);
}

std::optional<std::chrono::steady_clock::time_point> SnapshotServer::ExpireInitialSendsLocked(
    std::chrono::steady_clock::time_point now, std::vector<PendingWrite>* writes) {
  bool expired = false;
  std::optional<std::chrono::steady_clock::time_point> next;
  for (auto it = initial_sends_.begin(); it != initial_sends_.end();) {
    const auto deadline = it->second + options_.initial_send_timeout;
    if (now >= deadline) {
      // A proxy that does not read: its write goes on, without a place.
      it = initial_sends_.erase(it);
      expired = true;
    } else {
      next = next ? std::min(*next, deadline) : deadline;
      ++it;
    }
  }
  if (expired) {
    AdmitHeldLocked(writes);
  }
  return next;
}

void SnapshotServer::PushLocked(StreamState& stream, bool hello, bool allow_delta,
                                std::vector<PendingWrite>* writes) {
  if (!current_) {
    return;
  }
  const std::string& version = current_->snapshot.version();
  Update update;
  const bool current_reply = hello && stream.status.versions.acked_version == version;
  // Its first snapshot (not a "you are current"): whole, it waits for a
  // place among max_initial_sends.
  const bool first = !stream.first_pushed && !current_reply;
  stream.first_pushed = true;
  if (current_reply) {
    // The proxy says it runs it already (e.g. after a controller restart): a
    // small reply so that it knows it is current, and ACKs. Only on the
    // first request: later, what it ACKed may be older than what it runs.
    v1::SnapshotResponse reply;
    reply.set_version_info(version);
    reply.set_nonce(std::to_string(next_nonce_++));
    update.full = Encode(reply);
  } else {
    update.full = current_response_;
    if (allow_delta) {
      update.delta = current_delta_response_;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  const bool was_unresponsive = UnresponsiveLocked(stream, now);
  ++proxies_epoch_;
  stream.last_nonce = update.full->nonce;
  stream.status.sent_version = version;
  stream.status.awaiting_reply = true;
  stream.sent_at = now;
  // The deadline WatchAcks computes for it.
  WakeAckWatcherLocked(was_unresponsive, now + options_.ack_timeout + std::chrono::milliseconds(1));
  if (pushes_ != nullptr) {
    pushes_->Inc();
  }
  const Subscriber::Pushed pushed =
      stream.subscriber->Push(std::move(update), first && !InitialSlotFreeLocked());
  if (pushed.held) {
    stream.held_ticket = next_held_ticket_++;
    held_.emplace(stream.held_ticket, stream.status.stream_id);
    if (initial_waiting_ != nullptr) {
      initial_waiting_->Set(static_cast<double>(held_.size()));
    }
  } else if (pushed.bytes != nullptr) {
    if (first && pushed.whole) {
      initial_sends_.emplace(stream.status.stream_id, now);
      WakeAckWatcherLocked(false, now + options_.initial_send_timeout);
    }
    writes->push_back({stream.subscriber, pushed.bytes});
  }
}

void SnapshotServer::Publish(std::shared_ptr<const compile::CompileResult> result) {
  if (!result) {
    return;
  }
  std::shared_ptr<const compile::CompileResult> previous;
  std::string nonce;
  {
    std::lock_guard lock(mu_);
    if (current_ && current_->snapshot.version() == result->snapshot.version()) {
      return;  // same content: nothing to push
    }
    previous = current_;
    // Nonces are opaque: one taken now may be older than a "you are current"
    // reply's taken meanwhile.
    nonce = std::to_string(next_nonce_++);
  }
  // Outside the lock (only this thread changes current_), once per version
  // for every stream: the delta (a few milliseconds for 10,000 endpoints)
  // and the serialization of both forms.
  std::optional<v1::SnapshotDelta> delta;
  if (previous) {
    delta = ComputeEndpointDelta(previous->snapshot, result->snapshot, &previous->digests,
                                 &result->digests);
  }
  std::shared_ptr<const EncodedResponse> response;
  {
    // Points at the compile result's snapshot instead of copying 10,000
    // servers: it is only serialized, and hands the snapshot back after.
    v1::SnapshotResponse message;
    message.set_version_info(result->snapshot.version());
    message.set_nonce(nonce);
    message.unsafe_arena_set_allocated_snapshot(const_cast<v1::Snapshot*>(&result->snapshot));
    response = Encode(message);
    message.unsafe_arena_release_snapshot();
  }
  std::shared_ptr<const EncodedResponse> delta_response;
  if (delta) {
    // Same nonce: it is the same update, whichever form a stream gets.
    v1::SnapshotResponse message;
    message.set_version_info(result->snapshot.version());
    message.set_nonce(nonce);
    *message.mutable_delta() = std::move(*delta);
    delta_response = Encode(message);
  }
  const auto snapshot_bytes = static_cast<double>(result->snapshot.ByteSizeLong());

  std::vector<PendingWrite> writes;
  {
    std::lock_guard lock(mu_);
    if (snapshot_bytes_ != nullptr) {
      snapshot_bytes_->Set(snapshot_bytes);
    }
    current_ = std::move(result);
    current_response_ = std::move(response);
    current_delta_response_ = std::move(delta_response);
    history_[current_->snapshot.version()] = current_;
    writes.reserve(streams_.size());
    for (auto& [id, stream] : streams_) {
      if (stream.hello_seen) {
        PushLocked(stream, /*hello=*/false, /*allow_delta=*/true, &writes);
      }
    }
    PruneHistoryLocked();
  }
  // Every stream has its update queued before the first write starts, and
  // the lock is free while gRPC sends (partly on this thread): ACKs of the
  // first streams are handled while the last ones are still being written.
  WriteAll(writes);
  // No NotifyChanged: the pipeline diffs statuses right after publishing.
}

void SnapshotServer::HandleRequest(uint64_t stream_id, const v1::SnapshotRequest& request) {
  std::vector<PendingWrite> writes;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(stream_id);
    if (it == streams_.end()) {
      return;
    }
    StreamState& stream = it->second;
    ProxyVersions& versions = stream.status.versions;
    ++proxies_epoch_;
    if (!stream.hello_seen) {
      stream.hello_seen = true;
      // Untrusted text that ends up in every object's Programmed message
      // and in logs: printable and bounded.
      std::string claimed = PrintableText(request.node_id(), kMaxNodeIdBytes);
      const std::string& identity = stream.status.certificate_identity;
      if (!identity.empty()) {
        versions.node_id =
            claimed.empty() || claimed == identity ? identity : identity + "/" + claimed;
      } else if (options_.tls && !options_.tls->client_ca_path.empty()) {
        versions.node_id = "(certificate without a name)/" + claimed;
      } else {
        versions.node_id = claimed;
      }
      SetVersionLocked(&versions.acked_version,
                       PrintableText(request.version_info(), kMaxNodeIdBytes));
      if (connected_ != nullptr) {
        connected_->Add(1);
      }
      Log(LogLevel::kInfo, "grpc", "proxy connected",
          {{"node", versions.node_id},
           {"peer", stream.status.peer},
           {"version", versions.acked_version}});
      stream.subscriber->Hello(request.version_info(), request.accepts_deltas());
      PushLocked(stream, /*hello=*/true, /*allow_delta=*/true, &writes);
    } else if (request.response_nonce() != stream.last_nonce) {
      // An answer to a response that a newer one replaced: ignore it (xDS).
      return;
    } else {
      WakeAckWatcherLocked(UnresponsiveLocked(stream, std::chrono::steady_clock::now()),
                           std::nullopt);
      stream.status.awaiting_reply = false;
      if (push_to_ack_seconds_ != nullptr) {
        push_to_ack_seconds_->Observe(SecondsSince(stream.sent_at));
      }
      SetVersionLocked(&versions.acked_version,
                       PrintableText(request.version_info(), kMaxNodeIdBytes));
      if (request.has_error_detail()) {
        SetVersionLocked(&versions.nacked_version, stream.status.sent_version);
        versions.nack_message =
            PrintableText(request.error_detail().message(), kMaxNackMessageBytes);
        if (nacks_ != nullptr) {
          nacks_->Inc();
        }
        bool was_delta = stream.subscriber->Rejected(versions.acked_version);
        Log(LogLevel::kWarn, "grpc", "proxy rejected a snapshot (NACK)",
            {{"node", versions.node_id},
             {"version", versions.nacked_version},
             {"running", versions.acked_version},
             {"delta", was_delta ? "true" : "false"},
             {"error", versions.nack_message}});
        if (was_delta && current_ && versions.acked_version != current_->snapshot.version()) {
          // E.g. it did not run the delta's base: send the same content whole.
          // Never a delta again here, so a proxy that rejects the content
          // itself NACKs once more and the exchange ends.
          PushLocked(stream, /*hello=*/false, /*allow_delta=*/false, &writes);
        }
      } else {
        if (acks_ != nullptr) {
          acks_->Inc();
        }
        // It runs what we sent last: an earlier rejection no longer describes it.
        if (versions.acked_version == stream.status.sent_version) {
          SetVersionLocked(&versions.nacked_version, "");
          versions.nack_message.clear();
        }
      }
    }
    PruneHistoryLocked();
  }
  WriteAll(writes);
  NotifyChanged();
}

void SnapshotServer::PruneHistoryLocked() {
  for (auto it = history_.begin(); it != history_.end();) {
    bool used = (current_ && it->first == current_->snapshot.version()) ||
                version_uses_.contains(it->first) || remote_versions_.contains(it->first);
    it = used ? std::next(it) : history_.erase(it);
  }
}

void SnapshotServer::CountVersionLocked(const std::string& version, int uses) {
  if (version.empty()) {
    return;
  }
  auto it = version_uses_.try_emplace(version, 0).first;
  it->second += uses;
  if (it->second <= 0) {
    version_uses_.erase(it);
  }
}

void SnapshotServer::SetVersionLocked(std::string* field, std::string value) {
  if (*field == value) {
    return;
  }
  CountVersionLocked(*field, -1);
  *field = std::move(value);
  CountVersionLocked(*field, 1);
}

void SnapshotServer::WakeAckWatcherLocked(
    bool was_unresponsive, std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (was_unresponsive || (deadline && (!ack_watch_until_ || *deadline < *ack_watch_until_))) {
    ++ack_events_;
    ack_wake_.notify_all();
  }
}

void SnapshotServer::NotifyChanged() {
  std::function<void()> callback;
  {
    std::lock_guard lock(mu_);
    callback = on_changed_;
  }
  if (callback) {
    callback();
  }
}

void SnapshotServer::SetOnProxiesChanged(std::function<void()> callback) {
  std::lock_guard lock(mu_);
  on_changed_ = std::move(callback);
}

std::string SnapshotServer::current_version() const {
  std::lock_guard lock(mu_);
  return current_ ? current_->snapshot.version() : std::string();
}

std::vector<ProxyStatus> SnapshotServer::Proxies() const {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  std::vector<ProxyStatus> proxies;
  for (const auto& [id, stream] : streams_) {
    if (stream.hello_seen) {
      proxies.push_back(stream.status);
      proxies.back().versions.unresponsive = UnresponsiveLocked(stream, now);
    }
  }
  return proxies;
}

bool SnapshotServer::UnresponsiveLocked(const StreamState& stream,
                                        std::chrono::steady_clock::time_point now) const {
  return stream.status.awaiting_reply && now - stream.sent_at > options_.ack_timeout;
}

std::vector<ProxyVersions> SnapshotServer::LocalProxiesLocked() const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<ProxyVersions> proxies;
  for (const auto& [id, stream] : streams_) {
    if (stream.hello_seen) {
      proxies.push_back(stream.status.versions);
      proxies.back().unresponsive = UnresponsiveLocked(stream, now);
    }
  }
  return proxies;
}

void SnapshotServer::WatchAcks(std::stop_token stop) {
  std::unique_lock lock(mu_);
  std::size_t reported = 0;  // unresponsive proxies at the last notification
  while (!stop.stop_requested()) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<PendingWrite> writes;
    std::optional<std::chrono::steady_clock::time_point> next =
        ExpireInitialSendsLocked(now, &writes);
    if (!writes.empty()) {
      lock.unlock();
      WriteAll(writes);
      lock.lock();
      continue;  // the places they took time out as well
    }
    std::size_t unresponsive = 0;
    for (const auto& [id, stream] : streams_) {
      if (!stream.hello_seen || !stream.status.awaiting_reply) {
        continue;
      }
      if (UnresponsiveLocked(stream, now)) {
        ++unresponsive;
      } else {
        auto deadline = stream.sent_at + options_.ack_timeout + std::chrono::milliseconds(1);
        next = next ? std::min(*next, deadline) : deadline;
      }
    }
    if (unresponsive_ != nullptr) {
      unresponsive_->Set(static_cast<double>(unresponsive));
    }
    if (unresponsive != reported) {
      if (unresponsive > reported) {
        Log(LogLevel::kWarn, "grpc",
            "a proxy does not answer snapshots: not counted for Programmed",
            {{"unresponsive", std::to_string(unresponsive)},
             {"ack_timeout_ms", std::to_string(options_.ack_timeout.count())}});
      }
      reported = unresponsive;
      lock.unlock();
      NotifyChanged();  // Programmed stops (or starts again) counting it
      lock.lock();
      continue;
    }
    const uint64_t events = ack_events_;
    auto changed = [&] { return ack_events_ != events; };
    ack_watch_until_ = next;
    if (next) {
      ack_wake_.wait_until(lock, stop, *next, changed);
    } else {
      ack_wake_.wait(lock, stop, changed);
    }
    ack_watch_until_ = std::nullopt;  // looking again: every change counts
  }
}

std::vector<ProxyVersions> SnapshotServer::ConnectedLocked() const {
  std::vector<ProxyVersions> proxies = LocalProxiesLocked();
  proxies.insert(proxies.end(), remote_.begin(), remote_.end());
  return proxies;
}

std::vector<ProxyVersions> SnapshotServer::LocalProxies() const {
  std::lock_guard lock(mu_);
  return LocalProxiesLocked();
}

std::vector<ProxyVersions> SnapshotServer::RemoteProxies() const {
  std::lock_guard lock(mu_);
  return remote_;
}

void SnapshotServer::SetRemoteProxies(std::vector<ProxyVersions> proxies) {
  {
    std::lock_guard lock(mu_);
    if (proxies == remote_) {
      return;
    }
    remote_ = std::move(proxies);
    ++proxies_epoch_;
    remote_versions_.clear();
    for (const ProxyVersions& remote : remote_) {
      remote_versions_.insert(remote.acked_version);
      remote_versions_.insert(remote.nacked_version);
    }
    if (remote_proxies_ != nullptr) {
      remote_proxies_->Set(static_cast<double>(remote_.size()));
    }
  }
  NotifyChanged();
}

SnapshotLookup SnapshotServer::LookupLocked() const {
  return [this](std::string_view version) -> const v1::Snapshot* {
    auto it = history_.find(version);
    return it == history_.end() ? nullptr : &it->second->snapshot;
  };
}

const std::vector<ProxyFold>& SnapshotServer::FoldedLocked() const {
  const auto now = std::chrono::steady_clock::now();
  if (folded_epoch_ != proxies_epoch_ || now > folded_until_) {
    folded_ = FoldProxies(ConnectedLocked());
    folded_epoch_ = proxies_epoch_;
    // Until the first awaited answer's timeout passes (UnresponsiveLocked
    // turns true after it).
    folded_until_ = std::chrono::steady_clock::time_point::max();
    for (const auto& [id, stream] : streams_) {
      if (stream.hello_seen && stream.status.awaiting_reply && !UnresponsiveLocked(stream, now)) {
        folded_until_ = std::min(folded_until_, stream.sent_at + options_.ack_timeout);
      }
    }
  }
  return folded_;
}

compile::Condition SnapshotServer::ProgrammedFor(const compile::ObjectStatus& object) const {
  std::lock_guard lock(mu_);
  return ProgrammedCondition(object.kind, object.namespace_, object.name, object.generation,
                             FoldedLocked(), LookupLocked());
}

std::vector<ProgrammedStatus> SnapshotServer::ProgrammedConditions() const {
  std::lock_guard lock(mu_);
  std::vector<ProgrammedStatus> conditions;
  if (!current_) {
    return conditions;
  }
  const std::vector<ProxyFold>& proxies = FoldedLocked();
  SnapshotLookup lookup = LookupLocked();
  for (const auto& object : current_->statuses) {
    if (object.kind == model::kSapSystemKind) {
      continue;  // configures the controller, not the proxies
    }
    ProgrammedStatus status;
    status.kind = object.kind;
    status.namespace_ = object.namespace_;
    status.name = object.name;
    status.generation = object.generation;
    status.condition = ProgrammedCondition(object.kind, object.namespace_, object.name,
                                           object.generation, proxies, lookup);
    conditions.push_back(std::move(status));
  }
  return conditions;
}

}  // namespace kwd::snapshot_server
