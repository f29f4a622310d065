#include "dataplane/proxy/buffer.h"

#include <gtest/gtest.h>

namespace kwd::proxy {
namespace {

TEST(BufferTest, AppendConsumeAndCompact) {
  Buffer b(8);
  b.Append("hello");
  EXPECT_EQ(b.view(), "hello");
  b.Consume(2);
  EXPECT_EQ(b.view(), "llo");
  size_t free_bytes = 0;
  char* p = b.PrepareWrite(6, 64, &free_bytes);  // compacts, then grows
  ASSERT_GE(free_bytes, 6u);
  std::memcpy(p, " world", 6);
  b.Commit(6);
  EXPECT_EQ(b.view(), "llo world");
  b.Consume(b.size());
  EXPECT_TRUE(b.empty());
}

TEST(BufferTest, NeverGrowsBeyondTheLimit) {
  Buffer b(16);
  b.Append(std::string(16, 'x'));
  size_t free_bytes = 1;
  b.PrepareWrite(8, 16, &free_bytes);
  EXPECT_EQ(free_bytes, 0u);
  EXPECT_EQ(b.capacity(), 16u);
}

// Storage comes with the first write (uninitialised): a fresh buffer is
// empty, its first write gets the initial capacity, and growing keeps the
// bytes not consumed yet.
TEST(BufferTest, AllocatesAtTheFirstWriteAndKeepsBytesWhenGrowing) {
  Buffer b(8);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.view(), "");
  EXPECT_EQ(b.capacity(), 8u);
  size_t free_bytes = 0;
  char* p = b.PrepareWrite(4, 64, &free_bytes);
  EXPECT_EQ(free_bytes, 8u);
  std::memcpy(p, "abcdef", 6);
  b.Commit(6);
  b.Consume(1);
  p = b.PrepareWrite(20, 64, &free_bytes);  // compacts, then grows
  ASSERT_GE(free_bytes, 20u);
  EXPECT_EQ(b.view(), "bcdef");
  std::memcpy(p, "ghij", 4);
  b.Commit(4);
  EXPECT_EQ(b.view(), "bcdefghij");
  Buffer empty_append(0);
  empty_append.Append("");
  empty_append.Append("xy");
  EXPECT_EQ(empty_append.view(), "xy");
}

}  // namespace
}  // namespace kwd::proxy
