#include "dataplane/http/h2_frames.h"

#include <algorithm>

namespace kwd::http {

bool H2FrameScanner::Next(const uint8_t* data, size_t size, size_t* at, Frame* frame) {
  while (*at < size) {
    if (preface_left_ > 0) {
      const size_t n = std::min<size_t>(preface_left_, size - *at);
      preface_left_ = static_cast<uint8_t>(preface_left_ - n);
      *at += n;
      continue;
    }
    if (payload_left_ > 0) {
      const size_t n = std::min<size_t>(payload_left_, size - *at);
      payload_left_ = static_cast<uint32_t>(payload_left_ - n);
      *at += n;
      continue;
    }
    const size_t header_start = head_have_ == 0 ? *at : 0;
    const size_t n = std::min(kFrameHeaderBytes - head_have_, size - *at);
    std::copy_n(data + *at, n, head_ + head_have_);
    head_have_ = static_cast<uint8_t>(head_have_ + n);
    *at += n;
    if (head_have_ < kFrameHeaderBytes) {
      return false;  // the rest of the header comes with the next read
    }
    head_have_ = 0;
    frame->header_start = header_start;
    frame->length = (uint32_t{head_[0]} << 16) | (uint32_t{head_[1]} << 8) | uint32_t{head_[2]};
    frame->type = head_[3];
    frame->flags = head_[4];
    frame->stream_id = static_cast<int32_t>(((uint32_t{head_[5]} & 0x7F) << 24) |
                                            (uint32_t{head_[6]} << 16) |
                                            (uint32_t{head_[7]} << 8) | uint32_t{head_[8]});
    payload_left_ = frame->length;
    return true;
  }
  return false;
}

}  // namespace kwd::http
