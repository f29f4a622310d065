#pragma once

// A connection's byte buffer: bytes are appended at the back and consumed
// from the front; storage is kept for the connection's life, so steady-state
// traffic does not allocate.

#include <cstddef>
#include <cstring>
#include <string_view>
#include <vector>

namespace kwd::proxy {

class Buffer {
 public:
  explicit Buffer(size_t initial_capacity = 16 * 1024) { storage_.resize(initial_capacity); }

  std::string_view view() const { return {storage_.data() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  size_t capacity() const { return storage_.size(); }

  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) {
      begin_ = end_ = 0;
    }
  }
  void Clear() { begin_ = end_ = 0; }

  // Room to append at least `min_free` bytes (up to `max_capacity` in all);
  // returns the free tail. Existing bytes may move: views taken before are
  // invalid afterwards.
  char* PrepareWrite(size_t min_free, size_t max_capacity, size_t* free_bytes) {
    if (storage_.size() - end_ < min_free && begin_ > 0) {
      std::memmove(storage_.data(), storage_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (storage_.size() - end_ < min_free && storage_.size() < max_capacity) {
      storage_.resize(std::min(max_capacity, std::max(storage_.size() * 2, end_ + min_free)));
    }
    *free_bytes = storage_.size() - end_;
    return storage_.data() + end_;
  }
  void Commit(size_t n) { end_ += n; }

  void Append(std::string_view bytes) {
    size_t free_bytes = 0;
    char* p = PrepareWrite(bytes.size(), static_cast<size_t>(-1), &free_bytes);
    std::memcpy(p, bytes.data(), bytes.size());
    end_ += bytes.size();
  }

 private:
  std::vector<char> storage_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace kwd::proxy
