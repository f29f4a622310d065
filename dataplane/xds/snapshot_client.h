#pragma once

// The proxy's side of snapshot distribution (proto/kwd/v1/discovery.proto):
// one thread keeps a stream to the controller open, applies each snapshot it
// receives through `apply` (which validates completely before swapping) and
// answers with an ACK, or a NACK with the reason while the last good
// snapshot keeps serving. When the stream breaks, the proxy keeps serving
// what it has and reconnects with jittered exponential backoff.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "common/snapshot_io.h"
#include "kwd/v1/discovery.pb.h"
#include "kwd/v1/snapshot.pb.h"

namespace grpc {
class ClientContext;
}

namespace kwd::xds {

// PEM files, read again on every connection attempt (renewed certificates
// take effect on the next reconnect). ca_path verifies the controller's
// certificate (empty: the system roots); cert_path/key_path, when set, are the
// proxy's client certificate for a controller that requires one.
// server_name is the name the controller's certificate must carry (empty: the
// host part of the target).
struct ClientTls {
  std::string ca_path;
  std::string cert_path;
  std::string key_path;
  std::string server_name;
};

// Checks the files (readable, PEM, key belongs to the certificate; cert and
// key come together); errors name the flag and the file.
bool CheckClientTls(const ClientTls& tls, std::string* error);

struct BackoffPolicy {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{5'000};
  double multiplier = 2.0;
  double jitter = 0.5;  // the delay is scaled by a factor in [1 - jitter, 1]
};

// The delay before reconnect attempt `failures` (1 = after the first
// failure), given a uniform `random01` in [0, 1).
std::chrono::milliseconds BackoffDelay(const BackoffPolicy& policy, int failures, double random01);

// Validates and applies; on failure returns false and says why in `error`.
using ApplyFunction = std::function<bool(const v1::Snapshot& snapshot, std::string* error)>;

struct SnapshotClientOptions {
  std::string target;   // HOST:PORT of the controller
  std::string node_id;  // sent on every stream
  std::optional<ClientTls> tls;
  BackoffPolicy backoff;
  std::chrono::milliseconds keepalive_time{10'000};
  std::chrono::milliseconds keepalive_timeout{5'000};
  uint64_t random_seed = std::random_device{}();
  // Ask for endpoint-only deltas (see discovery.proto); false: whole snapshots only.
  bool accept_deltas = true;
  // Called after each snapshot is applied (on the client thread).
  std::function<void(const std::string& version)> on_applied;
  // --snapshot-cache: the snapshot acknowledged to the controller is written
  // here on every ACK that changes it (atomically, as `kwd-controller
  // compile` JSON; a failed write is retried on the next ACK). At start, when the
  // first attempt brings no snapshot (refused, or nothing within
  // `cache_wait`: the attempt is cut then), the file's snapshot is applied,
  // so that a proxy restarted during a controller outage serves at once. A
  // missing, corrupt or truncated file is logged and ignored; the
  // controller's snapshot replaces the cached one when it answers.
  std::string cache_path;
  std::chrono::milliseconds cache_wait{1'000};
  // Called on the client thread whenever what is served changes: a new
  // version, or the same version confirmed by the controller after the
  // cache. `from_cache` says where the served snapshot came from.
  std::function<void(const std::string& version, bool from_cache)> on_serving;
};

class SnapshotClient {
 public:
  // `metrics` may be null (e.g. many in-process subscribers in a benchmark).
  SnapshotClient(SnapshotClientOptions options, ApplyFunction apply, MetricsRegistry* metrics);
  ~SnapshotClient();
  SnapshotClient(const SnapshotClient&) = delete;
  SnapshotClient& operator=(const SnapshotClient&) = delete;

  void Start();
  void Stop();

  bool connected() const;
  // The version applied last ("" before the first).
  std::string version() const;
  uint64_t acks() const;
  uint64_t nacks() const;
  uint64_t streams_started() const;
  // Blocks until version() == `version` or the timeout passes.
  bool WaitForVersion(const std::string& version, std::chrono::milliseconds timeout) const;
  // Blocks until connected() == `connected` or the timeout passes.
  bool WaitForConnected(bool connected, std::chrono::milliseconds timeout) const;

 private:
  void Run();
  // One stream until it breaks; returns whether it received anything.
  bool RunStream();
  // Applies the snapshot cache file, if there is a usable one.
  void LoadCache();
  // Writes running_snapshot_ to the cache file (client thread).
  void WriteCache();
  void SetConnected(bool connected);
  // Patches the running snapshot with response->delta() and applies it; on
  // failure the running snapshot is unchanged and error/error_code say why.
  bool ApplyDelta(v1::SnapshotResponse* response, const std::string& running, std::string* error,
                  int* error_code);  // a grpc::StatusCode

  const SnapshotClientOptions options_;
  const ApplyFunction apply_;
  std::mt19937_64 random_;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  bool connected_ = false;
  std::string version_;
  uint64_t acks_ = 0;
  uint64_t nacks_ = 0;
  uint64_t streams_ = 0;
  bool serving_cache_ = false;  // version_ came from the cache file
  // With a cache: the first attempt is over, or was cut after cache_wait.
  bool first_attempt_over_ = false;
  bool first_attempt_cut_ = false;
  std::string last_error_;                  // why the last attempt failed ("" when it just ended)
  grpc::ClientContext* context_ = nullptr;  // of the open stream, to cancel it
  // The version the cache file holds (client thread only).
  std::string cache_written_version_;
  // The snapshot applied last, kept as the base for deltas (client thread only).
  v1::Snapshot running_snapshot_;
  SnapshotDigests running_digests_;  // of running_snapshot_
  std::thread thread_;

  Gauge* connected_gauge_ = nullptr;
  Counter* connects_ = nullptr;
  Counter* acks_counter_ = nullptr;
  Counter* nacks_counter_ = nullptr;
  Counter* deltas_counter_ = nullptr;
  Counter* cache_loads_ = nullptr;
  Counter* cache_errors_ = nullptr;
};

}  // namespace kwd::xds
