// Fuzzes the HTTP/2 frame-header scanner (the client's bytes, as the proxy
// reads them) differentially: the input's first byte chooses how the rest is
// split into reads; the frames found must be the same as in one read, at
// the same absolute offsets, and every read must be used up.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "dataplane/http/h2_frames.h"

namespace {

struct Seen {
  size_t end;
  uint32_t length;
  uint8_t type;
  uint8_t flags;
  int32_t stream;
};

std::vector<Seen> Scan(const uint8_t* data, size_t size, uint8_t seed) {
  kwd::http::H2FrameScanner scanner;
  std::vector<Seen> seen;
  size_t base = 0;
  unsigned state = seed;
  while (base < size) {
    // 1 to 32 bytes a read, or the rest when seed is 0.
    state = state * 1103515245u + 12345u;
    size_t step = seed == 0 ? size : 1 + (state >> 16) % 32;
    size_t n = step < size - base ? step : size - base;
    size_t at = 0;
    kwd::http::H2FrameScanner::Frame frame;
    while (scanner.Next(data + base, n, &at, &frame)) {
      if (at > n || at < 1) {
        std::abort();
      }
      if (frame.header_start != 0 &&
          frame.header_start + kwd::http::H2FrameScanner::kFrameHeaderBytes != at) {
        std::abort();
      }
      if (frame.length > 0xFFFFFF || frame.stream_id < 0) {
        std::abort();
      }
      seen.push_back({base + at, frame.length, frame.type, frame.flags, frame.stream_id});
    }
    if (at != n) {
      std::abort();  // a read not used up
    }
    base += n;
  }
  return seen;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  std::vector<Seen> whole = Scan(data + 1, size - 1, 0);
  std::vector<Seen> split = Scan(data + 1, size - 1, data[0] == 0 ? 1 : data[0]);
  if (whole.size() != split.size()) {
    std::abort();
  }
  for (size_t i = 0; i < whole.size(); ++i) {
    if (whole[i].end != split[i].end || whole[i].length != split[i].length ||
        whole[i].type != split[i].type || whole[i].flags != split[i].flags ||
        whole[i].stream != split[i].stream) {
      std::abort();
    }
  }
  return 0;
}
