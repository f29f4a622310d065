#include "dataplane/http/h2_frames.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kwd::http {
namespace {

std::string Preface() { return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); }

std::string FrameBytes(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream,
                       char fill = 'p') {
  std::string out;
  out += static_cast<char>(length >> 16);
  out += static_cast<char>(length >> 8);
  out += static_cast<char>(length);
  out += static_cast<char>(type);
  out += static_cast<char>(flags);
  out += static_cast<char>(stream >> 24);
  out += static_cast<char>(stream >> 16);
  out += static_cast<char>(stream >> 8);
  out += static_cast<char>(stream);
  out.append(length, fill);
  return out;
}

struct Seen {
  size_t end;  // absolute offset just past the frame header
  size_t start;  // absolute offset of its first byte, when it began in the read
  uint32_t length;
  uint8_t type;
  uint8_t flags;
  int32_t stream;
  bool operator==(const Seen&) const = default;
};

// The frames found in `bytes` fed in reads of `step` bytes.
std::vector<Seen> Scan(const std::string& bytes, size_t step) {
  H2FrameScanner scanner;
  std::vector<Seen> seen;
  for (size_t base = 0; base < bytes.size(); base += step) {
    const size_t n = std::min(step, bytes.size() - base);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data() + base);
    size_t at = 0;
    H2FrameScanner::Frame frame;
    while (scanner.Next(data, n, &at, &frame)) {
      EXPECT_LE(at, n);
      // A header that began in this read starts 9 bytes before its end.
      const bool whole = at >= H2FrameScanner::kFrameHeaderBytes &&
                         frame.header_start == at - H2FrameScanner::kFrameHeaderBytes;
      EXPECT_TRUE(whole || frame.header_start == 0);
      seen.push_back({base + at, whole ? base + frame.header_start : SIZE_MAX, frame.length,
                      frame.type, frame.flags, frame.stream_id});
    }
    EXPECT_EQ(at, n);
  }
  return seen;
}

TEST(H2FrameScannerTest, SkipsThePrefaceAndEveryPayload) {
  std::string bytes = Preface() + FrameBytes(6, 0x4, 0, 0) + FrameBytes(20, 0x1, 0x4, 1) +
                      FrameBytes(0, 0x9, 0x4, 1) + FrameBytes(70000, 0x0, 0x1, 1);
  std::vector<Seen> seen = Scan(bytes, bytes.size());
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].start, 24u);
  EXPECT_EQ(seen[0].type, 0x4);
  EXPECT_EQ(seen[0].length, 6u);
  EXPECT_EQ(seen[1].start, 24u + 9 + 6);
  EXPECT_EQ(seen[1].type, 0x1);
  EXPECT_EQ(seen[1].flags, 0x4);
  EXPECT_EQ(seen[1].length, 20u);
  EXPECT_EQ(seen[2].type, 0x9);
  EXPECT_EQ(seen[2].length, 0u);
  EXPECT_EQ(seen[3].length, 70000u);  // a payload over the frame size limit is still skipped
  EXPECT_EQ(seen[3].flags, 0x1);
  EXPECT_EQ(seen[0].stream, 0);
  EXPECT_EQ(seen[1].stream, 1);
}

TEST(H2FrameScannerTest, StreamIdsLeaveOutTheReservedBit) {
  std::string bytes = Preface() + FrameBytes(0, 0x0, 0, 0x80000003u) +
                      FrameBytes(0, 0x1, 0, 0x7FFFFFFFu) + FrameBytes(0, 0x0, 0, 0x01020305u);
  std::vector<Seen> seen = Scan(bytes, 1);  // each header split byte by byte
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].stream, 3);
  EXPECT_EQ(seen[1].stream, 0x7FFFFFFF);
  EXPECT_EQ(seen[2].stream, 0x01020305);
}

TEST(H2FrameScannerTest, ReadsSplitAnywhereGiveTheSameFrames) {
  std::string bytes = Preface();
  for (uint32_t i = 0; i < 40; ++i) {
    bytes += FrameBytes(i * 7 % 33, static_cast<uint8_t>(i % 10), static_cast<uint8_t>(i), 2 * i + 1);
  }
  bytes += FrameBytes(0xFFFFFF, 0x0, 0, 1).substr(0, 9 + 100);  // a 16 MiB payload, begun
  std::vector<Seen> whole = Scan(bytes, bytes.size());
  ASSERT_EQ(whole.size(), 41u);
  EXPECT_EQ(whole.back().length, 0xFFFFFFu);
  for (size_t step = 1; step <= 40; ++step) {
    std::vector<Seen> split = Scan(bytes, step);
    ASSERT_EQ(split.size(), whole.size()) << step;
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(split[i].end, whole[i].end) << step;
      EXPECT_EQ(split[i].length, whole[i].length) << step;
      EXPECT_EQ(split[i].type, whole[i].type) << step;
      EXPECT_EQ(split[i].flags, whole[i].flags) << step;
      // Where the header began in the read, that is where it is said to.
      if (split[i].start != SIZE_MAX) {
        EXPECT_EQ(split[i].start, whole[i].start) << step;
      }
    }
  }
}

TEST(H2FrameScannerTest, NothingBeforeThePrefaceEnds) {
  std::string bytes = Preface().substr(0, 23);
  EXPECT_TRUE(Scan(bytes, 5).empty());
  bytes = Preface() + FrameBytes(0, 0x4, 0, 0).substr(0, 8);
  EXPECT_TRUE(Scan(bytes, 7).empty());
}

}  // namespace
}  // namespace kwd::http
