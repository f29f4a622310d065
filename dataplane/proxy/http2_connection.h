#pragma once

// An HTTP/2 client connection (RFC 9113): ALPN h2 on --tls-listen, or the
// cleartext preface with --h2c on --listen. nghttp2's server session does
// the framing, HPACK and flow control; each stream's request goes through
// the same request core as an HTTP/1.1 request (exchange.h) to an HTTP/1.1
// upstream. Flow control is tied to the upstream: a stream's request body is
// acknowledged (WINDOW_UPDATE) only as the upstream takes it, and its
// response body is read from the upstream only as the client's window
// allows, so every buffer is bounded.

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dataplane/http/h2_frames.h"
#include "dataplane/http/h2_stream_ids.h"
#include "dataplane/net/event_loop.h"
#include "dataplane/net/transport.h"
#include "dataplane/proxy/buffer.h"
#include "dataplane/proxy/worker.h"

namespace kwd::proxy {

// The client connection preface (RFC 9113 3.4).
inline constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// nghttp2's allocator for the sessions of this thread: blocks up to 4 KiB
// (a stream, its queued frames, the copy of a response head's fields: about
// four a stream) come from per-thread free lists by size class, so a
// worker's streams stop calling malloc once warm; larger ones go to malloc.
// Each class keeps at most 128 KiB free. A block must be freed on the thread
// that took it or another (it then joins that thread's lists).
nghttp2_mem* Http2ThreadAllocator();

// nghttp2's allocator for one session: Http2ThreadAllocator's, except for
// the output frame buffer nghttp2 takes when the session is created and
// keeps for its life (16 KiB), which gets pages of its own that an idle
// connection gives back to the kernel. nghttp2 writes each frame into that
// buffer afresh, so once nothing is queued and every byte it returned was
// copied, what the buffer holds is never read again. Outlives the session.
class Http2SessionMemory {
 public:
  Http2SessionMemory();
  ~Http2SessionMemory();
  Http2SessionMemory(const Http2SessionMemory&) = delete;
  Http2SessionMemory& operator=(const Http2SessionMemory&) = delete;

  nghttp2_mem* mem() { return &mem_; }
  // True around nghttp2_session_*_new3: the frame buffer is the first block
  // of 16 KiB or more taken then.
  void set_creating(bool creating) { creating_ = creating; }
  // nghttp2 returned frames from the buffer (nghttp2_session_mem_send):
  // its pages are resident again.
  void NoteOutput() { released_ = false; }
  // Gives the frame buffer's pages back (MADV_DONTNEED) unless they were
  // since the last NoteOutput. Only when nghttp2 has nothing to send
  // (nghttp2_session_want_write() is 0) and its last frames were copied.
  // Returns the bytes given back.
  size_t ReleaseIdlePages();
  // The frame buffer's resident bytes (mincore), for tests.
  size_t FrameBufferResidentBytes() const;
  bool has_frame_buffer() const { return frame_ != nullptr; }

 private:
  struct Hooks;
  nghttp2_mem mem_;
  void* frame_ = nullptr;
  size_t frame_size_ = 0;   // asked for
  size_t frame_bytes_ = 0;  // mapped (whole pages)
  bool creating_ = false;
  bool released_ = false;
};

// The nghttp2 options of the proxy's server sessions (Http2Connection::Start;
// the caller deletes them). Among them, no closed stream is kept: nghttp2
// would keep up to 100 (224 bytes each) for the RFC 7540 priority tree for
// the connection's life; the connection remembers which ids the client
// ended itself (H2StreamIdSet).
nghttp2_option* NewHttp2ServerOption(size_t max_header_bytes);

enum class PrefaceMatch { kNo, kPartial, kYes };
// Whether the first bytes of a connection are the HTTP/2 preface: kPartial
// while they are a proper prefix of it.
PrefaceMatch MatchHttp2Preface(std::string_view received);

class Http2Connection final : public WorkerConnection {
 public:
  // Takes over an established transport; `received` are bytes already read
  // from it (the preface, for h2c). `registered`: its descriptor is in the
  // worker's epoll set already (this connection becomes its handler).
  Http2Connection(Worker* worker, std::unique_ptr<net::Transport> transport, std::string client_ip,
                  uint16_t client_port, std::string_view received, bool registered);
  ~Http2Connection() override;

  void Start() override;
  // GOAWAY with the last stream id; open streams finish, then the
  // connection closes.
  void BeginDrain() override;
  void OnIo(uint32_t events) override;

  size_t open_streams() const { return streams_.size(); }

  struct Stream;

 private:
  friend struct Stream;
  friend struct Http2Callbacks;

  void Drive();
  // Drive at the end of the event loop's current batch: the output of every
  // stream whose upstream answered in the batch goes out in one write.
  void DriveSoon();
  bool Receive();
  bool Send();
  void PumpStreams();
  void Close(std::string_view cause);
  void OnTick();
  // An idle connection gives back its frame buffer's pages and the
  // storage of its (empty) stream map and lists.
  void ReleaseIdlePages(int64_t now_ms);
  void ScheduleTick();
  void CountError(Http2Error error);
  // Whether a client HEADERS on stream `id` is allowed: false for an id
  // lower than one already used that was skipped, never opened (h2spec
  // 5.1.1/2; nghttp2 ignores such a HEADERS by design).
  // nghttp2_session_mem_recv over `data`, in pieces that end where a
  // HEADERS or DATA frame begins, following the frame headers for the wire
  // size of each header block (CONTINUATIONs included, also of a block
  // nghttp2 ignores) and for DATA on an ended stream. Its result, or
  // NGHTTP2_ERR_CALLBACK_FAILURE when a block is over the cap, the
  // ignored-block budget is spent or DATA came on an ended stream.
  ssize_t Feed(const uint8_t* data, size_t size);
  ssize_t EndForHeaderBlock();
  // Ends the header block received so far (a HEADERS frame begins): unless
  // nghttp2 received it whole, its wire bytes are taken from
  // ignored_block_budget_. False: the budget is spent.
  bool SettleHeaderBlock();
  bool CheckStreamId(int32_t id);
  // nghttp2_session_mem_recv, noting whether nghttp2 ended the session for
  // a connection error it found (session_ended_).
  ssize_t MemRecv(const uint8_t* data, size_t size);
  // Whether the session is ending already: its GOAWAY sent, or queued by
  // nghttp2 for a connection error it found (not sent yet: nghttp2 still
  // wants to read until it is).
  bool SessionEnded() const;
  // DATA (`data`) or HEADERS on a stream in ended_streams_: GOAWAY
  // STREAM_CLOSED, and nothing more of what was read is processed.
  ssize_t EndForClosedStream(bool data);
  // Ends a stream's exchange: logged with `cause` once its request reached
  // a server, else only counted (reset_before_forward) for the summary.
  void EndExchange(Stream* stream, std::string_view cause);
  Stream* FindStream(int32_t id);
  void RemoveStream(int32_t id);
  // Streams are reused: a removed one waits in retired_ until the next
  // Drive (its exchange may be on the stack), then in the worker thread's
  // free list (RecycleStream).
  Stream* NewStream(int32_t id);
  void RecycleStream(Stream* stream);
  void RecycleRetired();
  void StartStream(Stream* stream, bool end_stream);
  void StartNow(Stream* stream);  // if its head is complete and it waits
  void StartPending();            // after each read: the heads it completed

  Worker* worker_;
  std::unique_ptr<net::Transport> transport_;
  int fd_;
  uint16_t client_port_;  // 0: unknown
  // In MemRecv: nghttp2 ended the session; the last frame it reported was
  // invalid (no frame began after it), and its outbound queue's size then
  // (queued_at_invalid_frame_). Members are placed where the layout had
  // padding: the object stays within its size (IdleConnectionMemory).
  bool session_ended_ = false;
  bool invalid_frame_last_ = false;
  std::string client_ip_;
  // Declared before session_ (destroyed after it): the session's blocks.
  Http2SessionMemory session_memory_;
  nghttp2_session* session_ = nullptr;
  Buffer in_{0};  // bytes received before the session existed
  Buffer out_;
  bool registered_ = false;
  bool readable_ = true;
  bool peer_closed_ = false;
  bool closed_ = false;
  bool fatal_ = false;              // nghttp2 or a limit ended the session
  bool peer_gone_ = false;          // the client's end of stream, or a failed read or write
  bool error_goaway_sent_ = false;  // a GOAWAY with an error code went out
  bool draining_ = false;
  size_t turn_read_bytes_ = 0;  // read in the current Drive (kReadBytesPerTurn)
  std::unordered_map<int32_t, Stream*> streams_;
  std::vector<Stream*> retired_;
  std::vector<int32_t> to_start_;  // stream ids whose head the current read completed
  size_t live_streams_ = 0;        // streams whose exchange still holds resources
  int64_t started_ms_ = 0;
  int64_t last_receive_ms_ = 0;
  int64_t idle_since_ms_ = 0;
  int64_t ping_sent_ms_ = 0;  // 0: no PING outstanding
  // Decoded bytes (as SETTINGS_MAX_HEADER_LIST_SIZE counts them) and wire
  // bytes (HEADERS and CONTINUATION payloads) of the header block being
  // received, whatever its stream.
  size_t block_decoded_ = 0;
  size_t block_wire_ = 0;
  uint16_t block_not_fields_ = 0;  // pad length and priority bytes of its HEADERS frame
  bool block_complete_ = false;    // nghttp2 received it whole (OnFrameRecv)
  bool got_preface_ = false;
  bool in_drive_ = false;
  bool drive_again_ = false;
  http::H2FrameScanner frames_;  // where Feed is in the client's frames
  // Wire bytes of header blocks nghttp2 did not decode to the end with a
  // callback for every field (a stream it refused, closed or reset as
  // malformed mid-block: it still decodes the rest, each 1-byte reference
  // included, but calls no callback) may be spent from this bucket:
  // max_header_bytes, refilled at kIgnoredBlockBytesPerSecond. Beyond it
  // the connection ends.
  double ignored_block_budget_;  // full at the start
  int64_t ignored_block_refilled_ms_;
  // The highest stream id of the client's HEADERS, and the ids it skipped
  // below it (inclusive ranges of odd ids, the newest 50): closed without
  // being opened (RFC 9113 5.1.1), so HEADERS on one is a connection error.
  int32_t last_client_stream_ = -1;  // -1: none yet, the next new id is 1
  uint32_t queued_at_invalid_frame_ = 0;
  http::H2StreamIdSet skipped_streams_;
  // Streams nghttp2 closed after the client had ended them (END_STREAM; its
  // RST_STREAM after that too), and the ids it skipped: DATA or HEADERS on
  // one is a connection error STREAM_CLOSED (RFC 9113 5.1, 6.1), the answer
  // nghttp2 gives while it keeps a closed stream. A stream reset before the
  // client ended it is not in it: frames the client sent before it saw the
  // reset are ignored (RFC 9113 5.1), as on an id forgotten here.
  http::H2StreamIdSet ended_streams_;
  uint64_t resets_received_ = 0;
  uint64_t unforwarded_streams_ = 0;  // ended before reaching a server
  uint64_t streams_begun_ = 0;
  net::Timer tick_;
  net::Deferred drive_soon_;
};

}  // namespace kwd::proxy
