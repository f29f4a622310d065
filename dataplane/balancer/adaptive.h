#pragma once

#include "dataplane/balancer/balancer.h"

namespace kwd::balancer {

// As weighted_round_robin, but a request weighs the server's smoothed ping RTT
// instead of 1/capacity: the lowest (assigned + outstanding + 1) * rtt wins.
// Servers without a measurement weigh the mean of the measured ones; with no
// measurement at all it behaves exactly as weighted_round_robin.
class Adaptive final : public Balancer {
 public:
  using Balancer::Balancer;
  v1::Strategy strategy() const override { return v1::STRATEGY_ADAPTIVE; }

 protected:
  int Choose(std::span<const ServerInput> servers) override;
};

}  // namespace kwd::balancer
