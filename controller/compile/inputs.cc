// The inputs of a LogonGroup's compile, indexed up front for the pure
// compile (the memo has its own, recording implementation: memo.cc).

#include <string>
#include <string_view>
#include <vector>

#include "controller/compile/internal.h"

namespace kwd::compile::internal {

SliceIndex IndexSlices(const ObjectSet& objects) {
  static const std::string kServiceNameLabel(model::kServiceNameLabel);
  SliceIndex index;
  for (const auto& [key, slice] : objects.endpoint_slices()) {
    auto label = slice.metadata.labels.find(kServiceNameLabel);
    if (label == slice.metadata.labels.end()) {
      continue;
    }
    index[{slice.metadata.namespace_, label->second}].push_back(&slice);
  }
  return index;
}

PodIndex IndexPods(const ObjectSet& objects) {
  PodIndex index;
  index.reserve(objects.pods().size());
  for (const auto& [key, pod] : objects.pods()) {
    index.emplace(PodKey{key.first, key.second}, &pod);
  }
  return index;
}

IndexedInputs::IndexedInputs(const ObjectSet& objects)
    : objects_(objects), slices_(IndexSlices(objects)), pods_(IndexPods(objects)) {}

const model::SapSystem* IndexedInputs::FindSapSystem(const std::string& ns,
                                                     const std::string& name) {
  auto it = objects_.sap_systems().find({ns, name});
  return it == objects_.sap_systems().end() ? nullptr : &it->second;
}

const model::SapServerList* IndexedInputs::FindServerList(const std::string& ns,
                                                          const std::string& name) {
  auto it = objects_.sap_server_lists().find({ns, name});
  return it == objects_.sap_server_lists().end() ? nullptr : &it->second;
}

const std::vector<const EndpointSlice*>* IndexedInputs::SlicesOf(const std::string& ns,
                                                                 const std::string& service) {
  auto it = slices_.find({ns, service});
  return it == slices_.end() ? nullptr : &it->second;
}

const model::Pod* IndexedInputs::FindPod(std::string_view ns, std::string_view name) {
  auto it = pods_.find(PodKey{ns, name});
  return it == pods_.end() ? nullptr : it->second;
}

}  // namespace kwd::compile::internal
