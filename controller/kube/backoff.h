#pragma once

#include <chrono>
#include <functional>

namespace kwd::kube {

struct BackoffPolicy {
  std::chrono::milliseconds initial{200};
  std::chrono::milliseconds max{30000};
  double factor = 2.0;
  double jitter = 0.5;  // each delay is stretched by up to this fraction at random
};

// Jittered exponential backoff: initial, initial*factor, ... capped at max,
// each times (1 + jitter * random()) so that many clients that failed together
// do not retry together. `random` returns values in [0, 1); tests inject it.
class Backoff {
 public:
  Backoff(BackoffPolicy policy, std::function<double()> random);

  std::chrono::nanoseconds Next();
  void Reset() { attempt_ = 0; }
  int attempt() const { return attempt_; }

 private:
  BackoffPolicy policy_;
  std::function<double()> random_;
  int attempt_ = 0;
};

// A thread-safe uniform [0, 1) source for production use.
std::function<double()> DefaultRandom();

}  // namespace kwd::kube
