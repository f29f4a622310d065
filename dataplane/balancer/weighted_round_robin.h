#pragma once

#include "dataplane/balancer/balancer.h"

namespace kwd::balancer {

// SAP's default: the lowest (assigned + outstanding + 1) / capacity wins,
// compared exactly; ties go to the earlier server in the group's order.
// A(c=6), B(c=3), one request at a time: A A B A A B ...
class WeightedRoundRobin final : public Balancer {
 public:
  using Balancer::Balancer;
  v1::Strategy strategy() const override { return v1::STRATEGY_WEIGHTED_ROUND_ROBIN; }

 protected:
  int Choose(std::span<const ServerInput> servers) override;
};

}  // namespace kwd::balancer
