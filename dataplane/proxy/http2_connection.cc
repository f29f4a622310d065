#include "dataplane/proxy/http2_connection.h"

#include <nghttp2/nghttp2.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/log.h"
#include "dataplane/http/chars.h"
#include "dataplane/http/chunked.h"
#include "dataplane/http/forward.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"
#include "dataplane/proxy/exchange.h"

namespace kwd::proxy {

namespace {

constexpr size_t kHighWater = 64 * 1024;
// Per-stream receive window: the most request body a stream buffers before
// its upstream takes it.
constexpr int32_t kStreamWindow = 64 * 1024;
// A header block (HEADERS + CONTINUATION) beyond this many bytes on the wire
// (CONTINUATION flood), or decoding to this many (HPACK references to a
// large table entry), ends the connection.
constexpr size_t kMaxHeaderBlockSlack = 64 * 1024;
// How fast a connection's budget for header blocks decoded to no field
// refills (Http2Connection::SettleHeaderBlock): about 2 ms of decoding a
// second for a block of 1-byte references, what a client that does not
// send malformed or refused blocks on purpose never comes near.
constexpr double kIgnoredBlockBytesPerSecond = 16 * 1024;
// Streams reset by the client per connection beyond which it is closed
// (rapid reset, CVE-2023-44487; nghttp2 limits the rate too).
constexpr uint64_t kMaxClientResets = 10'000;
// Bytes read from one client per Drive: then the worker turns its loop (the
// other connections' events, the timers and a drain deadline) before it
// reads more, however fast the client sends and whatever the bytes cost.
constexpr size_t kReadBytesPerTurn = 256 * 1024;
// An HTTP/2 connection without a stream for this long gives its frame
// buffer's pages back (Http2SessionMemory::ReleaseIdlePages; at its next
// tick, so within a second more): about 4 KiB per idle connection, for an
// madvise and the page faults of the next answer.
constexpr int64_t kReleasePagesAfterIdleMs = 500;

uint8_t* Bytes(std::string_view s) {
  return reinterpret_cast<uint8_t*>(const_cast<char*>(s.data()));
}

// Streams that end before their request reaches a server (rapid reset) get
// no access-log line each: a connection that had any gets one summary line
// at its end, at most one a second per worker thread; the connections left
// out are counted into the next line, or reported in a line of their own
// once the second is over if no other connection's line came (the metric
// counts every stream).
struct UnforwardedSummary {
  int64_t last_ms = -1;
  uint64_t connections_not_logged = 0;
  uint64_t streams_not_logged = 0;
  net::EventLoop* loop = nullptr;  // the worker's, while `flush` is armed
  net::Timer flush{this, [](void* self) { static_cast<UnforwardedSummary*>(self)->Flush(); }};

  void Flush() {
    if (connections_not_logged == 0) {
      return;
    }
    last_ms = loop->now_ms();
    Log(LogLevel::kInfo, "proxy",
        "HTTP/2 connections closed with streams that never reached a server (not logged one by "
        "one)",
        {{"connections", std::to_string(connections_not_logged)},
         {"streams", std::to_string(streams_not_logged)}});
    connections_not_logged = 0;
    streams_not_logged = 0;
  }
};
thread_local UnforwardedSummary unforwarded_summary;

void LogUnforwarded(net::EventLoop& loop, std::string_view client_ip, uint64_t streams,
                    uint64_t client_resets, std::string_view cause) {
  UnforwardedSummary& summary = unforwarded_summary;
  int64_t now_ms = loop.now_ms();
  if (summary.last_ms >= 0 && now_ms - summary.last_ms < 1000) {
    ++summary.connections_not_logged;
    summary.streams_not_logged += streams;
    if (!summary.flush.armed()) {
      summary.loop = &loop;
      loop.Schedule(&summary.flush, std::max<int64_t>(1, 1000 - (now_ms - summary.last_ms)));
    }
    return;
  }
  if (summary.flush.armed()) {
    summary.loop->Cancel(&summary.flush);  // this line carries them
  }
  summary.streams_not_logged = 0;
  summary.last_ms = now_ms;
  Log(LogLevel::kInfo, "proxy", "HTTP/2 connection closed with streams that never reached a server",
      {{"client", client_ip},
       {"streams", std::to_string(streams)},
       {"client_resets", std::to_string(client_resets)},
       {"cause", cause},
       {"connections_not_logged", std::to_string(summary.connections_not_logged)}});
  summary.connections_not_logged = 0;
}

// The three digits of a status code (100-999) into `out`.
void StatusDigits(int status, char out[3]) {
  status = std::clamp(status, 0, 999);
  out[0] = static_cast<char>('0' + status / 100);
  out[1] = static_cast<char>('0' + status / 10 % 10);
  out[2] = static_cast<char>('0' + status % 10);
}

// The hop-by-hop fields of one response (http::IsHopByHop's answer for each
// field), its Connection fields read once instead of for every field.
class ResponseHopByHop {
 public:
  explicit ResponseHopByHop(std::span<const http::Header> fields) : fields_(fields) {
    for (const auto& f : fields) {
      if (f.Id() != http::FieldId::kConnection) {
        continue;
      }
      http::ForEachListElement(f.value, [&](std::string_view element) {
        if (count_ == tokens_.size()) {
          overflow_ = true;
          return false;
        }
        tokens_[count_++] = element;
        return true;
      });
    }
  }
  bool operator()(const http::Header& f) const {
    switch (f.Id()) {
      case http::FieldId::kConnection:
      case http::FieldId::kKeepAlive:
      case http::FieldId::kProxyConnection:
      case http::FieldId::kTe:
      case http::FieldId::kTrailer:
      case http::FieldId::kTransferEncoding:
      case http::FieldId::kUpgrade:
        return true;
      default:
        break;
    }
    // Only a name a Connection element spells can be nominated ("Connection:
    // keep-alive" nominates no other field): http::IsHopByHop decides then.
    bool named = overflow_;
    for (size_t i = 0; i < count_ && !named; ++i) {
      named = http::EqualsIgnoreCase(tokens_[i], f.name);
    }
    return named && http::IsHopByHop(f.name, fields_);
  }

 private:
  std::span<const http::Header> fields_;
  std::array<std::string_view, 8> tokens_{};
  size_t count_ = 0;
  bool overflow_ = false;
};

// Ended streams wait for the next ones in a per-thread free list (the one
// recycling level), their exchange and containers warm (Stream::Reset), so a
// worker's streams stop allocating once it has served a few. At most this
// many are kept, about 10 KB each without the buffers, which they give back
// (5 MB after a burst of that many streams). With 128, 64 connections x 10
// streams (h2load) missed the list for one new stream in four: a batch of
// upstream answers ends a few hundred streams at once.
constexpr uint32_t kMaxFreeStreams = 512;

// Where a response head or trailers are put together for nghttp2, which
// copies names and values when they are submitted: one per thread, not one
// per connection (whose capacity an idle connection kept).
struct SubmitScratch {
  std::vector<nghttp2_nv> nva;
};
SubmitScratch& ThreadSubmitScratch() {
  static thread_local SubmitScratch scratch;
  return scratch;
}

// HPACK for response heads (RFC 7541): the encoder's dynamic table is small
// and holds only fields a server sends with the same value on every response
// of a connection (Server, Content-Type, Cache-Control, the security
// fields, ...). From the second response on each is one or two bytes (an
// index) instead of a literal Huffman-coded afresh. Every other field goes
// as a literal never indexed: values that change with each response (Date,
// lengths, ETags, cookies, request ids) would only push the repeated ones
// out of the table, and make the encoder allocate and free an entry for
// each. The table's storage (an entry per indexed field, a few hundred
// bytes for a typical head) is allocated on first use, so an idle
// connection that never answered holds none.
constexpr uint32_t kResponseHpackTableBytes = 1024;

// The flags of a response field named `name` (any case: nghttp2 lower-cases
// the names it copies).
uint8_t ResponseFieldIndexing(std::string_view name) {
  auto is = [&](std::string_view candidate) { return http::EqualsIgnoreCase(name, candidate); };
  bool repeated = false;
  switch (name.size()) {
    case 4:
      repeated = is("vary");
      break;
    case 6:
      repeated = is("server") || is("pragma");
      break;
    case 10:
      repeated = is("sap-server");
      break;
    case 12:
      repeated = is("content-type");
      break;
    case 13:
      repeated = is("cache-control") || is("accept-ranges");
      break;
    case 15:
      repeated = is("x-frame-options") || is("referrer-policy");
      break;
    case 16:
      repeated = is("content-encoding") || is("content-language") || is("x-xss-protection");
      break;
    case 18:
      repeated = is("permissions-policy");
      break;
    case 22:
      repeated = is("x-content-type-options");
      break;
    case 23:
      repeated = is("content-security-policy");
      break;
    case 25:
      repeated = is("strict-transport-security");
      break;
    case 27:
      repeated = is("access-control-allow-origin");
      break;
    case 32:
      repeated = is("access-control-allow-credentials");
      break;
    default:
      break;
  }
  return repeated ? NGHTTP2_NV_FLAG_NONE : NGHTTP2_NV_FLAG_NO_INDEX;
}

// Http2ThreadAllocator's lists. A block has a 16-byte prefix (malloc's
// alignment kept) holding its class, or kLarge (or kMapped) and its size.
struct SizeClassPool {
  static constexpr size_t kPrefix = 16;
  // 64 B .. 4 KiB, two classes per power of two (64, 96, 128, 192, ...,
  // 3 KiB, 4 KiB): a block wastes at most a third of itself. nghttp2's
  // session structure (2,928 bytes in 1.52, kept for the connection's life)
  // took a 4 KiB block with classes of powers of two only.
  static constexpr uint32_t kClasses = 13;
  static constexpr uint32_t kLarge = kClasses;
  // Blocks of kMapBytes and more have pages of their own (mmap), resident
  // only as far as they were written; an mmap and a munmap each, the blocks
  // are not kept on a list. nghttp2's output frame buffer (16 KiB a
  // session, taken when it starts and kept for its life) is one, taken
  // through an Http2SessionMemory: page-aligned, without the prefix, so
  // that all its pages can be given back while the connection is idle.
  static constexpr uint32_t kMapped = kClasses + 1;
  static constexpr size_t kMapBytes = 16 * 1024;
  static constexpr size_t kPage = 4096;
  static size_t PageRound(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }
  static size_t MappedBytes(size_t size) { return PageRound(kPrefix + size); }
  static constexpr size_t kKeepBytesPerClass = 128 * 1024;
  struct Prefix {
    uint32_t size_class;
    size_t size;  // the bytes asked for (the last realloc's)
  };
  static_assert(sizeof(Prefix) <= kPrefix);
  struct Node {
    Node* next;
  };
  Node* free[kClasses];
  uint32_t count[kClasses];
  bool closed;  // the thread is exiting: blocks go straight back to malloc

  static SizeClassPool& ThisThread() {
    static thread_local SizeClassPool pool{};  // trivially destructible, as PerThreadStack
    return pool;
  }
  static size_t ClassBytes(uint32_t c) {
    // Even classes 64 << c/2, odd ones 1.5 times the one before.
    size_t base = size_t{64} << (c / 2);
    return (c % 2) == 0 ? base : base + base / 2;
  }
  static uint32_t ClassOf(size_t size) {
    uint32_t c = 0;
    while (c < kClasses && ClassBytes(c) < size) {
      ++c;
    }
    return c;  // kLarge when beyond the last class
  }
  static Prefix* PrefixOf(void* p) {
    return reinterpret_cast<Prefix*>(static_cast<char*>(p) - kPrefix);
  }

  void* Take(size_t size) {
    uint32_t c = ClassOf(size);
    char* base;
    if (c < kClasses && free[c] != nullptr) {
      Node* node = free[c];
      free[c] = node->next;
      --count[c];
      base = reinterpret_cast<char*>(node);
    } else if (c == kLarge && size >= kMapBytes) {
      void* mapped = ::mmap(nullptr, MappedBytes(size), PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mapped == MAP_FAILED) {
        return nullptr;
      }
      base = static_cast<char*>(mapped);
      c = kMapped;
    } else {
      base = static_cast<char*>(
          std::malloc(kPrefix + (c < kClasses ? ClassBytes(c) : std::max<size_t>(size, 1))));
      if (base == nullptr) {
        return nullptr;
      }
    }
    ::new (base) Prefix{c, size};
    return base + kPrefix;
  }
  void Give(void* p);
};

struct SizeClassPoolDrainer {
  ~SizeClassPoolDrainer() {
    SizeClassPool& pool = SizeClassPool::ThisThread();
    pool.closed = true;
    for (uint32_t c = 0; c < SizeClassPool::kClasses; ++c) {
      while (pool.free[c] != nullptr) {
        SizeClassPool::Node* node = pool.free[c];
        pool.free[c] = node->next;
        std::free(node);
      }
      pool.count[c] = 0;
    }
  }
};

void SizeClassPool::Give(void* p) {
  if (p == nullptr) {
    return;
  }
  static thread_local SizeClassPoolDrainer drainer;  // constructed with the first kept block
  (void)drainer;
  char* base = static_cast<char*>(p) - kPrefix;
  uint32_t c = PrefixOf(p)->size_class;
  if (c == kMapped) {
    ::munmap(base, MappedBytes(PrefixOf(p)->size));
    return;
  }
  if (closed || c >= kClasses || count[c] >= kKeepBytesPerClass / ClassBytes(c)) {
    std::free(base);
    return;
  }
  free[c] = ::new (base) Node{free[c]};
  ++count[c];
}

// Resizes a block of the pool (not null, size not 0) as realloc does.
void* PoolResize(void* p, size_t size) {
  SizeClassPool::Prefix* prefix = SizeClassPool::PrefixOf(p);
  if (prefix->size_class < SizeClassPool::kClasses &&
      size <= SizeClassPool::ClassBytes(prefix->size_class)) {
    prefix->size = size;
    return p;  // fits its block still
  }
  void* fresh = SizeClassPool::ThisThread().Take(size);
  if (fresh == nullptr) {
    return nullptr;  // p stays valid, as realloc's
  }
  std::memcpy(fresh, p, std::min(prefix->size, size));
  SizeClassPool::ThisThread().Give(p);
  return fresh;
}

void* PoolMalloc(size_t size, void* /*user_data*/) {
  return SizeClassPool::ThisThread().Take(size);
}

void PoolFree(void* p, void* /*user_data*/) {
  SizeClassPool::ThisThread().Give(p);
}

bool CountOverflows(size_t count, size_t size) {
  return size != 0 && count > static_cast<size_t>(-1) / 2 / size;
}

void* PoolCalloc(size_t count, size_t size, void* /*user_data*/) {
  if (CountOverflows(count, size)) {
    return nullptr;
  }
  void* p = SizeClassPool::ThisThread().Take(count * size);
  if (p != nullptr && SizeClassPool::PrefixOf(p)->size_class != SizeClassPool::kMapped) {
    std::memset(p, 0, count * size);  // fresh mapped pages are zeroes already
  }
  return p;
}

void* PoolRealloc(void* p, size_t size, void* /*user_data*/) {
  if (p == nullptr) {
    return SizeClassPool::ThisThread().Take(size);
  }
  if (size == 0) {
    SizeClassPool::ThisThread().Give(p);
    return nullptr;
  }
  return PoolResize(p, size);
}

}  // namespace

nghttp2_mem* Http2ThreadAllocator() {
  static nghttp2_mem mem{nullptr, &PoolMalloc, &PoolFree, &PoolCalloc, &PoolRealloc};
  return &mem;
}

// The session's frame buffer: the first block of kMapBytes or more taken
// while the session is being created (nghttp2_session_server_new3 takes it
// then, and no other block that large). Every other block is the pool's.
struct Http2SessionMemory::Hooks {
  static Http2SessionMemory* Self(void* user_data) {
    return static_cast<Http2SessionMemory*>(user_data);
  }
  static bool IsFrame(Http2SessionMemory* m, void* p) { return p != nullptr && p == m->frame_; }
  // A page-aligned mapping for the frame buffer, or nullptr to take a pool block.
  static void* TakeFrame(Http2SessionMemory* m, size_t size) {
    if (!m->creating_ || m->frame_ != nullptr || size < SizeClassPool::kMapBytes) {
      return nullptr;
    }
    size_t bytes = SizeClassPool::PageRound(size);
    void* mapped =
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) {
      return nullptr;  // a pool block, then (its own mmap, with the prefix)
    }
    m->frame_ = mapped;
    m->frame_size_ = size;
    m->frame_bytes_ = bytes;
    m->released_ = false;
    return mapped;
  }
  static void GiveFrame(Http2SessionMemory* m) {
    ::munmap(m->frame_, m->frame_bytes_);
    m->frame_ = nullptr;
    m->frame_size_ = 0;
    m->frame_bytes_ = 0;
  }
  static void* Malloc(size_t size, void* user_data) {
    void* p = TakeFrame(Self(user_data), size);
    return p != nullptr ? p : SizeClassPool::ThisThread().Take(size);
  }
  static void Free(void* p, void* user_data) {
    Http2SessionMemory* m = Self(user_data);
    if (IsFrame(m, p)) {
      GiveFrame(m);
      return;
    }
    SizeClassPool::ThisThread().Give(p);
  }
  static void* Calloc(size_t count, size_t size, void* user_data) {
    return PoolCalloc(count, size, user_data);
  }
  static void* Realloc(void* p, size_t size, void* user_data) {
    Http2SessionMemory* m = Self(user_data);
    if (p == nullptr) {
      return Malloc(size, user_data);
    }
    if (size == 0) {
      Free(p, user_data);
      return nullptr;
    }
    if (!IsFrame(m, p)) {
      return PoolResize(p, size);
    }
    if (size <= m->frame_bytes_) {
      m->frame_size_ = size;
      return p;
    }
    // Grown beyond its pages (nghttp2 does not: its buffers take more
    // chains instead): a pool block.
    void* fresh = SizeClassPool::ThisThread().Take(size);
    if (fresh == nullptr) {
      return nullptr;
    }
    std::memcpy(fresh, p, m->frame_size_);
    GiveFrame(m);
    return fresh;
  }
};

Http2SessionMemory::Http2SessionMemory()
    : mem_{this, &Hooks::Malloc, &Hooks::Free, &Hooks::Calloc, &Hooks::Realloc} {}

Http2SessionMemory::~Http2SessionMemory() {
  if (frame_ != nullptr) {
    Hooks::GiveFrame(this);  // the session was not deleted (it owned the block)
  }
}

size_t Http2SessionMemory::ReleaseIdlePages() {
  if (frame_ == nullptr || released_) {
    return 0;
  }
  released_ = true;
  // MADV_DONTNEED: the pages read as zeroes from now on, and are resident
  // again only as frames are written into them.
  if (::madvise(frame_, frame_bytes_, MADV_DONTNEED) != 0) {
    return 0;
  }
  return frame_bytes_;
}

size_t Http2SessionMemory::FrameBufferResidentBytes() const {
  if (frame_ == nullptr) {
    return 0;
  }
  const size_t pages = frame_bytes_ / SizeClassPool::kPage;
  std::vector<unsigned char> resident(pages);
  if (::mincore(frame_, frame_bytes_, resident.data()) != 0) {
    return frame_bytes_;
  }
  size_t bytes = 0;
  for (unsigned char r : resident) {
    bytes += (r & 1) != 0 ? SizeClassPool::kPage : 0;
  }
  return bytes;
}

PrefaceMatch MatchHttp2Preface(std::string_view received) {
  size_t n = std::min(received.size(), kHttp2Preface.size());
  if (received.substr(0, n) != kHttp2Preface.substr(0, n)) {
    return PrefaceMatch::kNo;
  }
  return n == kHttp2Preface.size() ? PrefaceMatch::kYes : PrefaceMatch::kPartial;
}

// One stream: its request head as received, and the exchange forwarding it.
struct Http2Connection::Stream final : ExchangeSink, net::Deletable {
  // The worker is the thread's: a stream in the free list serves only the
  // connections of the worker that made it.
  explicit Stream(Worker* worker) : exchange(worker, this, ClientContext{}) {}

  // Makes this (new, or ended and on no call stack) stream `stream_id` of
  // `c`: every member starts afresh, but the exchange is recycled and the
  // containers keep their capacity.
  void Reset(Http2Connection* c, int32_t stream_id) {
    connection = c;
    id = stream_id;
    exchange.Recycle(ClientContext{c->client_ip_, c->transport_->tls(), "HTTP/2.0", c->client_port_, c->fd_});
    arena.clear();
    fields.clear();
    cookie.clear();
    header_bytes = 0;
    header_too_large = false;
    too_many_fields = false;
    started = false;
    head_done = false;
    head_end_stream = false;
    request_end = false;
    deferred = false;
    responded = false;
    response_done = false;
    trailers_sent = false;
    last_sent_ms = 0;
    begun_ms = 0;
    head.scheme = {};
    head.authority = {};
    head.header_count = 0;
    request_trailers.clear();
    pump = false;
    unconsumed = 0;
    body.Clear();
    body_end = false;
    trailers.clear();
  }
  // An ended stream gives back its buffers (and oversized containers)
  // before it waits in the free list.
  void ReleaseMemory() {
    exchange.ReleaseIdleMemory();
    body.Clear();
    body.Release();
    constexpr size_t kKeepBytes = 4096;
    for (std::string* s : {&arena, &cookie, &request_trailers, &trailers}) {
      if (s->capacity() > kKeepBytes) {
        std::string().swap(*s);
      }
    }
    if (fields.capacity() > 64) {
      std::vector<Field>().swap(fields);
    }
  }

  Http2Connection* connection = nullptr;
  int32_t id = 0;
  Exchange exchange;
  // Header fields as received: names and values in `arena`.
  struct Field {
    uint32_t name_at, name_len, value_at, value_len;
  };
  std::string arena;
  std::vector<Field> fields;
  std::string cookie;       // the cookie fields joined with "; " (RFC 9113 8.2.3)
  size_t header_bytes = 0;  // decoded, as SETTINGS_MAX_HEADER_LIST_SIZE counts them
  bool header_too_large = false;
  bool too_many_fields = false;
  bool malformed = false;  // reset by nghttp2 for a malformed frame or header section
  bool started = false;
  // The request head is complete; the exchange starts once the bytes read
  // with it are processed (StartPending), so a HEADERS reset in the same
  // read (rapid reset, CVE-2023-44487) never reaches the upstream.
  bool head_done = false;
  bool head_end_stream = false;
  bool request_end = false;  // END_STREAM received
  bool deferred = false;     // the data source waits for ResumeData
  bool responded = false;
  bool response_done = false;  // the body's last byte went to nghttp2
  bool trailers_sent = false;  // a trailing HEADERS ends the stream
  int64_t last_sent_ms = 0;    // response head or body bytes last handed to nghttp2
  void MarkSent() { last_sent_ms = connection->worker_->loop().now_ms(); }
  int64_t begun_ms = 0;
  http::RequestHead head;
  // Passable request trailer fields as "name: value\r\n" lines (bounded by
  // --max-header-size; the rest is dropped).
  std::string request_trailers;
  bool pump = false;      // the exchange may move bytes: Pump it
  size_t unconsumed = 0;  // DATA bytes not yet given back to the window
  // Response body for the client, its end and the upstream's trailer lines.
  Buffer body;
  bool body_end = false;
  std::string trailers;

  void OnResponseHead(const http::ResponseHead& head, const http::ResponseInfo& /*info*/,
                      std::span<const http::Header> added, bool end) override {
    SubmitResponse(head.status_code, head.fields(), added, end);
  }
  void SubmitResponse(int status, std::span<const http::Header> response_fields,
                      std::span<const http::Header> added, bool end);
  void SubmitTrailers();
  void OnInterimHead(const http::ResponseHead& head) override {
    if (responded || connection->session_ == nullptr) {
      return;
    }
    // With its fields: a 103 Early Hints is there for its Link fields.
    char status_text[3];
    std::vector<nghttp2_nv>& nva = HeadFields(head.status_code, head.fields(), {}, status_text);
    nghttp2_submit_headers(connection->session_, NGHTTP2_FLAG_NONE, id, nullptr, nva.data(),
                           nva.size(), nullptr);
  }
  // The thread's scratch nva for a response head (ThreadSubmitScratch):
  // :status (its digits in `status_text`, which must outlive the submit),
  // the fields (names as received: nghttp2 lower-cases them), hop-by-hop
  // ones left out, then the `added` ones.
  std::vector<nghttp2_nv>& HeadFields(int status, std::span<const http::Header> response_fields,
                                      std::span<const http::Header> added, char status_text[3]);
  void OnLocalAnswer(const http::ResponseHead& head, std::string_view /*page_head*/,
                     std::string_view page, bool /*must_close*/) override {
    body.Append(page);
    body_end = true;
    SubmitResponse(head.status_code, head.fields(), {}, page.empty());
  }
  void OnResponseBody(std::string_view data) override {
    body.Append(data);
    ResumeData();
  }
  void OnResponseEnd(std::string_view upstream_trailers) override {
    body_end = true;
    trailers.assign(upstream_trailers);
    ResumeData();
  }
  size_t ResponseBacklog() const override { return body.size(); }
  // Response body bytes (or its end) are ready for the data source.
  void ResumeData() {
    if (deferred && connection->session_ != nullptr) {
      deferred = false;
      nghttp2_session_resume_data(connection->session_, id);
    }
  }
  void OnRequestBodyConsumed(size_t bytes) override {
    bytes = std::min(bytes, unconsumed);
    unconsumed -= bytes;
    if (bytes > 0 && connection->session_ != nullptr) {
      nghttp2_session_consume(connection->session_, id, bytes);
    }
  }
  void OnExchangeAborted() override {
    connection->CountError(Http2Error::kStreamReset);
    nghttp2_submit_rst_stream(connection->session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
  }
  void OnExchangeProgress() override { connection->DriveSoon(); }
};

namespace {

ssize_t ReadResponseBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                         uint32_t* data_flags, nghttp2_data_source* source, void* user_data);

}  // namespace

void Http2Connection::Stream::SubmitResponse(int status,
                                             std::span<const http::Header> response_fields,
                                             std::span<const http::Header> added, bool end) {
  if (responded || connection->session_ == nullptr) {
    return;
  }
  responded = true;
  response_done = end;
  MarkSent();
  char status_text[3];
  std::vector<nghttp2_nv>& nva = HeadFields(status, response_fields, added, status_text);
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = &ReadResponseBody;
  nghttp2_submit_response(connection->session_, id, nva.data(), nva.size(),
                          end ? nullptr : &provider);
}

std::vector<nghttp2_nv>& Http2Connection::Stream::HeadFields(
    int status, std::span<const http::Header> response_fields,
    std::span<const http::Header> added, char status_text[3]) {
  StatusDigits(status, status_text);
  // HTTP/2 field names are lower case (RFC 9113 8.2.1): nghttp2 lower-cases
  // names as it copies names and values, when the response is submitted.
  std::vector<nghttp2_nv>& nva = ThreadSubmitScratch().nva;
  nva.clear();
  nva.push_back(
      {Bytes(":status"), reinterpret_cast<uint8_t*>(status_text), 7, 3, NGHTTP2_NV_FLAG_NONE});
  ResponseHopByHop hop_by_hop(response_fields);
  bool length_sent = false;
  for (const auto& f : response_fields) {
    if (hop_by_hop(f)) {
      continue;
    }
    std::string_view value = f.value;
    if (f.Id() == http::FieldId::kContentLength) {
      // HTTP/1.1 lets a server repeat its length (fields or a list of the
      // same value: the exchange checked they agree) and a 204 carry one;
      // HTTP/2 clients reset a stream unless there is at most one field of
      // one value (RFC 9113 8.1.1), and none on a 204 (RFC 9110 8.6) or a
      // 1xx.
      if (length_sent || status == 204 || status < 200) {
        continue;
      }
      length_sent = true;
      http::ForEachListElement(f.value, [&](std::string_view element) {
        value = element;
        return false;
      });
    }
    nva.push_back({Bytes(f.name), Bytes(value), f.name.size(), value.size(),
                   ResponseFieldIndexing(f.name)});
  }
  for (const auto& f : added) {
    nva.push_back({Bytes(f.name), Bytes(f.value), f.name.size(), f.value.size(),
                   ResponseFieldIndexing(f.name)});
  }
  return nva;
}

// The upstream's chunked trailers as a trailing HEADERS frame: names lower
// case, forbidden fields (http::IsForbiddenTrailer) left out. Called from the
// data source at the body's end, which then sends no END_STREAM on DATA.
void Http2Connection::Stream::SubmitTrailers() {
  std::string_view block = trailers;
  std::vector<nghttp2_nv>& nva = ThreadSubmitScratch().nva;
  nva.clear();
  // Names as received: nghttp2 lower-cases them as it copies them.
  http::ForEachPassableTrailer(block, [&](std::string_view name, std::string_view value) {
    nva.push_back({Bytes(name), Bytes(value), name.size(), value.size(),
                   ResponseFieldIndexing(name)});
  });
  if (nva.empty()) {
    return;  // all forbidden: DATA carries END_STREAM as without trailers
  }
  trailers_sent = nghttp2_submit_trailer(connection->session_, id, nva.data(), nva.size()) == 0;
}

namespace {

ssize_t ReadResponseBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                         uint32_t* data_flags, nghttp2_data_source* source, void* /*user_data*/) {
  auto* stream = static_cast<Http2Connection::Stream*>(source->ptr);
  size_t n = std::min(length, stream->body.size());
  std::memcpy(buf, stream->body.view().data(), n);
  stream->body.Consume(n);
  stream->body.Release();  // drained: its block serves the next stream's response
  bool end = stream->body.empty() && stream->body_end;
  stream->pump = stream->pump || n > 0;  // room for more from the upstream
  if (n > 0) {
    stream->MarkSent();
  }
  if (end) {
    stream->response_done = true;
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!stream->trailers.empty()) {
      stream->SubmitTrailers();
      if (stream->trailers_sent) {
        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
    if (!stream->request_end) {
      // The response is complete before the request: the rest of the
      // request body is not wanted (RFC 9113 8.1).
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_NO_ERROR);
    }
    return static_cast<ssize_t>(n);
  }
  if (n == 0) {
    stream->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

}  // namespace

// nghttp2's callbacks, with access to the connection.
struct Http2Callbacks {
  static Http2Connection* Self(void* user_data) { return static_cast<Http2Connection*>(user_data); }

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    Http2Connection* c = Self(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
      return 0;
    }
    ProxyMetrics& metrics = c->worker_->metrics();
    // Streams whose exchange still runs (a reset stream's upstream is closed
    // at once, so this only guards against a bug) beyond twice the limit
    // are refused.
    if (c->draining_ || c->live_streams_ >= 2 * c->worker_->options().h2_max_concurrent_streams) {
      c->CountError(Http2Error::kRefusedStream);
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                NGHTTP2_REFUSED_STREAM);
      return 0;  // its fields and DATA are ignored: no Stream
    }
    Http2Connection::Stream* stream = c->NewStream(frame->hd.stream_id);
    stream->begun_ms = c->worker_->loop().now_ms();
    c->streams_[frame->hd.stream_id] = stream;
    ++c->live_streams_;
    ++c->streams_begun_;
    metrics.http2_streams.Add(1);
    metrics.http2_streams_total.Inc();
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, stream);
    return 0;
  }


  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_len, const uint8_t* value, size_t value_len, uint8_t /*flags*/,
                      void* user_data) {
    Http2Connection* c = Self(user_data);
    // Every field nghttp2 emits was validated byte by byte: a 1-byte
    // reference to a 4 KB table entry costs 4 KB of work. The decoded size
    // of the block (any stream's, a refused one's or trailers) is counted
    // here, so the work per block is bounded by the cap, not by its
    // references (HPACK CPU amplification).
    c->block_decoded_ += name_len + value_len + 32;
    if (c->block_decoded_ > c->worker_->options().max_header_bytes + kMaxHeaderBlockSlack) {
      return static_cast<int>(c->EndForHeaderBlock());
    }
    Http2Connection::Stream* stream = c->FindStream(frame->hd.stream_id);
    if (stream == nullptr) {
      return 0;
    }
    if (stream->started || stream->head_done) {
      // Trailers: kept for a request body forwarded chunked.
      std::string_view n(reinterpret_cast<const char*>(name), name_len);
      std::string_view v(reinterpret_cast<const char*>(value), value_len);
      if (frame->headers.cat == NGHTTP2_HCAT_HEADERS && !http::IsForbiddenTrailer(n) &&
          stream->request_trailers.size() + name_len + value_len + 4 <=
              c->worker_->options().max_header_bytes) {
        stream->request_trailers.append(n).append(": ").append(v).append("\r\n");
      }
      return 0;
    }
    size_t limit = c->worker_->options().max_header_bytes;
    stream->header_bytes += name_len + value_len + 32;
    if (stream->header_bytes > limit) {
      stream->header_too_large = true;
      return 0;
    }
    std::string_view n(reinterpret_cast<const char*>(name), name_len);
    std::string_view v(reinterpret_cast<const char*>(value), value_len);
    if (n == "cookie") {
      if (!stream->cookie.empty()) {
        stream->cookie.append("; ");
      }
      stream->cookie.append(v);
      return 0;
    }
    if (stream->fields.size() >= http::kMaxHeaders - 4) {
      stream->too_many_fields = true;
      return 0;
    }
    if (stream->fields.empty()) {
      // Room for a usual request head at once, rather than growing field by
      // field.
      stream->fields.reserve(16);
      stream->arena.reserve(256);
    }
    Http2Connection::Stream::Field f{};
    f.name_at = static_cast<uint32_t>(stream->arena.size());
    f.name_len = static_cast<uint32_t>(name_len);
    stream->arena.append(n);
    f.value_at = static_cast<uint32_t>(stream->arena.size());
    f.value_len = static_cast<uint32_t>(value_len);
    stream->arena.append(v);
    stream->fields.push_back(f);
    return 0;
  }

  // A field nghttp2 decoded and drops without resetting the stream (a name
  // with a character a token does not allow): counted as decoded, as
  // OnHeader counts, so the cap bounds references to such a name too and
  // the block stays one decoded to the end (SettleHeaderBlock).
  static int OnInvalidHeader(nghttp2_session* /*session*/, const nghttp2_frame* /*frame*/,
                             const uint8_t* /*name*/, size_t name_len, const uint8_t* /*value*/,
                             size_t value_len, uint8_t /*flags*/, void* user_data) {
    Http2Connection* c = Self(user_data);
    c->block_decoded_ += name_len + value_len + 32;
    if (c->block_decoded_ > c->worker_->options().max_header_bytes + kMaxHeaderBlockSlack) {
      return static_cast<int>(c->EndForHeaderBlock());
    }
    return 0;  // ignored, as without this callback
  }

  static int OnBeginFrame(nghttp2_session* session, const nghttp2_frame_hd* hd, void* user_data) {
    Http2Connection* c = Self(user_data);
    c->invalid_frame_last_ = false;  // nghttp2 goes on after it: a stream error
    if (hd->type == NGHTTP2_HEADERS && !c->CheckStreamId(hd->stream_id)) {
      c->CountError(Http2Error::kProtocol);
      c->fatal_ = true;
      nghttp2_session_terminate_session(session, NGHTTP2_PROTOCOL_ERROR);
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (hd->type == NGHTTP2_HEADERS && c->ended_streams_.Contains(hd->stream_id)) {
      return static_cast<int>(c->EndForClosedStream(false));
    }
    return 0;
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    Http2Connection* c = Self(user_data);
    if (frame->hd.type == NGHTTP2_HEADERS) {
      // Decoded to the end, every field through OnHeader or OnInvalidHeader.
      c->block_complete_ = true;
    }
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        Http2Connection::Stream* stream = c->FindStream(frame->hd.stream_id);
        if (stream == nullptr) {
          return 0;
        }
        bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
        if (!stream->started && !stream->head_done) {
          stream->head_done = true;
          stream->head_end_stream = end;
          c->to_start_.push_back(stream->id);
          break;
        }
        c->StartNow(stream);  // trailers
        if (end) {
          stream->exchange.SetRequestTrailers(stream->request_trailers);
          stream->request_end = true;
          stream->exchange.EndRequestBody();
          stream->exchange.Pump();
        }
        break;
      }
      case NGHTTP2_DATA: {
        Http2Connection::Stream* stream = c->FindStream(frame->hd.stream_id);
        if (stream != nullptr && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
          c->StartNow(stream);
          stream->request_end = true;
          stream->exchange.EndRequestBody();
          stream->exchange.Pump();
        }
        break;
      }
      case NGHTTP2_PING:
        if ((frame->hd.flags & NGHTTP2_FLAG_ACK) != 0) {
          c->ping_sent_ms_ = 0;
        }
        break;
      case NGHTTP2_RST_STREAM:
        ++c->resets_received_;
        c->CountError(Http2Error::kClientReset);
        if (c->resets_received_ > kMaxClientResets) {
          c->CountError(Http2Error::kFlood);
          nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM);
        }
        break;
      case NGHTTP2_SETTINGS:
        c->got_preface_ = true;
        break;
      default:
        break;
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id,
                         const uint8_t* data, size_t len, void* user_data) {
    Http2Connection* c = Self(user_data);
    Http2Connection::Stream* stream = c->FindStream(stream_id);
    if (stream != nullptr) {
      c->StartNow(stream);  // its body follows the head in this read
    }
    if (stream == nullptr || !stream->started) {
      nghttp2_session_consume(session, stream_id, len);
      return 0;
    }
    stream->unconsumed += len;
    stream->exchange.PushRequestBody(std::string_view(reinterpret_cast<const char*>(data), len));
    stream->pump = true;
    return 0;
  }

  static int OnStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t /*error_code*/,
                           void* user_data) {
    Http2Connection* c = Self(user_data);
    // nghttp2 keeps no closed stream (NewHttp2ServerOption): whether the
    // client had ended this one is remembered here. (The stream is still
    // nghttp2's during this callback.)
    if (nghttp2_session_get_stream_remote_close(session, stream_id) == 1) {
      c->ended_streams_.Add(stream_id);
    }
    Http2Connection::Stream* stream = c->FindStream(stream_id);
    if (stream == nullptr) {
      return 0;
    }
    if (stream->unconsumed > 0) {
      nghttp2_session_consume_connection(session, stream->unconsumed);
      stream->unconsumed = 0;
    }
    c->RemoveStream(stream_id);
    return 0;
  }

  static int OnInvalidFrame(nghttp2_session* session, const nghttp2_frame* frame,
                            int /*lib_error*/, void* user_data) {
    Http2Connection* c = Self(user_data);
    c->CountError(Http2Error::kProtocol);
    // A stream error has queued its RST_STREAM by now; a connection error
    // queues its GOAWAY after this callback (MemRecv).
    c->invalid_frame_last_ = true;
    // The queue's length is bounded (max_outbound_ack and the streams).
    c->queued_at_invalid_frame_ =
        static_cast<uint32_t>(nghttp2_session_get_outbound_queue_size(session));
    if (Http2Connection::Stream* stream = c->FindStream(frame->hd.stream_id)) {
      stream->malformed = true;  // counted here, not again as reset_before_forward
    }
    return 0;
  }

  static int OnFrameSend(nghttp2_session* /*session*/, const nghttp2_frame* frame,
                         void* user_data) {
    if (frame->hd.type == NGHTTP2_GOAWAY) {
      Http2Connection* c = Self(user_data);
      c->CountError(Http2Error::kGoawaySent);
      if (frame->goaway.error_code != NGHTTP2_NO_ERROR) {
        c->error_goaway_sent_ = true;  // the client may still be sending: the close lingers
      }
    }
    return 0;
  }
};

nghttp2_option* NewHttp2ServerOption(size_t max_header_bytes) {
  nghttp2_option* option = nullptr;
  if (nghttp2_option_new(&option) != 0) {
    return nullptr;  // nghttp2's defaults, then
  }
  // Request bodies are acknowledged as the upstream takes them.
  nghttp2_option_set_no_auto_window_update(option, 1);
  // Bounded queues of what floods make us send (SETTINGS and PING ACKs) and
  // of what a peer's SETTINGS may carry.
  nghttp2_option_set_max_outbound_ack(option, 1000);
  nghttp2_option_set_max_settings(option, 32);
  nghttp2_option_set_max_send_header_block_length(option, 64 * 1024 + max_header_bytes);
  // HPACK: the decoder's dynamic table (what clients send) stays at the
  // 4096 bytes advertised. Response heads are encoded with a table of 1 KiB
  // rather than 4 KiB, holding only the fields that repeat
  // (ResponseFieldIndexing): with nghttp2's default every field was indexed,
  // the table filled with Date values and held about 0.9 KiB per idle
  // connection (bench/memory_bench.sh's 1,000 HTTP/2 connections); without
  // a table every response's Server and Content-Type were Huffman-coded
  // again (about 1,000 instructions a response).
  nghttp2_option_set_max_deflate_dynamic_table_size(option, kResponseHpackTableBytes);
  // No closed stream kept for the priority tree (up to
  // SETTINGS_MAX_CONCURRENT_STREAMS of them, 288 bytes each with the
  // allocator's rounding, and the stream map grown to hold them: 26 KiB
  // per connection that served 100 requests, for its life). What a client
  // sees is kept by Http2Connection::ended_streams_.
  nghttp2_option_set_no_closed_streams(option, 1);
  return option;
}

Http2Connection::Http2Connection(Worker* worker, std::unique_ptr<net::Transport> transport,
                                 std::string client_ip, uint16_t client_port,
                                 std::string_view received, bool registered)
    : worker_(worker),
      transport_(std::move(transport)),
      fd_(transport_->fd()),
      client_port_(client_port),
      client_ip_(std::move(client_ip)),
      registered_(registered),
      ignored_block_budget_(static_cast<double>(worker->options().max_header_bytes)),
      ignored_block_refilled_ms_(worker->loop().now_ms()),
      tick_(this, [](void* self) { static_cast<Http2Connection*>(self)->OnTick(); }),
      drive_soon_(this, [](void* self) { static_cast<Http2Connection*>(self)->Drive(); }) {
  in_.Append(received);
}

Http2Connection::~Http2Connection() {
  if (session_ != nullptr) {
    nghttp2_session_del(session_);
  }
  for (auto& [id, stream] : streams_) {
    delete stream;
  }
  for (Stream* stream : retired_) {
    delete stream;
  }
}

void Http2Connection::Start() {
  const ProxyOptions& options = worker_->options();
  worker_->metrics().http2_connections.Add(1);
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks,
                                                          &Http2Callbacks::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Http2Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_invalid_header_callback(callbacks,
                                                           &Http2Callbacks::OnInvalidHeader);
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, &Http2Callbacks::OnBeginFrame);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Http2Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks,
                                                            &Http2Callbacks::OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Http2Callbacks::OnStreamClose);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks,
                                                               &Http2Callbacks::OnInvalidFrame);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &Http2Callbacks::OnFrameSend);
  nghttp2_option* option = NewHttp2ServerOption(options.max_header_bytes);
  session_memory_.set_creating(true);
  int rv = nghttp2_session_server_new3(&session_, callbacks, this, option, session_memory_.mem());
  session_memory_.set_creating(false);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  started_ms_ = worker_->loop().now_ms();
  last_receive_ms_ = started_ms_;
  idle_since_ms_ = started_ms_;
  if (registered_) {
    worker_->loop().Modify(fd_, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this);
  } else {
    registered_ = true;
    worker_->loop().Add(fd_, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this);
  }
  if (rv != 0) {
    session_ = nullptr;
    Close("aborted");
    return;
  }
  uint32_t max_streams = options.h2_max_concurrent_streams;
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(options.max_header_bytes)},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  // The connection window holds every stream's window, so a stream whose
  // upstream is slow does not stall the others.
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<int32_t>(max_streams) * kStreamWindow);
  ScheduleTick();
  Drive();
}

void Http2Connection::BeginDrain() {
  if (draining_ || closed_ || session_ == nullptr) {
    return;
  }
  draining_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  Drive();
}

void Http2Connection::OnIo(uint32_t events) {
  if ((events & EPOLLOUT) != 0) {
    transport_->OnWritable();
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    readable_ = true;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    peer_closed_ = true;
  }
  // With the upstream events of the same batch: one write for all.
  DriveSoon();
}

Http2Connection::Stream* Http2Connection::FindStream(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second;
}

void Http2Connection::RemoveStream(int32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    return;
  }
  Stream* stream = it->second;
  streams_.erase(it);
  EndExchange(stream, "aborted-client");
  --live_streams_;
  worker_->metrics().http2_streams.Add(-1);
  if (stream->started) {
    retired_.push_back(stream);  // its exchange may be on the stack
  } else {
    // Never started: nothing but this map referred to it. Reusable now, so a
    // burst of reset streams read in one go does not pile up until the loop
    // turns (10 KB each).
    RecycleStream(stream);
  }
  if (streams_.empty()) {
    idle_since_ms_ = worker_->loop().now_ms();
  }
}

Http2Connection::Stream* Http2Connection::NewStream(int32_t id) {
  Stream* stream = PerThreadFreeList<Stream, kMaxFreeStreams>::Take(worker_).release();
  stream->Reset(this, id);
  return stream;
}

void Http2Connection::RecycleStream(Stream* stream) {
  stream->ReleaseMemory();
  PerThreadFreeList<Stream, kMaxFreeStreams>::Give(std::unique_ptr<Stream>(stream));
}

void Http2Connection::RecycleRetired() {
  for (Stream* stream : retired_) {
    RecycleStream(stream);
  }
  retired_.clear();
}

bool Http2Connection::SettleHeaderBlock() {
  // A block nghttp2 decoded to the end passed every field to OnHeader or
  // OnInvalidHeader: its work is bounded by the decoded-size cap there. One
  // it did not (a stream refused or closed, or reset mid-block as
  // malformed: the rest is decoded without a callback) pays all its wire
  // bytes but the padding length and priority fields. Neither the fields
  // decoded before a reset nor a PADDED flag (whatever the pad length)
  // excuse the references after it, and a complete block never pays for
  // Huffman coding longer than its text (an encoder that always uses it,
  // bytes 0x80-0xFF).
  const size_t ignored = block_complete_ || block_wire_ <= block_not_fields_
                             ? 0
                             : block_wire_ - block_not_fields_;
  block_wire_ = 0;
  block_decoded_ = 0;
  block_not_fields_ = 0;
  block_complete_ = false;
  if (ignored == 0) {
    return true;
  }
  const double capacity = static_cast<double>(worker_->options().max_header_bytes);
  const int64_t now = worker_->loop().now_ms();
  ignored_block_budget_ =
      std::min(capacity, ignored_block_budget_ + static_cast<double>(now - ignored_block_refilled_ms_) *
                                                     kIgnoredBlockBytesPerSecond / 1000.0);
  ignored_block_refilled_ms_ = now;
  ignored_block_budget_ -= static_cast<double>(ignored);
  return ignored_block_budget_ >= 0;
}

bool Http2Connection::CheckStreamId(int32_t id) {
  if (id <= 0 || id % 2 == 0) {
    return true;  // nghttp2's to refuse
  }
  if (id > last_client_stream_) {
    if (id > last_client_stream_ + 2) {
      // The newest 50 ranges (a client skipping ids is rare; one that
      // skips many only loses the check on the oldest: HEADERS on those is
      // then STREAM_CLOSED, through ended_streams_, or ignored).
      skipped_streams_.Add(last_client_stream_ + 2, id - 2);
      ended_streams_.Add(last_client_stream_ + 2, id - 2);
    }
    last_client_stream_ = id;
    return true;
  }
  // A lower id: trailers (or a late frame) of a stream opened before are
  // nghttp2's to judge, since the client may not have seen its end yet;
  // an id that was never opened is closed (RFC 9113 5.1.1).
  return !skipped_streams_.Contains(id);
}

void Http2Connection::CountError(Http2Error error) {
  worker_->metrics().http2_errors[static_cast<size_t>(error)]->Inc();
}

void Http2Connection::EndExchange(Stream* stream, std::string_view cause) {
  Exchange& exchange = stream->exchange;
  // A stream's (recycled) exchange is finished() until it starts.
  if (stream->started && exchange.finished()) {
    return;
  }
  if (exchange.forwarded()) {
    exchange.Cancel(cause);
    return;
  }
  if (!stream->malformed) {
    // A malformed one counts once, as protocol_error: the client's mistake,
    // not a stream given up before it could be forwarded.
    CountError(Http2Error::kResetBeforeForward);
  }
  ++unforwarded_streams_;
  exchange.Discard();
}

void Http2Connection::StartNow(Stream* stream) {
  if (stream->head_done && !stream->started) {
    StartStream(stream, stream->head_end_stream);
  }
}

void Http2Connection::StartPending() {
  // Streams closed meanwhile (RST_STREAM) are no longer in streams_.
  for (size_t i = 0; i < to_start_.size() && !closed_; ++i) {
    if (Stream* stream = FindStream(to_start_[i])) {
      StartNow(stream);
    }
  }
  to_start_.clear();
}

void Http2Connection::StartStream(Stream* stream, bool end_stream) {
  stream->started = true;
  stream->request_end = end_stream;
  if (stream->header_too_large || stream->too_many_fields) {
    CountError(Http2Error::kHeaderTooLarge);
    stream->exchange.Reject(ErrorCode::kHeadersTooLarge, "request header section too large");
    return;
  }
  // The pseudo-header fields become the request line and Host; nghttp2
  // checked their presence and form, and refused connection-specific fields.
  std::string_view method, path, authority, scheme;
  http::RequestHead& head = stream->head;
  head.header_count = 0;
  bool has_host = false;
  bool has_length = false;
  for (const auto& f : stream->fields) {
    std::string_view name(stream->arena.data() + f.name_at, f.name_len);
    std::string_view value(stream->arena.data() + f.value_at, f.value_len);
    if (!name.empty() && name[0] == ':') {
      if (name == ":method") {
        method = value;
      } else if (name == ":path") {
        path = value;
      } else if (name == ":authority") {
        authority = value;
      } else if (name == ":scheme") {
        scheme = value;
      }
      continue;
    }
    if (name == "host") {
      if (!authority.empty() || has_host) {
        continue;  // :authority wins (RFC 9113 8.3.1)
      }
      has_host = true;
    }
    has_length = has_length || name == "content-length";
    head.headers[head.header_count++] = {name, value};
  }
  if (!authority.empty()) {
    // Host first, from :authority; a later host field was dropped above, an
    // earlier one is replaced.
    for (size_t i = 0; i < head.header_count; ++i) {
      if (head.headers[i].name == "host") {
        head.headers[i] = head.headers[--head.header_count];
        break;
      }
    }
    head.headers[head.header_count++] = {"host", authority};
  }
  if (!stream->cookie.empty()) {
    head.headers[head.header_count++] = {"cookie", stream->cookie};
  }
  head.method = method;
  head.target = path;
  head.version_minor = 1;
  if (method == "CONNECT" || path.empty()) {
    stream->exchange.Reject(ErrorCode::kNotImplemented, "CONNECT is not supported");
    return;
  }
  if (path.size() > http::HeadLimits{}.max_target_bytes) {
    // The request-target limit of HTTP/1.1 (the :path becomes one).
    stream->exchange.Reject(ErrorCode::kTargetTooLong,
                            http::ParseErrorName(http::ParseError::kTargetTooLong));
    return;
  }
  // The :path becomes the request-target and goes through HTTP/1.1's
  // check, so what is routed is what is forwarded. HTTP/2 has origin form
  // only ("*" for OPTIONS; RFC 9113 8.3.1): an authority inside :path would
  // be a second one beside :authority, which alone names the virtual host.
  // The scheme is http or https (nghttp2 checks :path against those only).
  if (http::ParseRequestTarget(&head) != http::ParseError::kNone ||
      head.target_form == http::TargetForm::kAbsolute ||
      (!http::EqualsIgnoreCase(scheme, "http") && !http::EqualsIgnoreCase(scheme, "https"))) {
    stream->exchange.Reject(ErrorCode::kBadRequest,
                            http::ParseErrorName(http::ParseError::kBadTarget));
    return;
  }
  http::RequestInfo info;
  http::FramingResult framing =
      http::AnalyzeRequest(head, http::FramingLimits{worker_->options().max_body_bytes}, &info);
  if (!framing.ok()) {
    stream->exchange.Reject(ErrorCodeForStatus(framing.http_status),
                            http::ParseErrorName(framing.error));
    return;
  }
  info.upgrade_websocket = false;
  if (!end_stream && !has_length) {
    info.body = http::BodyKind::kChunked;  // length unknown: sent chunked
  } else if (end_stream) {
    info.body = http::BodyKind::kNone;
    info.content_length = 0;
  }
  stream->exchange.Start(&head, info);
  stream->pump = true;
}

void Http2Connection::PumpStreams() {
  for (auto& [id, stream] : streams_) {
    if (stream->pump) {
      stream->pump = false;
      stream->exchange.Pump();
    }
  }
}

ssize_t Http2Connection::Feed(const uint8_t* data, size_t size) {
  // nghttp2 reports neither the CONTINUATION frames of a header block it
  // ignores nor where a block ends, so the frame headers are followed here
  // and the bytes handed over in pieces that end where a HEADERS frame
  // begins: the block before it has then been decoded whole. Pieces end
  // where a DATA frame begins too (ended_streams_).
  const size_t cap = worker_->options().max_header_bytes + kMaxHeaderBlockSlack;
  size_t fed = 0;
  size_t at = 0;
  http::H2FrameScanner::Frame frame;
  while (frames_.Next(data, size, &at, &frame)) {
    if (frame.type == NGHTTP2_HEADERS || frame.type == NGHTTP2_DATA) {
      // What came before this frame header (in this read) first.
      if (frame.header_start > fed) {
        ssize_t rv = MemRecv(data + fed, frame.header_start - fed);
        if (rv < 0) {
          return rv;
        }
        fed = frame.header_start;
      }
    }
    if (frame.type == NGHTTP2_DATA) {
      // nghttp2 ignores DATA on a stream it does not know, without a
      // callback: on one the client had ended, it is answered here (HEADERS
      // is, in OnBeginFrame). The check comes after the frames before it,
      // whose END_STREAM or RST_STREAM may have closed the stream.
      if (ended_streams_.Contains(frame.stream_id) && !SessionEnded()) {
        return EndForClosedStream(true);
      }
      continue;
    }
    if (frame.type == NGHTTP2_HEADERS) {
      if (!SettleHeaderBlock()) {
        return EndForHeaderBlock();
      }
      block_wire_ = frame.length;
      // What a HEADERS payload holds besides the block and its padding: the
      // padding's length byte and the priority fields. (The padding is not
      // decoded, but its length is the client's to choose.)
      block_not_fields_ = static_cast<uint16_t>(((frame.flags & NGHTTP2_FLAG_PADDED) != 0 ? 1 : 0) +
                                                ((frame.flags & NGHTTP2_FLAG_PRIORITY) != 0 ? 5 : 0));
    } else if (frame.type == NGHTTP2_CONTINUATION) {
      block_wire_ += frame.length;
    } else {
      continue;
    }
    if (block_wire_ > cap) {
      // A header block that does not end: no more of it is decoded.
      return EndForHeaderBlock();
    }
  }
  if (size > fed) {
    ssize_t rv = MemRecv(data + fed, size - fed);
    if (rv < 0) {
      return rv;
    }
  }
  return static_cast<ssize_t>(size);
}

ssize_t Http2Connection::MemRecv(const uint8_t* data, size_t size) {
  invalid_frame_last_ = false;
  ssize_t rv = nghttp2_session_mem_recv(session_, data, size);
  // The last frame it reported was invalid and no frame began after it: a
  // stream error queued its RST_STREAM before the callback, a connection
  // error queues its GOAWAY after it (and nghttp2 ignores the rest). Only
  // nghttp2 ran since the callback, so a longer queue is that GOAWAY.
  if (invalid_frame_last_ &&
      nghttp2_session_get_outbound_queue_size(session_) > queued_at_invalid_frame_) {
    session_ended_ = true;
  }
  invalid_frame_last_ = false;
  return rv;
}

bool Http2Connection::SessionEnded() const {
  // GOAWAY sent: nghttp2 reads nothing more. Queued but not sent yet: a
  // connection error nghttp2 found, counted in its invalid-frame callback.
  return session_ended_ || nghttp2_session_want_read(session_) == 0;
}

ssize_t Http2Connection::EndForClosedStream(bool data) {
  CountError(Http2Error::kProtocol);
  fatal_ = true;
  // With the debug data nghttp2 sent while it kept the stream.
  const std::string_view reason = data ? "DATA: stream closed" : "HEADERS: stream closed";
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_STREAM_CLOSED, Bytes(reason), reason.size());
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

// Ends the connection for a header block beyond the limits: GOAWAY
// ENHANCE_YOUR_CALM, and nothing more of what was read is processed.
ssize_t Http2Connection::EndForHeaderBlock() {
  CountError(Http2Error::kHeaderTooLarge);
  CountError(Http2Error::kFlood);
  fatal_ = true;
  nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

bool Http2Connection::Receive() {
  bool progressed = false;
  if (!in_.empty()) {
    ssize_t rv = Feed(reinterpret_cast<const uint8_t*>(in_.view().data()), in_.size());
    in_.Clear();
    in_.Release();  // only ever holds what came before the session
    if (rv < 0) {
      fatal_ = true;
      return true;
    }
    StartPending();
    progressed = true;
  }
  // Reading stops while output is queued: a peer that floods us with frames
  // that want answers (PING, SETTINGS) and reads nothing is not served.
  for (int i = 0; i < 16 && readable_ && out_.size() < kHighWater &&
                  turn_read_bytes_ < kReadBytesPerTurn && nghttp2_session_want_read(session_) != 0;
       ++i) {
    char buffer[16 * 1024];
    bool drained = false;
    ssize_t n = transport_->Read(buffer, sizeof buffer, &drained);
    if (n > 0) {
      turn_read_bytes_ += static_cast<size_t>(n);
      last_receive_ms_ = worker_->loop().now_ms();
      ssize_t rv = Feed(reinterpret_cast<const uint8_t*>(buffer), static_cast<size_t>(n));
      if (rv < 0) {
        if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
          CountError(rv == NGHTTP2_ERR_FLOODED ? Http2Error::kFlood : Http2Error::kProtocol);
        }
        fatal_ = true;
        return true;
      }
      StartPending();
      progressed = true;
      if (drained && !peer_closed_) {
        readable_ = false;
      }
      continue;
    }
    if (n == net::Transport::kWouldBlock) {
      readable_ = false;
      break;
    }
    // EOF or error: the client is gone.
    fatal_ = true;
    peer_gone_ = true;
    return true;
  }
  return progressed;
}

bool Http2Connection::Send() {
  bool progressed = false;
  while (out_.size() < kHighWater) {
    const uint8_t* data = nullptr;
    ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      fatal_ = true;
      return true;
    }
    if (n == 0) {
      break;
    }
    session_memory_.NoteOutput();
    out_.Append(std::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(n)));
    progressed = true;
  }
  while (!out_.empty()) {
    std::string_view pending = out_.view();
    ssize_t n = transport_->Write(pending.data(), pending.size());
    if (n > 0) {
      out_.Consume(static_cast<size_t>(n));
      progressed = true;
      continue;
    }
    if (n == net::Transport::kWouldBlock) {
      break;
    }
    fatal_ = true;
    peer_gone_ = true;
    return true;
  }
  // All sent: the block goes back to the worker's free list (a pop there
  // when the next frames come), so an idle connection holds none.
  out_.Release();
  return progressed;
}

void Http2Connection::Drive() {
  if (closed_) {
    return;
  }
  if (in_drive_) {
    drive_again_ = true;
    return;
  }
  in_drive_ = true;
  turn_read_bytes_ = 0;
  // Called from the event loop (no exchange on the stack): the streams
  // that ended since the last Drive can be reused.
  RecycleRetired();
  for (int round = 0; round < 10'000 && !fatal_; ++round) {
    drive_again_ = false;
    bool progressed = Receive();
    if (fatal_) {
      break;
    }
    PumpStreams();
    progressed = Send() || progressed;
    if (fatal_) {
      break;
    }
    PumpStreams();
    if (!progressed && !drive_again_) {
      break;
    }
  }
  in_drive_ = false;
  // And those that ended in this one: their buffers go back now, not when
  // the client's next frames arrive.
  RecycleRetired();
  if (fatal_) {
    // Whatever nghttp2 queued last (a GOAWAY) is sent if the socket takes it.
    if (session_ != nullptr) {
      const uint8_t* data = nullptr;
      for (int i = 0; i < 4; ++i) {
        ssize_t n = nghttp2_session_mem_send(session_, &data);
        if (n <= 0) {
          break;
        }
        session_memory_.NoteOutput();
        out_.Append(std::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(n)));
      }
      if (!out_.empty()) {
        ssize_t n = transport_->Write(out_.view().data(), out_.size());
        if (n > 0) {
          out_.Consume(static_cast<size_t>(n));  // not lost: the close stays a FIN
        }
      }
    }
    Close("aborted-client");
    return;
  }
  if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0 &&
      out_.empty() && transport_->FlushQueued()) {
    Close("aborted");
    return;
  }
  if (readable_ && turn_read_bytes_ >= kReadBytesPerTurn) {
    // The rest is read next turn (the socket is edge-triggered: no event
    // would come for bytes already there).
    worker_->loop().DeferToNextTurn(&drive_soon_);
  }
}

void Http2Connection::DriveSoon() {
  if (closed_) {
    return;
  }
  if (in_drive_) {
    drive_again_ = true;
    return;
  }
  worker_->loop().Defer(&drive_soon_);
}

void Http2Connection::ScheduleTick() {
  const ProxyOptions& o = worker_->options();
  int64_t shortest = std::min({o.idle_timeout_ms, o.header_timeout_ms, o.h2_ping_timeout_ms});
  worker_->loop().Schedule(&tick_, std::clamp<int64_t>(shortest / 4, 20, 1000));
}

void Http2Connection::OnTick() {
  if (closed_) {
    return;
  }
  const ProxyOptions& o = worker_->options();
  int64_t now = worker_->loop().now_ms();
  ProxyMetrics& metrics = worker_->metrics();
  if (!got_preface_ && now - started_ms_ >= o.header_timeout_ms) {
    metrics.timeouts_client.Inc();
    Close("header-timeout");
    return;
  }
  if (streams_.empty()) {
    if (now - idle_since_ms_ >= o.idle_timeout_ms && !draining_) {
      // GOAWAY NO_ERROR, then the close once it is out.
      draining_ = true;
      nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
    }
  } else if (ping_sent_ms_ != 0) {
    if (now - ping_sent_ms_ >= o.h2_ping_timeout_ms) {
      metrics.timeouts_client.Inc();
      CountError(Http2Error::kPingTimeout);
      Close("ping-timeout");
      return;
    }
  } else if (now - last_receive_ms_ >= o.h2_ping_timeout_ms) {
    uint8_t payload[8] = {'k', 'w', 'd', 'p', 'i', 'n', 'g', '!'};
    nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, payload);
    ping_sent_ms_ = now;
  }
  // A stream whose header block did not end in time is reset.
  std::vector<int32_t> late;
  for (auto& [id, stream] : streams_) {
    if (!stream->started && !stream->head_done && now - stream->begun_ms >= o.header_timeout_ms) {
      late.push_back(id);
    }
  }
  // A response the client's flow-control window has blocked (a zero-window
  // stall) for --idle-timeout is reset, as an HTTP/1.1 response the client
  // stops reading ends with the connection: PINGs answered do not keep it.
  int32_t connection_window = nghttp2_session_get_remote_window_size(session_);
  for (auto& [id, stream] : streams_) {
    if (stream->responded && !stream->response_done &&
        now - stream->last_sent_ms >= o.idle_timeout_ms &&
        (connection_window <= 0 ||
         nghttp2_session_get_stream_remote_window_size(session_, id) <= 0)) {
      late.push_back(id);
      CountError(Http2Error::kStreamReset);
    }
  }
  for (int32_t id : late) {
    metrics.timeouts_client.Inc();
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  }
  ScheduleTick();
  Drive();
  ReleaseIdlePages(now);
}

void Http2Connection::ReleaseIdlePages(int64_t now_ms) {
  // Idle: no stream, nothing queued in nghttp2 or here, for a while (a
  // connection between the requests of a busy client keeps its pages).
  if (closed_ || draining_ || session_ == nullptr || !streams_.empty() || !out_.empty() ||
      now_ms - idle_since_ms_ < kReleasePagesAfterIdleMs ||
      nghttp2_session_want_write(session_) != 0 ||
      nghttp2_session_get_outbound_queue_size(session_) != 0) {
    return;
  }
  if (session_memory_.ReleaseIdlePages() == 0) {
    return;  // given back already since the last output
  }
  // And the stream map's buckets and the lists' storage (a few hundred
  // bytes), which the next stream takes again.
  if (retired_.empty() && to_start_.empty()) {
    decltype(streams_)().swap(streams_);
    decltype(retired_)().swap(retired_);
    decltype(to_start_)().swap(to_start_);
  }
  ended_streams_.ShrinkToFit();
  skipped_streams_.ShrinkToFit();
}

void Http2Connection::Close(std::string_view cause) {
  if (closed_) {
    return;
  }
  closed_ = true;
  for (auto& [id, stream] : streams_) {
    EndExchange(stream, cause);
    worker_->metrics().http2_streams.Add(-1);
    worker_->loop().DeleteLater(stream);
  }
  streams_.clear();
  for (Stream* stream : retired_) {
    worker_->loop().DeleteLater(stream);
  }
  retired_.clear();
  live_streams_ = 0;
  if (unforwarded_streams_ > 0) {
    LogUnforwarded(worker_->loop(), client_ip_, unforwarded_streams_, resets_received_, cause);
  }
  if (session_ != nullptr) {
    nghttp2_session_del(session_);
    session_ = nullptr;
  }
  worker_->metrics().http2_connections.Add(-1);
  worker_->loop().Cancel(&tick_);
  worker_->loop().CancelDeferred(&drive_soon_);
  // Frames not sent (ours, or queued ones the kernel has no room for) are
  // lost: the close is a reset then, without TLS close_notify.
  if (transport_->BeforeClose(out_.size())) {
    // The client may still be sending: after a GOAWAY for its error (frames
    // it sent before it saw it are in flight), or with bytes not read yet.
    // Closing with its bytes unread would reset the connection, and the
    // reset can take the GOAWAY with it: the close lingers.
    if (!peer_gone_ && (error_goaway_sent_ || readable_)) {
      worker_->LingerThenClose(this, *transport_, /*registered=*/true);
      worker_->loop().DeleteLater(this);
      return;
    }
    transport_->Shutdown();
  }
  worker_->loop().Remove(fd_);
  ::close(fd_);
  worker_->ConnectionClosed(this);
  worker_->loop().DeleteLater(this);
}

}  // namespace kwd::proxy
