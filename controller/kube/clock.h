#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace kwd::kube {

// Time as the Kubernetes client sees it: a monotonic clock for deadlines and
// a wall clock for timestamps written to the API (Lease MicroTime).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point Now() const = 0;
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
};

class RealClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
};

// Waits that a stop request interrupts. Tests inject one that records the
// requested delays and returns at once.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Returns false when `stop` was requested before or during the wait.
  virtual bool SleepFor(std::chrono::nanoseconds duration, std::stop_token stop) = 0;
};

class RealSleeper final : public Sleeper {
 public:
  bool SleepFor(std::chrono::nanoseconds duration, std::stop_token stop) override {
    std::unique_lock lock(mutex_);
    // wait_for with a stop token wakes as soon as stop is requested.
    condition_.wait_for(lock, stop, duration, [] { return false; });
    return !stop.stop_requested();
  }

 private:
  std::mutex mutex_;
  std::condition_variable_any condition_;
};

}  // namespace kwd::kube
