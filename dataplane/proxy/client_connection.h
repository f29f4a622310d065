#pragma once

// One HTTP/1.x client connection and the request it is carrying. Requests
// on a connection are handled one after the other (pipelined requests wait in
// the buffer and are answered in order). Bodies stream both ways through
// bounded buffers: when one side cannot take more, the other side is not read.

#include <cstdint>
#include <memory>
#include <string>

#include "dataplane/http/chunked.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"
#include "dataplane/net/event_loop.h"
#include "dataplane/net/transport.h"
#include "dataplane/proxy/buffer.h"
#include "dataplane/proxy/error_page.h"
#include "dataplane/proxy/exchange.h"

namespace kwd::proxy {

class Worker;

// The HTTP/1.1 codec and transport: parses requests (pipelined ones wait in
// the buffer), decodes their bodies, writes responses in HTTP/1.x framing,
// keep-alive, WebSocket tunnels, timeouts of the client side. Everything the
// request core does (routing, the upstream, error pages, logging) happens in
// its Exchange (exchange.h), taken from the worker thread's free list for a
// request and given back when the connection is idle, as for an HTTP/2
// stream.
class ClientConnection final : public net::IoHandler, public net::Deletable, public ExchangeSink {
 public:
  // `transport` is plain or TLS (its handshake runs in Drive); the
  // connection owns it and the descriptor under it.
  ClientConnection(Worker* worker, std::unique_ptr<net::Transport> transport,
                   std::string client_ip, uint16_t client_port);
  ~ClientConnection() override;
  // One a connection: from the thread's PerThreadBlocks (buffer.h).
  static void* operator new(size_t size);
  static void operator delete(void* block, size_t size);

  void Start();
  void OnIo(uint32_t events) override;
  net::BatchedRecv* ReadAhead() override;
  // Worker is draining: finish the current request, then close.
  void BeginDrain();
  bool idle() const { return phase_ == Phase::kHead && in_.empty() && !request_started_; }
  size_t slot = 0;  // index in the worker's connection list

 private:
  // kForward: the exchange carries a request (connecting included);
  // kTunnel: after a 101 to an upgrade the exchange passes bytes both ways.
  enum class Phase { kHead, kForward, kTunnel, kClosing };
  enum class TimerKind { kNone, kHandshake, kIdle, kHeader };

  // ExchangeSink: the exchange's response, written in HTTP/1.x.
  void OnResponseHead(const http::ResponseHead& head, const http::ResponseInfo& info,
                      std::span<const http::Header> added, bool end) override;
  void OnInterimHead(const http::ResponseHead& head) override;
  void OnLocalAnswer(const http::ResponseHead& head, std::string_view page_head,
                     std::string_view body, bool must_close) override;
  void OnResponseBody(std::string_view data) override;
  void OnResponseEnd(std::string_view trailers) override;
  size_t ResponseBacklog() const override { return out_.size(); }
  void OnRequestBodyConsumed(size_t /*bytes*/) override {}
  void OnRequestBodyWanted() override { PushRequestBody(); }
  void OnExchangeAborted() override;
  void OnExchangeProgress() override { Drive(); }

  void Drive();
  void DriveSteps();
  // The client socket is in epoll only once the connection has to wait for
  // it: a request read at once and answered while the client sends nothing
  // more (Connection: close) costs no epoll_ctl at all.
  bool NeedsClientEvents() const;
  // Part of a request came and the rest is awaited from the client.
  bool WaitsForRequestBytes() const;
  // Advances the transport's handshake; true once established.
  bool StepHandshake();
  bool StepHead();
  // Request body in, the exchange pumped, the response out (also the
  // tunnel's bytes).
  bool StepForward();
  void StartRequest(size_t head_bytes);
  // A request answered without forwarding (malformed, or its head too slow).
  void RejectRequest(ErrorCode code, std::string_view detail, const http::RequestHead* head);
  // Client bytes of the request body (decoded) or tunnel into the exchange,
  // as far as it has room.
  bool PushRequestBody();
  // The request head's bytes leave the buffer once the exchange no longer
  // needs them (it serialised the head, or answered).
  void ConsumeHead();
  // The exchange finished: the next request, or the close.
  void EndTransaction();
  // Idle between requests: gives back buffers, the exchange and the request
  // head.
  void ReleaseIdleMemory();
  Exchange& TakeExchange();
  // Gives a finished exchange back to the worker thread's free list.
  void GiveExchange();
  // Ends the connection. A transaction still in flight is logged and counted
  // as aborted, `cause` naming the side that ended it. `linger`: the client
  // may still be sending (ShouldLinger): once every byte for it is with the
  // kernel, the worker's LingeringClose (lingering_close.h) ends the stream
  // towards the client and drops what it still sends for a bounded time
  // before the close; closing with its bytes unread would reset the
  // connection, and the reset can take the answer with it.
  void Close(std::string_view cause = "aborted", bool linger = false);
  // Whether the client may still be sending into a connection being closed:
  // bytes of its request not read (an early 413, 400, 431 or 408, a body not
  // read to its end), bytes of a next request read but not answered, a read
  // edge not read to its end, or a keep-alive client's socket not watched
  // while the server answered. Never after its end of stream or for a
  // reset. Known without a syscall: a clean close costs nothing more.
  bool ShouldLinger() const;
  // The client speaks HTTP/2 (ALPN h2, or the h2c preface): an
  // Http2Connection takes the transport and what was read.
  void HandOverToHttp2();
  void ArmTimer(TimerKind kind, int64_t delay_ms);
  void OnTimer();
  bool FlushClient();

  Worker* worker_;
  std::unique_ptr<net::Transport> transport_;
  int fd_;
  std::string client_ip_;
  uint16_t client_port_;  // 0: unknown
  Phase phase_ = Phase::kHead;
  bool closed_ = false;
  bool registered_ = false;  // fd_ is in the worker's epoll set
  bool acks_at_once_ = false;    // net::AckAtOnce done (Drive)
  bool answered_ = false;        // a transaction ended (EndTransaction)
  bool abortive_close_ = false;  // the close resets: no orderly end of the stream
  bool client_eof_ = false;
  Readiness client_readable_{.readable = true};
  bool close_after_response_ = false;
  bool linger_ = false;  // the request's bytes were not all read: the close lingers
  bool draining_ = false;
  // --h2c on a plain connection whose first request has not begun: its first
  // bytes are checked for the HTTP/2 preface.
  bool h2c_sniff_ = false;

  Buffer in_;
  Buffer out_;

  // The request being handled.
  http::RequestParser request_parser_;
  // Taken when a request's bytes are parsed, given back when the connection
  // is idle (ReleaseIdleMemory): each is kMaxHeaders fields, 3 KiB.
  std::unique_ptr<http::RequestHead> request_head_;
  http::RequestInfo request_info_;
  size_t head_bytes_ = 0;         // the head's bytes at the front of in_
  bool request_started_ = false;  // bytes of a new request arrived
  int version_minor_ = 1;
  uint64_t request_remaining_ = 0;
  http::ChunkedDecoder request_chunked_;
  bool request_body_done_ = false;  // all of the body went to the exchange

  // The response towards the client.
  bool chunk_response_ = false;         // re-chunk towards the client
  bool client_takes_trailers_ = false;  // the request had `TE: trailers`

  // Held while a request is handled, from the worker's free list (null
  // while idle: TakeExchange, GiveExchange).
  std::unique_ptr<Exchange> exchange_;
  TimerKind timer_kind_ = TimerKind::kNone;
  // Bytes the kernel held for the client when the idle timer last found
  // some (-1: not looked at since the last progress): a queue shrinking
  // between two timeouts is a slow reader, not an idle one.
  int idle_unsent_ = -1;
  net::Timer timer_;
};

}  // namespace kwd::proxy
