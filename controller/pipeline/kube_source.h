#pragma once

// Feeds the pipeline from the Kubernetes API: one reflector per kind and
// namespace (or one cluster-wide per kind).
//
// What is watched, and why this way:
//   - LogonGroups and UrlMappings: every object (they are the configuration).
//   - EndpointSlices: with the label selector `kubernetes.io/service-name`
//     (slices that belong to a Service); the store keeps all of them but only
//     slices of Services a LogonGroup names trigger a rebuild, so a new
//     LogonGroup finds its slices without a new watch.
//   - Pods: watched in the same namespaces, because the capacity,
//     instance-name and drain annotations can change at any time and a lazy
//     GET per targetRef would miss those changes (or poll). Each pod is
//     reduced to these dispatch.kwd.io annotations on arrival, and pod churn
//     that does not touch them (status, labels) never triggers a rebuild.
//   - Secrets: watched in the same namespaces (RBAC: get/list/watch on
//     secrets there). Only tls.crt and tls.key are decoded, and the store
//     keeps only Secrets a UrlMapping's spec.tls names; one named after it
//     was dropped is fetched again with a GET (FetchSecrets).

#include <memory>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "controller/kube/kube_api.h"
#include "controller/kube/reflector.h"
#include "controller/pipeline/pipeline.h"

namespace kwd::pipeline {

struct KubeSourceOptions {
  std::vector<std::string> namespaces;  // empty: all namespaces
  int watch_timeout_seconds = 300;
  kube::BackoffPolicy backoff;
};

// API collection path of `kind` in `namespace_` ("" = all namespaces).
std::string CollectionPath(std::string_view kind, std::string_view namespace_);

// Decodes an object delivered by the API (list item or watch event object).
std::optional<ObservedObject> DecodeObserved(std::string_view kind, const nlohmann::json& json,
                                             std::string* error);

class KubeSource {
 public:
  // Registers one pipeline source per reflector.
  KubeSource(kube::KubeApi& api, Pipeline& pipeline, KubeSourceOptions options);
  ~KubeSource();
  KubeSource(const KubeSource&) = delete;
  KubeSource& operator=(const KubeSource&) = delete;

  void Start();
  void Stop();

  struct KindStats {
    std::string kind;
    kube::ReflectorStats stats;
  };
  // Reflector counters summed per kind.
  std::vector<KindStats> Stats() const;
  bool HasSynced() const;
  // GETs these Secrets (on a thread of the source) and upserts the ones that
  // exist; the pipeline's SecretFetcher. Never blocks.
  void FetchSecrets(std::vector<model::ObjectKey> keys);

 private:
  class Sink;
  struct Watch {
    std::string kind;
    std::unique_ptr<Sink> sink;
    std::unique_ptr<kube::Reflector> reflector;
  };

  void RunFetcher(std::stop_token stop);

  kube::KubeApi& api_;
  Pipeline& pipeline_;
  std::mutex fetch_mu_;
  std::condition_variable_any fetch_cv_;
  std::set<model::ObjectKey> fetch_queue_;
  std::vector<Watch> watches_;
  std::vector<std::jthread> threads_;
};

}  // namespace kwd::pipeline
