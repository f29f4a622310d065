#include "dataplane/proxy/http2_connection.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kwd::proxy {
namespace {

TEST(Http2Preface, WholePrefaceMatches) {
  EXPECT_EQ(MatchHttp2Preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), PrefaceMatch::kYes);
  // Frames that follow in the same read do not matter.
  EXPECT_EQ(MatchHttp2Preface(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12\x04", 28)),
            PrefaceMatch::kYes);
}

TEST(Http2Preface, EveryProperPrefixWaitsForMore) {
  std::string preface(kHttp2Preface);
  for (size_t n = 1; n < preface.size(); ++n) {
    EXPECT_EQ(MatchHttp2Preface(preface.substr(0, n)), PrefaceMatch::kPartial) << n;
  }
}

TEST(Http2Preface, HttpOneRequestsDoNotMatch) {
  EXPECT_EQ(MatchHttp2Preface("GET / HTTP/1.1\r\n"), PrefaceMatch::kNo);
  EXPECT_EQ(MatchHttp2Preface("POST / HTTP/1.1\r\n"), PrefaceMatch::kNo);
  // "PRI" as an HTTP/1.1 method, or a preface that goes wrong late.
  EXPECT_EQ(MatchHttp2Preface("PRI / HTTP/1.1\r\n"), PrefaceMatch::kNo);
  EXPECT_EQ(MatchHttp2Preface("PRI * HTTP/2.0\r\n\r\nSX\r\n\r\n"), PrefaceMatch::kNo);
  EXPECT_EQ(MatchHttp2Preface("p"), PrefaceMatch::kNo);
}

// The sessions' allocator (Http2ThreadAllocator): malloc's contract for
// every size class and beyond, blocks reused once freed.
TEST(Http2Allocator, BlocksOfEverySizeAreUsableAndAligned) {
  nghttp2_mem* mem = Http2ThreadAllocator();
  std::vector<void*> blocks;
  for (size_t size : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{500},
                      size_t{4096}, size_t{4097}, size_t{100000}}) {
    auto* p = static_cast<unsigned char*>(mem->malloc(size, mem->mem_user_data));
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u) << size;
    std::memset(p, 0xab, size);
    blocks.push_back(p);
  }
  for (void* p : blocks) {
    mem->free(p, mem->mem_user_data);
  }
  mem->free(nullptr, mem->mem_user_data);
}

TEST(Http2Allocator, FreedBlocksAreReusedBySizeClass) {
  nghttp2_mem* mem = Http2ThreadAllocator();
  void* a = mem->malloc(200, mem->mem_user_data);
  mem->free(a, mem->mem_user_data);
  void* b = mem->malloc(256, mem->mem_user_data);  // the same class (129..256 bytes)
  EXPECT_EQ(a, b);
  void* c = mem->malloc(257, mem->mem_user_data);  // the next one
  EXPECT_NE(b, c);
  mem->free(b, mem->mem_user_data);
  mem->free(c, mem->mem_user_data);
}

TEST(Http2Allocator, CallocZeroesAndReallocKeepsTheBytes) {
  nghttp2_mem* mem = Http2ThreadAllocator();
  // A dirty block of the class first, so that calloc must clear it.
  void* dirty = mem->malloc(100, mem->mem_user_data);
  std::memset(dirty, 0xff, 100);
  mem->free(dirty, mem->mem_user_data);
  auto* z = static_cast<unsigned char*>(mem->calloc(10, 10, mem->mem_user_data));
  ASSERT_NE(z, nullptr);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(z[i], 0) << i;
  }
  EXPECT_EQ(mem->calloc(static_cast<size_t>(-1) / 2, 4, mem->mem_user_data), nullptr);
  // Grown within its class, to the next classes and beyond them: the bytes
  // written stay.
  auto* p = static_cast<unsigned char*>(mem->realloc(z, 30, mem->mem_user_data));
  for (int i = 0; i < 30; ++i) {
    p[i] = static_cast<unsigned char>(i);
  }
  for (size_t size : {size_t{120}, size_t{1000}, size_t{5000}, size_t{70000}, size_t{40}}) {
    p = static_cast<unsigned char*>(mem->realloc(p, size, mem->mem_user_data));
    ASSERT_NE(p, nullptr) << size;
    for (int i = 0; i < 30; ++i) {
      ASSERT_EQ(p[i], i) << size;
    }
  }
  auto* fresh = static_cast<unsigned char*>(mem->realloc(nullptr, 10, mem->mem_user_data));
  ASSERT_NE(fresh, nullptr);
  mem->free(fresh, mem->mem_user_data);
  EXPECT_EQ(mem->realloc(p, 0, mem->mem_user_data), nullptr);  // freed
}

}  // namespace
}  // namespace kwd::proxy
