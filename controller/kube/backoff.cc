#include "controller/kube/backoff.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kwd::kube {

Backoff::Backoff(BackoffPolicy policy, std::function<double()> random)
    : policy_(policy), random_(random ? std::move(random) : DefaultRandom()) {}

std::chrono::nanoseconds Backoff::Next() {
  double base = static_cast<double>(std::chrono::nanoseconds(policy_.initial).count()) *
                std::pow(policy_.factor, attempt_);
  double cap = static_cast<double>(std::chrono::nanoseconds(policy_.max).count());
  base = std::min(base, cap);
  if (base < cap) {
    ++attempt_;  // stop growing once capped, so pow() never overflows
  }
  double jittered = base * (1.0 + policy_.jitter * std::clamp(random_(), 0.0, 1.0));
  return std::chrono::nanoseconds(static_cast<int64_t>(jittered));
}

std::function<double()> DefaultRandom() {
  return [] {
    thread_local std::mt19937_64 engine{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
  };
}

}  // namespace kwd::kube
