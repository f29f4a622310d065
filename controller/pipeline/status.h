#pragma once

// Status conditions on LogonGroups and UrlMappings: the pure diff that
// decides what (if anything) to write, and the writer that writes it through
// the status subresource, only while this replica leads.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "controller/compile/compile.h"
#include "controller/kube/backoff.h"
#include "controller/kube/kube_api.h"
#include "controller/model/model.h"

namespace kwd::pipeline {

// metav1.Time: RFC 3339 in UTC, whole seconds.
std::string FormatTime(std::chrono::system_clock::time_point time);

// "/apis/dispatch.kwd.io/v1alpha1/namespaces/NS/logongroups/NAME".
std::string ObjectPath(std::string_view kind, std::string_view namespace_, std::string_view name);

// The whole `status` to write so that the object says `desired`, or nullopt
// when `observed` (the object's current status, or null) already says it.
// A condition keeps its lastTransitionTime while its status (True/False)
// stays; conditions of other types (e.g. Programmed) are kept as they are.
std::optional<nlohmann::json> StatusToWrite(const compile::ObjectStatus& desired,
                                            const nlohmann::json* observed,
                                            std::chrono::system_clock::time_point now);

// Every LogonGroup's and UrlMapping's status in `result` as a JSON document
// for the admin port's /debug/objects: {"objects": [{kind, namespace, name,
// generation, accepted, servingLastGood, lastGoodGeneration, conditions}],
// "rejected": N}.
std::string ObjectsJson(const compile::CompileResult& result);

struct StatusUpdate {
  model::ObjectKey key;
  nlohmann::json status;
};

struct StatusWriterOptions {
  kube::BackoffPolicy backoff{std::chrono::milliseconds(200), std::chrono::seconds(30), 2.0, 0.5};
};

// Writes status updates with a merge patch on the status subresource. Owns
// one thread (Run). Updates for the same object replace each other; a
// failed write is retried with jittered backoff; 404 (the object is gone) is
// dropped. Nothing is written unless SetLeader(true): losing the lease drops
// what is pending at once.
class StatusWriter {
 public:
  StatusWriter(kube::KubeApi& api, StatusWriterOptions options, MetricsRegistry* metrics);

  void Run(std::stop_token stop);
  void Submit(std::vector<StatusUpdate> updates);
  void SetLeader(bool leader);
  bool leader() const;
  std::size_t pending() const;

 private:
  struct Pending {
    std::string path;
    nlohmann::json status;
    std::uint64_t sequence = 0;
    std::chrono::steady_clock::time_point not_before{};
    std::optional<kube::Backoff> backoff;
  };

  Counter* CounterFor(std::string_view result);
  void Count(std::string_view result);

  kube::KubeApi& api_;
  const StatusWriterOptions options_;
  MetricsRegistry* metrics_;
  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  bool leader_ = false;
  std::uint64_t next_sequence_ = 1;
  std::map<model::ObjectKey, Pending> pending_;
  // What this replica wrote last while leading: an update the watch has not
  // echoed back yet is not written twice.
  std::map<model::ObjectKey, nlohmann::json> written_;
};

}  // namespace kwd::pipeline
