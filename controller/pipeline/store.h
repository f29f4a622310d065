#pragma once

// The controller's object store: the compiler's ObjectSet plus what the
// compile does not read but the controller needs (each custom resource's
// current status, for status diffs). Owned by the pipeline thread; not
// thread-safe.
//
// Every write reports whether something the compile reads changed, so that
// unrelated churn (pod status, status writes echoed back by the watch,
// EndpointSlices of Services no LogonGroup names) never triggers a rebuild.
// Secrets are kept only while a UrlMapping's spec.tls names them: others
// are dropped on arrival, and one that stops being named is forgotten.

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/compile/compile.h"
#include "controller/model/model.h"

namespace kwd::pipeline {

// One object as a watch or a file delivers it, decoded.
struct ObservedObject {
  model::Object object;
  // The status as the API server holds it (LogonGroup/UrlMapping); null when absent.
  nlohmann::json status;
};

// Reduces an object to what the compile reads, so equality means "no
// relevant change": resourceVersions are dropped everywhere, and pods keep
// only the three dispatch.kwd.io annotations (capacity, instance-name, drain).
void TrimForCompile(model::Object* object);

class ObjectStore {
 public:
  // Each returns whether the compile's view changed.
  bool Upsert(ObservedObject observed);
  bool Remove(const model::ObjectKey& key);
  // Makes the objects of `kind` (in `namespace_`, or everywhere when it is
  // empty) exactly `objects`: what a relist or a directory reload delivers.
  bool Replace(std::string_view kind, std::string_view namespace_,
               std::vector<ObservedObject> objects);

  const model::ObjectSet& objects() const { return objects_; }
  // compile::Compile(objects(), &last_good()), compiling again only the
  // LogonGroups that the writes since the last call touched (every write is
  // reported to the store's CompileMemo).
  // `now_unix_seconds`: the time certificates are judged against (0: not checked).
  compile::CompileResult Compile(std::int64_t now_unix_seconds = 0) {
    objects_.set_now_unix_seconds(now_unix_seconds);
    return compile::Compile(objects_, memo_, &last_good_);
  }
  const compile::CompileMemo& memo() const { return memo_; }
  // Remembers the objects `result` (a Compile() of the current objects that
  // is being served) accepted as their last good versions.
  void RememberAccepted(const compile::CompileResult& result);
  const compile::LastGood& last_good() const { return last_good_; }
  // The status the API server last reported for a LogonGroup/UrlMapping, or null.
  const nlohmann::json* ObservedStatus(const model::ObjectKey& key) const;
  std::size_t CountOf(std::string_view kind) const;
  // Secrets some UrlMapping's spec.tls names that the store does not hold
  // (dropped on arrival before the reference, or not delivered yet), each
  // reported once until it arrives; a source may fetch them.
  std::vector<model::ObjectKey> TakeWantedSecrets();

 private:
  using NamespacedName = model::ObjectSet::NamespacedName;

  bool IsRelevant(const model::Object& object) const;
  void Index(const model::Object& object, int delta);
  std::vector<model::ObjectKey> KeysOf(std::string_view kind, std::string_view namespace_) const;

  model::ObjectSet objects_;
  compile::CompileMemo memo_;
  compile::LastGood last_good_;
  std::map<model::ObjectKey, nlohmann::json> statuses_;
  // (namespace, service) named by LogonGroups, with reference counts.
  std::map<NamespacedName, int> referenced_services_;
  // (namespace, pod) named by EndpointSlice targetRefs, with reference counts.
  std::map<NamespacedName, int> referenced_pods_;
  // (namespace, secret) named by UrlMapping spec.tls, with reference counts.
  // Only these Secrets are kept (private keys stay out of memory otherwise).
  std::map<NamespacedName, int> referenced_secrets_;
  std::set<NamespacedName> wanted_secrets_;
};

}  // namespace kwd::pipeline
