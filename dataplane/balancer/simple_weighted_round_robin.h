#pragma once

#include "dataplane/balancer/balancer.h"

namespace kwd::balancer {

// Each usable server receives exactly `capacity` consecutive requests, then
// the next one in the group's order: A(c=6), B(c=3) gives 6 x A, 3 x B, ...
// SAP keeps it for compatibility; it is bursty by design.
class SimpleWeightedRoundRobin final : public Balancer {
 public:
  using Balancer::Balancer;
  v1::Strategy strategy() const override { return v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN; }
  void Rebind(std::span<const int> new_to_old) override;

 protected:
  int Choose(std::span<const ServerInput> servers) override;

 private:
  size_t position_ = 0;  // the server currently receiving its run
  uint32_t given_ = 0;   // requests it got in the current run
};

}  // namespace kwd::balancer
