// The EndpointSlice and Pod processor: the servers of a LogonGroup whose
// backend is a Service, one per ready (or serving and terminating)
// endpoint, named after its pod (or the pod's instance-name annotation).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "controller/compile/internal.h"

namespace kwd::compile::internal {
namespace {

// A positive integer annotation value, or nullopt.
std::optional<std::uint32_t> ParseCapacity(std::string_view text) {
  if (text.empty() || text.size() > 10) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > kUint32Max) {
    return std::nullopt;
  }
  return static_cast<std::uint32_t>(value);
}

// A server built from an endpoint, before de-duplication. Views into the
// objects only, so the sorts below move a few words per candidate.
struct Candidate {
  std::string_view address;  // points into the EndpointSlice
  std::uint32_t port = 0;
  v1::ServerState state = v1::SERVER_STATE_UNSPECIFIED;
  std::uint32_t capacity = 1;
  std::string_view name;
  // The backing pod "pod_namespace/pod_name", when has_pod.
  bool has_pod = false;
  std::string_view pod_namespace;
  std::string_view pod_name;
};

// The port of `slice` that `service.port` selects, or nullopt.
std::optional<std::uint32_t> SelectPort(const std::optional<model::IntOrString>& wanted,
                                        const EndpointSlice& slice) {
  auto valid = [](const std::optional<std::int64_t>& port) {
    return port && *port >= 1 && *port <= 65535;
  };
  if (!wanted) {
    if (slice.ports.size() == 1 && valid(slice.ports[0].port)) {
      return static_cast<std::uint32_t>(*slice.ports[0].port);
    }
    return std::nullopt;
  }
  if (wanted->is_number) {
    // A slice without ports exposes all ports of its endpoints.
    if (slice.ports.empty()) {
      return static_cast<std::uint32_t>(wanted->number);
    }
    for (const auto& port : slice.ports) {
      if (valid(port.port) && *port.port == wanted->number) {
        return static_cast<std::uint32_t>(*port.port);
      }
    }
    return std::nullopt;
  }
  for (const auto& port : slice.ports) {
    if (valid(port.port) && port.name == wanted->name) {
      return static_cast<std::uint32_t>(*port.port);
    }
  }
  return std::nullopt;
}

// The server an endpoint becomes, or nullopt when its address, pod
// reference or server name is not one a snapshot may hold: that endpoint is
// left out (ResolvedRefs=False says which and why) and the group keeps
// its other servers, as it would without that pod.
std::optional<Candidate> MakeCandidate(GroupInputs& inputs, const EndpointSlice& slice,
                                       const model::Endpoint& endpoint, std::uint32_t port,
                                       v1::ServerState state, std::uint32_t default_capacity,
                                       Findings& findings) {
  static const std::string kInstanceName(model::kInstanceNameAnnotation);
  static const std::string kCapacity(model::kCapacityAnnotation);
  static const std::string kDrain(model::kDrainAnnotation);
  Candidate c;
  c.address = endpoint.addresses.front();
  if (!IsServerAddress(c.address)) {
    findings.Unresolved(kReasonInvalidEndpoint,
                        "endpoint " + Quote(c.address) + " left out: not a valid address");
    return std::nullopt;
  }
  c.port = port;
  c.state = state;
  c.capacity = default_capacity;
  const std::string* name = &endpoint.addresses.front();
  const std::string* annotation = nullptr;  // the instance name's, when it names the server
  auto where = [&] { return "endpoint " + std::string(c.address) + ":" + std::to_string(port); };
  if (endpoint.target_ref && !endpoint.target_ref->name.empty()) {
    const auto& ref = *endpoint.target_ref;
    const std::string& pod_ns = ref.namespace_.empty() ? slice.metadata.namespace_ : ref.namespace_;
    if (!IsNamespaceName(pod_ns) || !IsObjectName(ref.name)) {
      findings.Unresolved(
          kReasonInvalidEndpoint,
          where() + " left out: targetRef " +
              Quote(ref.namespace_.empty() ? ref.name : GroupKey(ref.namespace_, ref.name)) +
              " is not a valid pod name");
      return std::nullopt;
    }
    name = &ref.name;
    if (ref.kind.empty() || ref.kind == model::kPodKind) {
      c.has_pod = true;
      c.pod_namespace = pod_ns;
      c.pod_name = ref.name;
      if (const model::Pod* pod = inputs.FindPod(pod_ns, ref.name)) {
        const auto& annotations = pod->metadata.annotations;
        auto instance = annotations.find(kInstanceName);
        if (instance != annotations.end() && !instance->second.empty()) {
          name = &instance->second;
          annotation = &kInstanceName;
        }
        // dispatch.kwd.io/drain: "true": a ready server takes sticky traffic only.
        auto drain = annotations.find(kDrain);
        if (drain != annotations.end() && drain->second == "true") {
          c.state = v1::SERVER_STATE_DRAINING;
        }
        auto capacity = annotations.find(kCapacity);
        if (capacity != annotations.end()) {
          if (auto parsed = ParseCapacity(capacity->second)) {
            c.capacity = *parsed;
          } else {
            findings.Note("pod " + GroupKey(pod_ns, ref.name) + ": annotation " + kCapacity + "=" +
                          Quote(capacity->second) + " is not a positive integer, using capacity " +
                          std::to_string(default_capacity));
          }
        }
      }
    }
  }
  if (!IsServerName(*name)) {
    std::string what = annotation != nullptr ? "annotation " + *annotation + "=" + Quote(*name)
                                             : "name " + Quote(*name);
    findings.Unresolved(
        kReasonInvalidServerName,
        where() +
            (c.has_pod ? " (pod " + GroupKey(c.pod_namespace, c.pod_name) + ")" : std::string()) +
            " left out: " + what + " is not a valid server name (" + std::string(kServerNameRule) +
            ")");
    return std::nullopt;
  }
  c.name = *name;
  return c;
}

}  // namespace

void CompileServiceBackend(GroupInputs& inputs, const LogonGroup& lg,
                           const model::ServiceBackend& service, std::uint32_t default_capacity,
                           v1::Group* group, Findings& findings, std::string* resolved_summary) {
  if (service.name.empty()) {
    std::string message = "spec.backend.service.name: must not be empty";
    findings.Reject(kReasonInvalidBackend, message);
    findings.Unresolved(kReasonInvalidBackend, message);
    return;
  }
  if (service.port) {
    bool valid = service.port->is_number
                     ? service.port->number >= 1 && service.port->number <= 65535
                     : !service.port->name.empty();
    if (!valid) {
      std::string message =
          "spec.backend.service.port: must be a port number from 1 to 65535 or a port name";
      findings.Reject(kReasonInvalidField, message);
      findings.Unresolved(kReasonInvalidField, message);
      return;
    }
  }
  const std::string& ns = lg.metadata.namespace_;
  std::string service_ref = "Service " + GroupKey(ns, service.name);
  const std::vector<const EndpointSlice*>* slices = inputs.SlicesOf(ns, service.name);
  if (slices == nullptr) {
    findings.Unresolved(kReasonNoEndpoints, "no EndpointSlice labelled " +
                                                std::string(model::kServiceNameLabel) + "=" +
                                                service.name + " in namespace " + ns);
    return;
  }

  std::vector<Candidate> candidates;
  std::vector<std::string> unmatched_slices;
  std::size_t empty_slices = 0;
  for (const EndpointSlice* slice : *slices) {
    if (slice->endpoints.empty()) {
      // No endpoint at all (a Deployment scaled to 0 leaves "endpoints":
      // null and "ports": null): nothing to serve, and no port to judge.
      ++empty_slices;
      continue;
    }
    auto port = SelectPort(service.port, *slice);
    if (!port) {
      unmatched_slices.push_back(slice->metadata.name);
      continue;
    }
    for (const auto& endpoint : slice->endpoints) {
      if (endpoint.addresses.empty() || endpoint.addresses.front().empty()) {
        continue;
      }
      const auto& conditions = endpoint.conditions;
      v1::ServerState state;
      if (conditions.IsReady()) {
        state = v1::SERVER_STATE_READY;
      } else if (conditions.IsServing() && conditions.IsTerminating()) {
        state = v1::SERVER_STATE_DRAINING;
      } else {
        continue;
      }
      if (auto candidate =
              MakeCandidate(inputs, *slice, endpoint, *port, state, default_capacity, findings)) {
        candidates.push_back(*candidate);
      }
    }
  }

  // The same endpoint can sit in two slices during a slice handover: keep
  // one, preferring READY, then the earlier slice (stable sort).
  auto ready_rank = [](const Candidate& c) { return c.state == v1::SERVER_STATE_READY ? 0 : 1; };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const Candidate& a, const Candidate& b) {
                     return std::tuple(a.address, a.port, ready_rank(a)) <
                            std::tuple(b.address, b.port, ready_rank(b));
                   });
  candidates.erase(std::unique(candidates.begin(), candidates.end(),
                               [](const Candidate& a, const Candidate& b) {
                                 return a.address == b.address && a.port == b.port;
                               }),
                   candidates.end());
  // Server names must be unique: on a clash keep the READY one, then the
  // lowest address:port, and say which endpoint was left out.
  std::sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
    return std::tuple(std::string_view(a.name), ready_rank(a), a.address, a.port) <
           std::tuple(std::string_view(b.name), ready_rank(b), b.address, b.port);
  });
  group->mutable_servers()->Reserve(static_cast<int>(candidates.size()));
  const Candidate* previous = nullptr;
  for (const Candidate& c : candidates) {
    if (previous != nullptr && previous->name == c.name) {
      findings.Note("endpoint " + std::string(c.address) + ":" + std::to_string(c.port) +
                    " left out: server name " + Quote(c.name) + " is used twice");
      continue;
    }
    previous = &c;
    v1::Server* server = group->add_servers();
    server->set_name(c.name.data(), c.name.size());
    server->set_address(c.address.data(), c.address.size());
    server->set_port(c.port);
    server->set_capacity(c.capacity);
    server->set_state(c.state);
    if (c.has_pod) {
      server->set_pod(GroupKey(c.pod_namespace, c.pod_name));
    }
  }

  if (empty_slices == slices->size()) {
    findings.Unresolved(
        kReasonNoEndpoints,
        service_ref + " has no endpoints (its EndpointSlices are empty: scaled to 0?)");
    return;
  }
  if (unmatched_slices.size() == slices->size() - empty_slices) {
    std::string wanted = !service.port ? std::string(
                                             "(none given; a slice must "
                                             "list exactly one port)")
                         : service.port->is_number ? std::to_string(service.port->number)
                                                   : Quote(service.port->name);
    findings.Unresolved(kReasonPortNotFound,
                        "no EndpointSlice of " + service_ref + " has port " + wanted +
                            " (slices: " + JoinStrings(unmatched_slices, ", ") + ")");
    return;
  }
  if (!unmatched_slices.empty()) {
    findings.Note("EndpointSlices without the service port ignored: " +
                  JoinStrings(unmatched_slices, ", "));
  }
  std::size_t slice_count = slices->size() - unmatched_slices.size() - empty_slices;
  *resolved_summary = service_ref + ": " + std::to_string(slice_count) +
                      (slice_count == 1 ? " EndpointSlice" : " EndpointSlices");
}

}  // namespace kwd::compile::internal
