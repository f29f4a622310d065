#pragma once

// A connection's byte buffer: bytes are appended at the back and consumed
// from the front; storage is kept for the connection's life, so steady-state
// traffic does not allocate.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>

namespace kwd::proxy {

class Buffer {
 public:
  // The storage is allocated at the first write, uninitialised: a connection
  // that is accepted, answers one request and closes pays no memset of its
  // buffers, and one that never sends a body never allocates its body buffer.
  explicit Buffer(size_t initial_capacity = 16 * 1024) : capacity_(initial_capacity) {}

  std::string_view view() const { return {data_.get() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  size_t capacity() const { return capacity_; }

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
    if (capacity_ - end_ < min_free && begin_ > 0) {
      std::memmove(data_.get(), data_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (capacity_ - end_ < min_free && capacity_ < max_capacity) {
      Reallocate(std::min(max_capacity, std::max(capacity_ * 2, end_ + min_free)));
    } else if (data_ == nullptr) {
      Reallocate(capacity_);
    }
    *free_bytes = capacity_ - end_;
    return data_.get() + end_;
  }
  void Commit(size_t n) { end_ += n; }

  void Append(std::string_view bytes) {
    size_t free_bytes = 0;
    char* p = PrepareWrite(bytes.size(), static_cast<size_t>(-1), &free_bytes);
    std::memcpy(p, bytes.data(), bytes.size());
    end_ += bytes.size();
  }

 private:
  void Reallocate(size_t capacity) {
    std::unique_ptr<char[]> data(new char[capacity]);
    if (end_ > 0) {
      std::memcpy(data.get(), data_.get(), end_);
    }
    data_ = std::move(data);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  size_t capacity_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace kwd::proxy
