#pragma once

// A connection's byte buffer: bytes are appended at the back and consumed
// from the front. Storage is taken on the first write, not when the buffer is
// made, and Release() gives it back once the buffer is empty: a keep-alive
// connection waiting for its next request holds no buffer memory. Blocks of
// the default size come from a small per-thread free list (a worker's
// connections share it, no lock), so taking and releasing one per request
// does not call malloc in steady state.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <utility>

namespace kwd::proxy {

// A bounded per-thread stack of pointers to things a thread makes and
// destroys at a high rate, kept for reuse instead: `Policy` names the item
// (`Item`, a pointer), the bound (`kMaxFree`) and how a kept item is freed
// when the thread ends (`Free`). Each Policy type has its own stack per
// thread.
template <class Policy>
class PerThreadStack {
 public:
  using Item = typename Policy::Item;
  // A kept item, or null when none is kept.
  static Item Pop() {
    State& state = ThisThread();
    return state.count == 0 ? nullptr : state.free[--state.count];
  }
  // Keeps `item`; false (the caller frees it) when full or the thread ends.
  static bool Push(Item item) {
    static thread_local Drainer drainer;  // constructed with the first kept item
    (void)drainer;
    State& state = ThisThread();
    if (state.closed || state.count >= Policy::kMaxFree) {
      return false;
    }
    state.free[state.count++] = item;
    return true;
  }

 private:
  struct State {  // trivially destructible: valid until the thread is gone
    Item free[Policy::kMaxFree];
    uint32_t count;
    bool closed;
  };
  struct Drainer {
    ~Drainer() {
      State& state = ThisThread();
      state.closed = true;
      while (state.count > 0) {
        Policy::Free(state.free[--state.count]);
      }
    }
  };
  static State& ThisThread() {
    static thread_local State state{};
    return state;
  }
};

// A bounded per-thread free list of T for per-request state an idle
// connection gives back (the parsed request and response heads, HTTP/2
// streams): Take() reuses a given-back object (its old contents are left as
// they were) or makes one from `args`; Give() keeps up to kMax (128
// heads of ~4 KiB: what 64 connections in flight hold, and then some),
// deleting the rest.
template <typename T, uint32_t kMax = 128>
class PerThreadFreeList {
 public:
  template <typename... Args>
  static std::unique_ptr<T> Take(Args&&... args) {
    if (T* kept = Stack::Pop(); kept != nullptr) {
      return std::unique_ptr<T>(kept);
    }
    return std::make_unique<T>(std::forward<Args>(args)...);
  }
  static void Give(std::unique_ptr<T> object) {
    if (object != nullptr && Stack::Push(object.get())) {
      (void)object.release();
    }
  }

 private:
  struct Policy {
    using Item = T*;
    static constexpr uint32_t kMaxFree = kMax;
    static void Free(T* object) { delete object; }
  };
  using Stack = PerThreadStack<Policy>;
};

// Raw memory for a class a thread makes and destroys once per connection
// (ClientConnection, PlainTransport), for the class's own operator new and
// delete: blocks of `Size` bytes kept per thread, up to kMax. malloc's
// per-thread cache holds 7 blocks of a size (and none above ~1 KiB): a batch
// of new connections, each closed after one request, went through its
// slower bins every time.
template <size_t Size, uint32_t kMax = 256>
class PerThreadBlocks {
 public:
  static void* Take() {
    void* block = Stack::Pop();
    return block != nullptr ? block : ::operator new(Size);
  }
  static void Give(void* block) {
    if (!Stack::Push(block)) {
      ::operator delete(block);
    }
  }

 private:
  struct Policy {
    using Item = void*;
    static constexpr uint32_t kMaxFree = kMax;
    static void Free(void* block) { ::operator delete(block); }
  };
  using Stack = PerThreadStack<Policy>;
};

namespace buffer_detail {

// Free blocks of kBlockBytes for this thread: at most 256 are kept (so a
// burst of connections that all went idle leaves at most 4 MiB of address
// space here, resident only as far as blocks were written), the rest go back
// to malloc. 256 covers the three blocks of each of 64 connections in flight
// at once: with fewer, a new connection per request (Connection: close) sent
// blocks back to malloc and took them again, and the worker's heap top went
// up and down (madvise, mprotect and a page fault every few requests). Blocks
// are not zeroed: pages are touched as bytes arrive. A buffer freed while the
// thread exits still finds the (trivially destructible) state.
constexpr size_t kBlockBytes = 16 * 1024;
using BlockPool = PerThreadBlocks<kBlockBytes, 256>;

// The storage this thread's buffers hold now: a plain per-thread count, an
// add per storage taken or given back; a worker publishes its own to
// kwd_proxy_buffer_bytes every 100 ms (Worker::PublishBufferBytes).
inline thread_local int64_t held_bytes = 0;

}  // namespace buffer_detail

class Buffer {
 public:
  static constexpr size_t kDefaultCapacity = buffer_detail::kBlockBytes;

  // `initial_capacity`: the storage the first write takes.
  explicit Buffer(size_t initial_capacity = kDefaultCapacity)
      : initial_capacity_(std::max<size_t>(initial_capacity, 1)) {}
  ~Buffer() { FreeStorage(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::string_view view() const { return {data_ + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  // Storage held now (0 before the first write and after Release()).
  size_t capacity() const { return capacity_; }

  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) {
      begin_ = end_ = 0;
    }
  }
  void Clear() { begin_ = end_ = 0; }

  // Gives the storage back when the buffer holds no bytes (the next write
  // takes storage again); a buffer with bytes keeps them. Views taken before
  // are invalid afterwards.
  void Release() {
    if (empty()) {
      FreeStorage();
      begin_ = end_ = 0;
    }
  }

  // Room to append at least `min_free` bytes (up to `max_capacity` in all);
  // returns the free tail. Existing bytes may move: views taken before are
  // invalid afterwards.
  char* PrepareWrite(size_t min_free, size_t max_capacity, size_t* free_bytes) {
    if (capacity_ == 0) {
      Reallocate(initial_capacity_);
    }
    if (capacity_ - end_ < min_free && begin_ > 0) {
      std::memmove(data_, data_ + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (capacity_ - end_ < min_free && capacity_ < max_capacity) {
      Reallocate(std::min(max_capacity, std::max(capacity_ * 2, end_ + min_free)));
    }
    *free_bytes = capacity_ - end_;
    return data_ + end_;
  }
  void Commit(size_t n) { end_ += n; }

  void Append(std::string_view bytes) {
    if (bytes.empty()) {
      return;
    }
    size_t free_bytes = 0;
    char* p = PrepareWrite(bytes.size(), static_cast<size_t>(-1), &free_bytes);
    std::memcpy(p, bytes.data(), bytes.size());
    end_ += bytes.size();
  }

 private:
  static char* Allocate(size_t bytes) {
    buffer_detail::held_bytes += static_cast<int64_t>(bytes);
    return bytes == buffer_detail::kBlockBytes
               ? static_cast<char*>(buffer_detail::BlockPool::Take())
               : new char[bytes];
  }
  void FreeStorage() {
    if (data_ == nullptr) {
      return;
    }
    buffer_detail::held_bytes -= static_cast<int64_t>(capacity_);
    if (capacity_ == buffer_detail::kBlockBytes) {
      buffer_detail::BlockPool::Give(data_);
    } else {
      delete[] data_;
    }
    data_ = nullptr;
    capacity_ = 0;
  }
  // Moves the bytes to the front of new storage of `bytes`.
  void Reallocate(size_t bytes) {
    char* storage = Allocate(bytes);
    size_t live = end_ - begin_;
    if (live > 0) {
      std::memcpy(storage, data_ + begin_, live);
    }
    FreeStorage();
    data_ = storage;
    capacity_ = bytes;
    begin_ = 0;
    end_ = live;
  }

  char* data_ = nullptr;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t initial_capacity_;
};

}  // namespace kwd::proxy
