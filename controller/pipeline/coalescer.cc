#include "controller/pipeline/coalescer.h"

#include <algorithm>

namespace kwd::pipeline {

Coalescer::Coalescer(Duration hold_off, Duration max_delay)
    : hold_off_(hold_off), max_delay_(std::max(max_delay, hold_off)) {}

void Coalescer::Note(TimePoint now) {
  if (!first_) {
    first_ = now;
  }
  last_ = std::max(last_, now);
}

std::optional<Coalescer::TimePoint> Coalescer::Deadline() const {
  if (!first_) {
    return std::nullopt;
  }
  return std::min(last_ + hold_off_, *first_ + max_delay_);
}

bool Coalescer::Due(TimePoint now) const {
  std::optional<TimePoint> deadline = Deadline();
  return deadline && now >= *deadline;
}

void Coalescer::Reset() {
  first_.reset();
  last_ = TimePoint{};
}

}  // namespace kwd::pipeline
