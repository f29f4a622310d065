#include "dataplane/proxy/http2_connection.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
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
  void* b = mem->malloc(256, mem->mem_user_data);  // the same class (193..256 bytes)
  EXPECT_EQ(a, b);
  void* c = mem->malloc(257, mem->mem_user_data);  // the next one
  EXPECT_NE(b, c);
  mem->free(b, mem->mem_user_data);
  mem->free(c, mem->mem_user_data);
  // Two classes per power of two: nghttp2's session structure (2,928 bytes
  // in 1.52) takes a 3 KiB block, not a 4 KiB one.
  void* d = mem->malloc(2928, mem->mem_user_data);
  mem->free(d, mem->mem_user_data);
  void* e = mem->malloc(3072, mem->mem_user_data);
  EXPECT_EQ(d, e);
  void* f = mem->malloc(3073, mem->mem_user_data);
  EXPECT_NE(e, f);
  mem->free(e, mem->mem_user_data);
  mem->free(f, mem->mem_user_data);
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

// The blocks a session takes through its Http2SessionMemory, the frame
// buffer among them, keep malloc's contract; the frame buffer is the block
// of 16 KiB or more taken while the session is created, and only that one.
TEST(Http2SessionMemory, BlocksKeepMallocsContract) {
  Http2SessionMemory memory;
  nghttp2_mem* mem = memory.mem();
  void* large = mem->malloc(20000, mem->mem_user_data);  // not while creating: a pool block
  ASSERT_NE(large, nullptr);
  EXPECT_FALSE(memory.has_frame_buffer());
  mem->free(large, mem->mem_user_data);
  memory.set_creating(true);
  auto* small = static_cast<unsigned char*>(mem->calloc(3, 1000, mem->mem_user_data));
  auto* frame = static_cast<unsigned char*>(mem->realloc(nullptr, 16394, mem->mem_user_data));
  auto* second = static_cast<unsigned char*>(mem->malloc(16394, mem->mem_user_data));
  memory.set_creating(false);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(frame, nullptr);
  ASSERT_NE(second, nullptr);
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(small[i], 0) << i;
  }
  EXPECT_TRUE(memory.has_frame_buffer());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(frame) % 4096, 0u);  // pages of its own
  std::memset(frame, 0x5a, 16394);
  std::memset(second, 0xa5, 16394);
  // Shrunk and grown within its pages it stays; grown beyond, it moves and
  // keeps its bytes, and is no longer the frame buffer.
  EXPECT_EQ(mem->realloc(frame, 100, mem->mem_user_data), frame);
  EXPECT_EQ(mem->realloc(frame, 20000, mem->mem_user_data), frame);  // 5 pages mapped
  auto* moved = static_cast<unsigned char*>(mem->realloc(frame, 40000, mem->mem_user_data));
  ASSERT_NE(moved, nullptr);
  EXPECT_FALSE(memory.has_frame_buffer());
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(moved[i], 0x5a) << i;
  }
  for (void* p : {static_cast<void*>(small), static_cast<void*>(moved), static_cast<void*>(second)}) {
    mem->free(p, mem->mem_user_data);
  }
  mem->free(nullptr, mem->mem_user_data);
}

// A server session and a client session wired back to back in memory.
class SessionPair {
 public:
  // The server session with `option` (nghttp2's defaults when null) and
  // its blocks from `mem` (the memory's own when null).
  explicit SessionPair(Http2SessionMemory* memory, nghttp2_option* option = nullptr,
                       nghttp2_mem* mem = nullptr) {
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &OnServerFrame);
    memory->set_creating(true);
    EXPECT_EQ(nghttp2_session_server_new3(&server_, callbacks, this, option,
                                          mem != nullptr ? mem : memory->mem()),
              0);
    memory->set_creating(false);
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &OnClientFrame);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &OnClientData);
    EXPECT_EQ(nghttp2_session_client_new(&client_, callbacks, this), 0);
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_submit_settings(server_, NGHTTP2_FLAG_NONE, nullptr, 0);
    nghttp2_submit_settings(client_, NGHTTP2_FLAG_NONE, nullptr, 0);
    memory_ = memory;
  }
  ~SessionPair() {
    nghttp2_session_del(server_);
    nghttp2_session_del(client_);
  }

  // GET / answered with `body`; returns the body the client received.
  std::string Exchange(std::string body) {
    body_ = std::move(body);
    sent_ = 0;
    received_.clear();
    status_ = 0;
    const nghttp2_nv request[] = {Field(":method", "GET"), Field(":scheme", "https"),
                                  Field(":authority", "a.test"), Field(":path", "/")};
    nghttp2_submit_request(client_, nullptr, request, std::size(request), nullptr, nullptr);
    for (int round = 0; round < 100; ++round) {
      bool moved = false;
      const uint8_t* data = nullptr;
      for (ssize_t n; (n = nghttp2_session_mem_send(client_, &data)) > 0;) {
        EXPECT_EQ(nghttp2_session_mem_recv(server_, data, static_cast<size_t>(n)), n);
        moved = true;
      }
      for (ssize_t n; (n = nghttp2_session_mem_send(server_, &data)) > 0;) {
        memory_->NoteOutput();  // as Http2Connection::Send
        EXPECT_EQ(nghttp2_session_mem_recv(client_, data, static_cast<size_t>(n)), n);
        moved = true;
      }
      if (!moved) {
        break;
      }
    }
    EXPECT_EQ(status_, 200);
    EXPECT_EQ(nghttp2_session_want_write(server_), 0);
    return received_;
  }

 private:
  static nghttp2_nv Field(std::string_view name, std::string_view value) {
    return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
            reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
            NGHTTP2_NV_FLAG_NONE};
  }
  static int OnServerFrame(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    auto* self = static_cast<SessionPair*>(user_data);
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      const nghttp2_nv response[] = {Field(":status", "200")};
      nghttp2_data_provider provider{};
      provider.source.ptr = self;
      provider.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                                  uint32_t* flags, nghttp2_data_source* source, void*) -> ssize_t {
        auto* pair = static_cast<SessionPair*>(source->ptr);
        size_t n = std::min(length, pair->body_.size() - pair->sent_);
        std::memcpy(buf, pair->body_.data() + pair->sent_, n);
        pair->sent_ += n;
        if (pair->sent_ == pair->body_.size()) {
          *flags |= NGHTTP2_DATA_FLAG_EOF;
        }
        return static_cast<ssize_t>(n);
      };
      nghttp2_submit_response(session, frame->hd.stream_id, response, std::size(response),
                              &provider);
    }
    return 0;
  }
  static int OnClientFrame(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_HEADERS) {
      static_cast<SessionPair*>(user_data)->status_ = 200;  // the only answer sent
    }
    return 0;
  }
  static int OnClientData(nghttp2_session*, uint8_t, int32_t, const uint8_t* data, size_t len,
                          void* user_data) {
    static_cast<SessionPair*>(user_data)->received_.append(reinterpret_cast<const char*>(data),
                                                           len);
    return 0;
  }

  Http2SessionMemory* memory_ = nullptr;
  nghttp2_session* server_ = nullptr;
  nghttp2_session* client_ = nullptr;
  std::string body_;
  size_t sent_ = 0;
  std::string received_;
  int status_ = 0;
};

// An idle session's frame buffer gives its pages back (mincore: none
// resident), once per burst of output, and the next answers come out
// whole from the zeroed pages.
TEST(Http2SessionMemory, IdleFrameBufferPagesGoBackAndAnswersStayWhole) {
  Http2SessionMemory memory;
  {
    SessionPair pair(&memory);
    ASSERT_TRUE(memory.has_frame_buffer());
    EXPECT_EQ(memory.FrameBufferResidentBytes(), 0u);  // nothing written yet
    std::string body(40000, 'x');
    for (size_t i = 0; i < body.size(); ++i) {
      body[i] = static_cast<char>('a' + i % 23);
    }
    EXPECT_EQ(pair.Exchange(body), body);
    // Full DATA frames (16 KiB) went through it: every page written.
    EXPECT_GE(memory.FrameBufferResidentBytes(), 16u * 1024);
    EXPECT_GE(memory.ReleaseIdlePages(), 16u * 1024);
    EXPECT_EQ(memory.FrameBufferResidentBytes(), 0u);
    EXPECT_EQ(memory.ReleaseIdlePages(), 0u);  // nothing written since
    EXPECT_EQ(pair.Exchange("small"), "small");
    EXPECT_GT(memory.FrameBufferResidentBytes(), 0u);
    EXPECT_GT(memory.ReleaseIdlePages(), 0u);
    EXPECT_EQ(memory.FrameBufferResidentBytes(), 0u);
    EXPECT_EQ(pair.Exchange(body), body);
  }
  EXPECT_FALSE(memory.has_frame_buffer());  // unmapped with the session
}

// The bytes a session holds: its blocks, as asked for, through another
// nghttp2_mem.
class CountingMem {
 public:
  explicit CountingMem(nghttp2_mem* inner)
      : inner_(inner), mem_{this, &Malloc, &Free, &Calloc, &Realloc} {}
  nghttp2_mem* mem() { return &mem_; }
  size_t live_bytes() const { return live_; }

 private:
  static CountingMem* Self(void* user_data) { return static_cast<CountingMem*>(user_data); }
  void Note(void* p, size_t size) {
    if (p != nullptr) {
      sizes_[p] = size;
      live_ += size;
    }
  }
  void Forget(void* p) {
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      live_ -= it->second;
      sizes_.erase(it);
    }
  }
  static void* Malloc(size_t size, void* user_data) {
    CountingMem* self = Self(user_data);
    void* p = self->inner_->malloc(size, self->inner_->mem_user_data);
    self->Note(p, size);
    return p;
  }
  static void Free(void* p, void* user_data) {
    CountingMem* self = Self(user_data);
    self->Forget(p);
    self->inner_->free(p, self->inner_->mem_user_data);
  }
  static void* Calloc(size_t count, size_t size, void* user_data) {
    CountingMem* self = Self(user_data);
    void* p = self->inner_->calloc(count, size, self->inner_->mem_user_data);
    self->Note(p, count * size);
    return p;
  }
  static void* Realloc(void* p, size_t size, void* user_data) {
    CountingMem* self = Self(user_data);
    void* fresh = self->inner_->realloc(p, size, self->inner_->mem_user_data);
    if (fresh != nullptr || size == 0) {
      self->Forget(p);
      self->Note(fresh, size);
    }
    return fresh;
  }

  nghttp2_mem* inner_;
  nghttp2_mem mem_;
  std::unordered_map<void*, size_t> sizes_;
  size_t live_ = 0;
};

// The proxy's sessions keep no closed stream: 120 requests one after the
// other leave the session holding what the first left. With nghttp2's
// defaults (the control) it keeps up to 100 closed streams of ~224 bytes
// for the priority tree, and the stream map grown to hold them.
TEST(Http2SessionMemory, SequentialRequestsLeaveNoClosedStreamsBehind) {
  for (bool proxy_options : {true, false}) {
    SCOPED_TRACE(proxy_options ? "proxy's options" : "nghttp2's defaults");
    Http2SessionMemory memory;
    CountingMem counting(memory.mem());
    nghttp2_option* option = proxy_options ? NewHttp2ServerOption(8192) : nullptr;
    size_t after_one = 0;
    size_t after_all = 0;
    {
      SessionPair pair(&memory, option, counting.mem());
      EXPECT_EQ(pair.Exchange("a"), "a");
      after_one = counting.live_bytes();
      for (int i = 1; i < 120; ++i) {
        ASSERT_EQ(pair.Exchange("b"), "b") << i;
      }
      after_all = counting.live_bytes();
    }
    EXPECT_EQ(counting.live_bytes(), 0u);  // all given back with the session
    if (option != nullptr) {
      nghttp2_option_del(option);
    }
    if (proxy_options) {
      EXPECT_EQ(after_all, after_one);
    } else {
      EXPECT_GE(after_all, after_one + 99 * 200);
    }
  }
}

}  // namespace
}  // namespace kwd::proxy
