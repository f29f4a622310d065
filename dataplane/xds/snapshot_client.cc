#include "dataplane/xds/snapshot_client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/file.h"
#include "common/grpc_log.h"
#include "common/log.h"
#include "common/pem_files.h"
#include "common/snapshot_delta.h"
#include "common/snapshot_io.h"
#include "kwd/v1/discovery.grpc.pb.h"

namespace kwd::xds {
namespace {

// Null (with `error`) when the files cannot be read now.
std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::optional<ClientTls>& tls,
                                                      std::string* error) {
  if (!tls) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls->ca_path.empty() &&
      !CheckCertificateFile("--controller-ca", tls->ca_path, error, &ssl.pem_root_certs)) {
    return nullptr;
  }
  if (!tls->cert_path.empty() &&
      !CheckKeyPairFiles("--controller-cert", tls->cert_path, "--controller-key", tls->key_path,
                         error, &ssl.pem_cert_chain, &ssl.pem_private_key)) {
    return nullptr;
  }
  return grpc::SslCredentials(ssl);
}

void SetNack(v1::SnapshotRequest* reply, int code, const std::string& message) {
  reply->mutable_error_detail()->set_code(code);
  reply->mutable_error_detail()->set_message(message);
}

}  // namespace

bool CheckClientTls(const ClientTls& tls, std::string* error) {
  if (tls.cert_path.empty() != tls.key_path.empty()) {
    *error = "a client certificate needs both --controller-cert and --controller-key";
    return false;
  }
  return Credentials(tls, error) != nullptr;
}

std::chrono::milliseconds BackoffDelay(const BackoffPolicy& policy, int failures, double random01) {
  double base = static_cast<double>(policy.initial.count()) *
                std::pow(policy.multiplier, std::max(0, failures - 1));
  base = std::min(base, static_cast<double>(policy.max.count()));
  double scaled = base * (1.0 - policy.jitter * std::clamp(random01, 0.0, 1.0));
  return std::chrono::milliseconds(static_cast<int64_t>(scaled));
}

SnapshotClient::SnapshotClient(SnapshotClientOptions options, ApplyFunction apply,
                               MetricsRegistry* metrics)
    : options_(std::move(options)), apply_(std::move(apply)), random_(options_.random_seed) {
  if (metrics != nullptr) {
    connected_gauge_ = &metrics->GetGauge(
        "kwd_proxy_controller_connected",
        "1 while the snapshot stream to the controller is up (a response arrived), else 0.");
    connects_ = &metrics->GetCounter("kwd_proxy_controller_streams_total",
                                     "Snapshot streams that received at least one response.");
    acks_counter_ = &metrics->GetCounter("kwd_proxy_snapshot_acks_total",
                                         "Snapshot responses accepted (ACK sent).");
    deltas_counter_ = &metrics->GetCounter(
        "kwd_proxy_snapshot_deltas_applied_total",
        "Endpoint-only deltas applied (patched into the running snapshot, not sent whole).");
    nacks_counter_ = &metrics->GetCounter(
        "kwd_proxy_snapshot_nacks_total",
        "Snapshot responses rejected (NACK sent); the previous snapshot kept serving.");
    cache_loads_ = &metrics->GetCounter(
        "kwd_proxy_snapshot_cache_loads_total",
        "Snapshots applied from the --snapshot-cache file because the controller did not answer.");
    cache_errors_ = &metrics->GetCounter(
        "kwd_proxy_snapshot_cache_errors_total",
        "--snapshot-cache files that could not be read, parsed, verified, applied or written.");
  }
}

SnapshotClient::~SnapshotClient() {
  Stop();
}

void SnapshotClient::Start() {
  RouteGrpcLogsToKwdLog();
  std::lock_guard lock(mu_);
  if (!thread_.joinable()) {
    stopping_ = false;
    thread_ = std::thread([this] { Run(); });
  }
}

void SnapshotClient::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (context_ != nullptr) {
      context_->TryCancel();
    }
  }
  changed_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool SnapshotClient::connected() const {
  std::lock_guard lock(mu_);
  return connected_;
}

std::string SnapshotClient::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

uint64_t SnapshotClient::acks() const {
  std::lock_guard lock(mu_);
  return acks_;
}

uint64_t SnapshotClient::nacks() const {
  std::lock_guard lock(mu_);
  return nacks_;
}

uint64_t SnapshotClient::streams_started() const {
  std::lock_guard lock(mu_);
  return streams_;
}

bool SnapshotClient::WaitForVersion(const std::string& version,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return version_ == version; });
}

bool SnapshotClient::WaitForConnected(bool connected, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return connected_ == connected; });
}

void SnapshotClient::SetConnected(bool connected) {
  {
    std::lock_guard lock(mu_);
    connected_ = connected;
    if (connected) {
      ++streams_;
    }
  }
  if (connected_gauge_ != nullptr) {
    connected_gauge_->Set(connected ? 1 : 0);
  }
  if (connected && connects_ != nullptr) {
    connects_->Inc();
  }
  changed_.notify_all();
}

void SnapshotClient::Run() {
  int failures = 0;
  bool cache_settled = options_.cache_path.empty();
  for (;;) {
    std::thread watchdog;
    if (!cache_settled) {
      // A controller that refuses, accepts but never answers, or sits behind
      // an address that drops packets must not keep the cache from serving:
      // the first attempt is cut after cache_wait unless a snapshot was
      // applied by then.
      watchdog = std::thread([this] {
        std::unique_lock lock(mu_);
        if (!changed_.wait_for(lock, options_.cache_wait, [&] {
              return stopping_ || first_attempt_over_ || !version_.empty();
            })) {
          first_attempt_cut_ = true;
          last_error_ = "no snapshot within " + std::to_string(options_.cache_wait.count()) + "ms";
          if (context_ != nullptr) {
            context_->TryCancel();
          }
        }
      });
    }
    bool received = RunStream();
    if (!cache_settled) {
      // Once: the first attempt either brought a snapshot or the cache stands
      // in for the controller until it does.
      {
        std::lock_guard lock(mu_);
        first_attempt_over_ = true;
      }
      changed_.notify_all();
      watchdog.join();
      {
        std::lock_guard lock(mu_);
        first_attempt_cut_ = false;
      }
      cache_settled = true;
      if (version().empty()) {
        LoadCache();
      }
    }
    std::unique_lock lock(mu_);
    if (stopping_) {
      return;
    }
    failures = received ? 1 : failures + 1;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    auto delay = BackoffDelay(options_.backoff, failures, uniform(random_));
    // The reason says what to fix: a refused certificate, an unknown CA, a
    // wrong server name, an unreadable file, or just a controller that is away.
    Log(LogLevel::kWarn, "xds", "controller stream down; serving the last good snapshot",
        {{"controller", options_.target},
         {"version", version_.empty() ? "none" : version_},
         {"retry_in_ms", std::to_string(delay.count())},
         {"error", last_error_.empty() ? "stream closed" : last_error_}});
    last_error_.clear();
    changed_.wait_for(lock, delay, [&] { return stopping_; });
    if (stopping_) {
      return;
    }
  }
}

void SnapshotClient::LoadCache() {
  const std::string& path = options_.cache_path;
  if (access(path.c_str(), F_OK) != 0) {
    Log(LogLevel::kInfo, "xds", "no snapshot cache yet; waiting for the controller",
        {{"file", path}});
    return;
  }
  auto ignore = [&](const std::string& error) {
    if (cache_errors_ != nullptr) {
      cache_errors_->Inc();
    }
    Log(LogLevel::kWarn, "xds", "snapshot cache ignored; waiting for the controller",
        {{"file", path}, {"error", error}});
  };
  v1::Snapshot snapshot;
  std::string error;
  // Verifies the content against its version: a truncated or edited file
  // is refused here.
  if (!LoadSnapshotFile(path, &snapshot, &error)) {
    ignore(error);
    return;
  }
  SnapshotDigests digests = ComputeSnapshotDigests(snapshot);
  if (!apply_(snapshot, &error)) {
    ignore(error);
    return;
  }
  const std::string version = snapshot.version();
  running_snapshot_ = std::move(snapshot);
  running_digests_ = std::move(digests);
  cache_written_version_ = version;
  {
    std::lock_guard lock(mu_);
    version_ = version;
    serving_cache_ = true;
  }
  if (cache_loads_ != nullptr) {
    cache_loads_->Inc();
  }
  Log(LogLevel::kWarn, "xds", "controller did not answer; serving the cached snapshot",
      {{"file", path}, {"version", version}, {"controller", options_.target}});
  changed_.notify_all();
  if (options_.on_serving) {
    options_.on_serving(version, true);
  }
}

void SnapshotClient::WriteCache() {
  // On every ACK, but only when the file does not hold the running version
  // yet (a failed write is tried again on the next ACK).
  if (options_.cache_path.empty() || running_snapshot_.version().empty() ||
      cache_written_version_ == running_snapshot_.version()) {
    return;
  }
  std::string error;
  // With the certificates' private keys (UrlMapping.spec.tls), so that a
  // proxy started from the cache serves them: owner-only.
  if (WriteFileAtomically(options_.cache_path,
                          SnapshotToJsonWithPrivateKeys(running_snapshot_) + "\n", &error,
                          0600)) {
    cache_written_version_ = running_snapshot_.version();
  } else {
    if (cache_errors_ != nullptr) {
      cache_errors_->Inc();
    }
    Log(LogLevel::kWarn, "xds", "cannot write the snapshot cache; serving goes on",
        {{"version", running_snapshot_.version()}, {"error", error}});
  }
}

bool SnapshotClient::RunStream() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options_.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options_.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetMaxReceiveMessageSize(-1);
  // A channel of its own per attempt: our backoff decides when to retry, not
  // a shared channel's reconnect timer.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (options_.tls && !options_.tls->server_name.empty()) {
    args.SetSslTargetNameOverride(options_.tls->server_name);
  }
  std::string credentials_error;
  auto credentials = Credentials(options_.tls, &credentials_error);
  if (!credentials) {
    std::lock_guard lock(mu_);
    last_error_ = credentials_error;
    return false;
  }
  auto channel = grpc::CreateCustomChannel(options_.target, credentials, args);
  auto stub = v1::SnapshotDiscovery::NewStub(channel);
  grpc::ClientContext context;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || first_attempt_cut_) {
      return false;
    }
    context_ = &context;
  }
  auto stream = stub->StreamSnapshots(&context);
  v1::SnapshotRequest hello;
  hello.set_node_id(options_.node_id);
  hello.set_version_info(version());
  hello.set_accepts_deltas(options_.accept_deltas);
  bool received = false;
  if (stream->Write(hello)) {
    v1::SnapshotResponse response;
    while (stream->Read(&response)) {
      if (!received) {
        received = true;
        SetConnected(true);
        Log(LogLevel::kInfo, "xds", "connected to the controller",
            {{"controller", options_.target}, {"version", response.version_info()}});
      }
      v1::SnapshotRequest reply;
      reply.set_node_id(options_.node_id);
      reply.set_response_nonce(response.nonce());
      std::string running = version();
      reply.set_version_info(running);
      std::string error;
      int error_code = grpc::StatusCode::INVALID_ARGUMENT;
      bool applied = false;
      if (response.has_delta()) {
        applied = ApplyDelta(&response, running, &error, &error_code);
      } else if (!response.has_snapshot()) {
        if (response.version_info() != running) {
          error = "response for version " + response.version_info() + " carries no snapshot";
        }
      } else if (response.snapshot().version() != response.version_info()) {
        error = "response version " + response.version_info() +
                " differs from its snapshot's version " + response.snapshot().version();
      } else if (response.version_info() != running) {
        // The content must hash to its version; the digests are kept so that
        // a later delta re-hashes only the groups it changes.
        SnapshotDigests digests = ComputeSnapshotDigests(response.snapshot());
        if (digests.Version() != response.version_info()) {
          error = "snapshot content does not hash to its version " + response.version_info();
        } else if (apply_(response.snapshot(), &error)) {
          applied = true;
          // Kept (moved, not copied) as the base for deltas.
          running_snapshot_ = std::move(*response.mutable_snapshot());
          running_digests_ = std::move(digests);
        }
      }
      if (applied) {
        reply.set_version_info(response.version_info());
      }
      bool confirmed_cache = false;  // the controller serves what the cache held
      {
        std::lock_guard lock(mu_);
        if (error.empty()) {
          ++acks_;
          if (applied) {
            version_ = response.version_info();
          }
          confirmed_cache = serving_cache_;
          serving_cache_ = false;
        } else {
          ++nacks_;
        }
      }
      if (error.empty()) {
        if (acks_counter_ != nullptr) {
          acks_counter_->Inc();
        }
        if (applied) {
          Log(LogLevel::kInfo, "xds", "snapshot applied", {{"version", response.version_info()}});
          changed_.notify_all();
          if (options_.on_applied) {
            options_.on_applied(response.version_info());
          }
        }
        WriteCache();
        if ((applied || confirmed_cache) && options_.on_serving) {
          options_.on_serving(reply.version_info(), false);
        }
      } else {
        SetNack(&reply, error_code, error);
        if (nacks_counter_ != nullptr) {
          nacks_counter_->Inc();
        }
        Log(LogLevel::kError, "xds", "snapshot rejected (NACK); the previous one keeps serving",
            {{"version", response.version_info()},
             {"delta", response.has_delta() ? "true" : "false"},
             {"running", running.empty() ? "none" : running},
             {"error", error}});
        changed_.notify_all();
      }
      if (!stream->Write(reply)) {
        break;
      }
    }
  }
  context.TryCancel();
  grpc::Status status = stream->Finish();
  {
    std::lock_guard lock(mu_);
    context_ = nullptr;
  }
  if (received) {
    SetConnected(false);
  }
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    std::lock_guard lock(mu_);
    last_error_ = status.error_message();
  }
  return received;
}

bool SnapshotClient::ApplyDelta(v1::SnapshotResponse* response, const std::string& running,
                                std::string* error, int* error_code) {
  v1::SnapshotDelta* delta = response->mutable_delta();
  if (running.empty() || delta->base_version() != running ||
      running_snapshot_.version() != running) {
    // The controller answers this NACK with the whole snapshot.
    *error_code = grpc::StatusCode::FAILED_PRECONDITION;
    *error = "delta applies to version " + delta->base_version() + ", but this proxy runs " +
             (running.empty() ? "none" : running);
    return false;
  }
  if (response->version_info() == running) {
    return false;  // nothing to do: ACK what runs
  }
  // Patched in place; the same swap undoes it if the result is rejected.
  std::vector<int> changed;
  if (!SwapDeltaServers(&running_snapshot_, delta, &changed, error)) {
    return false;
  }
  SnapshotDigests digests = running_digests_;
  for (int index : changed) {
    UpdateGroupDigest(running_snapshot_, index, &digests);
  }
  if (digests.Version() == response->version_info()) {
    running_snapshot_.set_version(response->version_info());
    if (apply_(running_snapshot_, error)) {
      running_digests_ = std::move(digests);
      if (deltas_counter_ != nullptr) {
        deltas_counter_->Inc();
      }
      return true;
    }
  } else {
    *error =
        "snapshot content after the delta does not hash to version " + response->version_info();
  }
  std::string undo_error;
  SwapDeltaServers(&running_snapshot_, delta, nullptr, &undo_error);
  running_snapshot_.set_version(running);
  return false;
}

}  // namespace kwd::xds
