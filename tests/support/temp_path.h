#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <string_view>

namespace kwd::testing {

// A file path in the test temp directory that belongs to this process alone.
// ctest -j runs every test case as its own process, so two cases writing one
// fixed name (metrics.txt) race: one truncates the file the other is reading.
inline std::string UniqueTempPath(std::string_view name) {
  return ::testing::TempDir() + "kwd_" + std::to_string(::getpid()) + "_" + std::string(name);
}

}  // namespace kwd::testing
