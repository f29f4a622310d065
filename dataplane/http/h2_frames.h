#pragma once

#include <cstddef>
#include <cstdint>

namespace kwd::http {

// Follows the frame headers of an HTTP/2 client's bytes (after its 24-byte
// connection preface) without looking into any payload: where each frame
// begins and its length, type and flags, across reads split anywhere.
// nghttp2 does not report everything the proxy bounds (the CONTINUATION
// frames of a header block it ignores, where a block ends), so the HTTP/2
// connection follows the frames with this alongside it.
class H2FrameScanner {
 public:
  static constexpr size_t kPrefaceBytes = 24;
  static constexpr size_t kFrameHeaderBytes = 9;

  struct Frame {
    // Offset in this read of the frame header's first byte; 0 when the
    // header began in an earlier read.
    size_t header_start = 0;
    uint32_t length = 0;  // of the payload (24 bits)
    uint8_t type = 0;
    uint8_t flags = 0;
    int32_t stream_id = 0;  // 31 bits, the reserved bit cleared
  };

  // Scans data[*at, size): true, with `frame`, when a frame header is
  // complete (*at is then just past it); false when the read is used up
  // (*at == size). The payloads are skipped, whatever their length.
  bool Next(const uint8_t* data, size_t size, size_t* at, Frame* frame);

 private:
  // 16 bytes: one per connection.
  uint32_t payload_left_ = 0;  // a frame's length is 24 bits
  uint8_t preface_left_ = kPrefaceBytes;
  uint8_t head_have_ = 0;
  uint8_t head_[kFrameHeaderBytes] = {};
};

}  // namespace kwd::http
