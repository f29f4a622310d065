#pragma once

// Decides when a burst of relevant changes has settled enough to rebuild: a
// rebuild runs `hold_off` after the last change, but never later than
// `max_delay` after the first change of the burst, so a steady trickle of
// events cannot postpone it forever. Pure bookkeeping over the times it is
// given (tests drive it with a fake clock).

#include <chrono>
#include <optional>

namespace kwd::pipeline {

class Coalescer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  Coalescer(Duration hold_off, Duration max_delay);

  // A relevant change happened at `now`.
  void Note(TimePoint now);
  // When the pending rebuild is due; nullopt when nothing is pending.
  std::optional<TimePoint> Deadline() const;
  bool Due(TimePoint now) const;
  // The rebuild ran: the burst is over.
  void Reset();
  bool pending() const { return first_.has_value(); }

 private:
  Duration hold_off_;
  Duration max_delay_;
  std::optional<TimePoint> first_;
  TimePoint last_{};
};

}  // namespace kwd::pipeline
