#pragma once

// Counts global operator new calls in this test binary, so tests can assert
// that a code path does not allocate.

#include <cstddef>
#include <cstdint>

namespace kwd::session::testing {

struct AllocSnapshot {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

AllocSnapshot AllocationsSoFar();

// Allocations made between construction and the call to Delta().
class AllocScope {
 public:
  AllocScope() : start_(AllocationsSoFar()) {}
  AllocSnapshot Delta() const {
    AllocSnapshot now = AllocationsSoFar();
    return {now.count - start_.count, now.bytes - start_.bytes};
  }

 private:
  AllocSnapshot start_;
};

}  // namespace kwd::session::testing
