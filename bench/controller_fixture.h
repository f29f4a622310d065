#pragma once

// The controller benchmarks' cluster: 10,000 endpoints over 1,000 Services
// and LogonGroups (one EndpointSlice and ten annotated Pods each) and one
// UrlMapping with a rule per group, as the reflectors would hand them to
// the pipeline. Used by controller_bench and propagation_bench.

#include <cstdlib>
#include <string>
#include <vector>

#include "controller/pipeline/pipeline.h"

namespace kwd::bench {

using nlohmann::json;

inline constexpr int kGroups = 1000;
inline constexpr int kEndpointsPerGroup = 10;

inline kwd::pipeline::ObservedObject Decode(const json& object) {
  auto decoded = kwd::model::DecodeObject(object);
  if (!decoded.ok()) {
    std::abort();  // the fixture itself is wrong
  }
  return {std::move(*decoded.object), nullptr};
}

// Group g's EndpointSlice; endpoint `not_ready` (-1: none) is not ready.
inline json Slice(int g, int not_ready) {
  std::string service = "svc-" + std::to_string(g);
  json endpoints = json::array();
  for (int e = 0; e < kEndpointsPerGroup; ++e) {
    std::string address = "10." + std::to_string(g / 250) + "." + std::to_string(g % 250) + "." +
                          std::to_string(e + 1);
    endpoints.push_back(
        {{"addresses", {address}},
         {"conditions", {{"ready", e != not_ready}}},
         {"targetRef",
          {{"kind", "Pod"}, {"namespace", "erp"}, {"name", service + "-" + std::to_string(e)}}}});
  }
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata",
           {{"name", service + "-abcde"},
            {"namespace", "erp"},
            {"labels", {{"kubernetes.io/service-name", service}}}}},
          {"addressType", "IPv4"},
          {"endpoints", endpoints},
          {"ports", {{{"name", "http"}, {"port", 8000}}}}};
}

inline std::vector<kwd::pipeline::ObservedObject> BuildObjects() {
  std::vector<kwd::pipeline::ObservedObject> objects;
  json rules = json::array();
  for (int g = 0; g < kGroups; ++g) {
    std::string name = "g" + std::to_string(g);
    std::string service = "svc-" + std::to_string(g);
    objects.push_back(
        Decode({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
                {"kind", "LogonGroup"},
                {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", 1}}},
                {"spec", {{"backend", {{"service", {{"name", service}, {"port", "http"}}}}}}}}));
    for (int e = 0; e < kEndpointsPerGroup; ++e) {
      objects.push_back(Decode({{"apiVersion", "v1"},
                                {"kind", "Pod"},
                                {"metadata",
                                 {{"name", service + "-" + std::to_string(e)},
                                  {"namespace", "erp"},
                                  {"annotations",
                                   {{"dispatch.kwd.io/instance-name",
                                     "host" + std::to_string(g) + "_ERP_" + std::to_string(e)},
                                    {"dispatch.kwd.io/capacity", std::to_string(1 + e % 4)}}}}}}));
    }
    objects.push_back(Decode(Slice(g, -1)));
    rules.push_back(
        {{"prefix", "/app" + std::to_string(g) + "/"}, {"kind", "abap"}, {"logonGroup", name}});
  }
  objects.push_back(Decode({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
                            {"kind", "UrlMapping"},
                            {"metadata", {{"name", "erp"}, {"namespace", "erp"}}},
                            {"spec", {{"rules", rules}}}}));
  return objects;
}

}  // namespace kwd::bench
