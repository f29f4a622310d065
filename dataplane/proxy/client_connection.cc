#include "dataplane/proxy/client_connection.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "common/log.h"
#include "dataplane/http/forward.h"
#include "dataplane/net/socket.h"
#include "dataplane/proxy/http2_connection.h"
#include "dataplane/proxy/worker.h"

namespace kwd::proxy {

namespace {

// Pending bytes towards the client beyond which no more requests are read.
constexpr size_t kHighWater = 64 * 1024;
// Read buffers while streaming bodies.
constexpr size_t kBodyBufferBytes = 64 * 1024;

void AppendChunk(std::string_view data, Buffer& out) {
  char size_line[24];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
  out.Append(std::string_view(size_line, static_cast<size_t>(n)));
  out.Append(data);
  out.Append("\r\n");
}

constexpr std::string_view kLastChunk = "0\r\n\r\n";

// A response head is serialised straight into the output buffer: room for
// its upper bound, then the bytes written are committed (no string to copy
// it from).
void AppendResponseHead(Buffer& out, const http::ResponseHead& head,
                        const http::ForwardResponseOptions& options) {
  const size_t bound = http::ResponseHeadBound(head, options);
  size_t free_bytes = 0;
  char* p = out.PrepareWrite(bound, static_cast<size_t>(-1), &free_bytes);
  out.Commit(http::SerializeResponseHead(head, options, p, bound));
}

}  // namespace

ClientConnection::ClientConnection(Worker* worker, std::unique_ptr<net::Transport> transport,
                                   std::string client_ip, uint16_t client_port)
    : worker_(worker),
      transport_(std::move(transport)),
      fd_(transport_->fd()),
      client_ip_(std::move(client_ip)),
      client_port_(client_port),
      request_parser_(http::HeadLimits{worker->options().max_header_bytes, 8 * 1024}),
      request_chunked_(http::ChunkedLimits{.max_body_bytes = worker->options().max_body_bytes,
                                           .keep_trailers = true}),
      timer_(this, [](void* self) { static_cast<ClientConnection*>(self)->OnTimer(); }) {
  h2c_sniff_ = worker->options().h2c && transport_->established();
  // TLS listeners keep quick ACKs (net::AckWithTheAnswer is the HTTP one's).
  acks_at_once_ = !transport_->established();
  // Strings grow to what the first request needs and keep that capacity
  // (clear() frees nothing): no reservation for a connection that may carry
  // one small request only.
}

ClientConnection::~ClientConnection() {
  // The request head goes back to the worker's free list (a connection
  // closed after one request never went idle, where it is given back
  // otherwise; the exchange's destructor gives the response head back): a
  // new connection per request then takes it from there instead of malloc.
  PerThreadFreeList<http::RequestHead>::Give(std::move(request_head_));
  GiveExchange();  // a finished one: the next connection takes it
}

void ClientConnection::Start() {
  worker_->metrics().http1_connections.Add(1);
  if (transport_->established()) {
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
    // Plain: the request usually came with the connection. Read it now; the
    // socket joins epoll when the connection has to wait for it (Drive).
    Drive();
  } else {
    registered_ = true;
    worker_->loop().Add(fd_, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this);
    ArmTimer(TimerKind::kHandshake, worker_->options().handshake_timeout_ms);
  }
}

bool ClientConnection::WaitsForRequestBytes() const {
  // The first request not (all) there yet: the bytes before it (a PROXY
  // header) or part of it came; or the rest of a request's body.
  return (phase_ == Phase::kHead && (request_started_ || !answered_) && !client_eof_) ||
         (phase_ == Phase::kForward && !request_body_done_ && !client_eof_ && in_.empty());
}

bool ClientConnection::NeedsClientEvents() const {
  // Waiting for the server with the whole request sent and nothing to write:
  // the client is not read until the response is done (a FIN or reset it
  // sends meanwhile shows when the response is written, as before), and
  // registering later reports whatever readiness arrived in between.
  return !(phase_ == Phase::kForward && request_body_done_ && out_.empty() &&
           transport_->queued() == 0);
}

void ClientConnection::OnIo(uint32_t events) {
  client_readable_.Note(events);
  if ((events & EPOLLOUT) != 0) {
    transport_->OnWritable();
  }
  if (phase_ == Phase::kForward && exchange_->connecting()) {
    return;  // the client waits until the upstream answers the connect
  }
  if (phase_ == Phase::kTunnel && client_eof_ && (events & (EPOLLERR | EPOLLHUP)) != 0) {
    // A reset after the client's FIN: no one takes the server's answer.
    Close("aborted-client");
    return;
  }
  Drive();
}

net::BatchedRecv* ClientConnection::ReadAhead() {
  // Waiting for a request head, which OnIo reads at once (StepHead).
  if (closed_ || phase_ != Phase::kHead || out_.size() >= kHighWater || client_eof_ || draining_) {
    return nullptr;
  }
  return transport_->ReadAhead();
}

void ClientConnection::BeginDrain() {
  draining_ = true;
  if (idle()) {
    if (out_.empty() && transport_->queued() == 0) {
      Close();
    } else {
      Drive();  // the end of a response still goes first (kClosing)
    }
  }
}

void ClientConnection::Drive() {
  DriveSteps();
  if (!acks_at_once_ && !closed_ && WaitsForRequestBytes()) {
    // The listener starts connections in delayed-ACK mode (the ACK of a whole
    // request goes with its answer); part of a request came and the rest is
    // awaited: ACK now, or a client with Nagle on holds the rest back until
    // the delayed ACK (40 ms). Once per connection (a syscall).
    acks_at_once_ = true;
    net::AckAtOnce(fd_);
  }
  if (!closed_ && !registered_ && NeedsClientEvents()) {
    registered_ = true;
    // Adding reports the socket's current readiness: nothing that arrived
    // before is missed.
    worker_->loop().Add(fd_, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this);
  }
}

void ClientConnection::DriveSteps() {
  // Edge-triggered: keep going until neither side can make progress. Every
  // round that reports progress moved bytes or changed the phase, so the loop
  // ends when the sockets would block; the bound only guards against a bug.
  if (!transport_->established() && !StepHandshake()) {
    return;
  }
  for (int round = 0; round < 1'000'000 && !closed_; ++round) {
    bool progressed = false;
    switch (phase_) {
      case Phase::kHead:
        progressed = StepHead();
        break;
      case Phase::kForward:
        if (exchange_->connecting()) {
          return;
        }
        [[fallthrough]];
      case Phase::kTunnel:
        progressed = StepForward();
        break;
      case Phase::kClosing:
        // Closed (or lingering) once the kernel has every byte of the response.
        if (size_t pending = out_.size(); FlushClient()) {
          // Without a lingering close, the queued end of the response may go
          // with the close in the loop's batched submit (Close()).
          const bool linger = ShouldLinger();
          if (out_.empty() &&
              ((!linger && transport_->CanCloseBatched()) || transport_->FlushQueued())) {
            Close("aborted", linger);
          } else if (out_.size() != pending) {
            // A slow reader still taking its response is not idle.
            idle_unsent_ = -1;
            ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
          }
        }
        return;
    }
    if (!progressed) {
      return;
    }
  }
  if (!closed_) {
    Log(LogLevel::kError, "proxy", "connection made no final progress; closing it",
        {{"client", client_ip_}});
    Close();
  }
}

bool ClientConnection::StepHandshake() {
  switch (transport_->Handshake()) {
    case net::Transport::HandshakeStatus::kDone:
      if (const net::TlsInfo* tls = transport_->tls(); tls != nullptr && tls->alpn == "h2") {
        HandOverToHttp2();
        return false;
      }
      ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
      return true;
    case net::Transport::HandshakeStatus::kWantIo:
      return false;
    case net::Transport::HandshakeStatus::kFailed:
      break;
  }
  // Counted and logged (at debug: scanners make many) by the transport.
  Close("handshake-failed");
  return false;
}

// ---- reading the request head ----

bool ClientConnection::StepHead() {
  size_t pending = out_.size();
  if (!FlushClient()) {
    return false;
  }
  bool progressed = out_.size() != pending;
  if (progressed && timer_kind_ == TimerKind::kIdle) {
    // The end of a response a slow reader is still taking: not idle.
    idle_unsent_ = -1;
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
  }
  if (out_.size() >= kHighWater) {
    return progressed;  // answer what is queued before reading more requests
  }
  if (h2c_sniff_ && !in_.empty()) {
    PrefaceMatch preface = MatchHttp2Preface(in_.view());
    if (preface == PrefaceMatch::kYes) {
      HandOverToHttp2();
      return false;
    }
    h2c_sniff_ = preface == PrefaceMatch::kPartial;
  }
  if (!in_.empty() && !h2c_sniff_) {
    if (request_head_ == nullptr) {
      request_head_ = PerThreadFreeList<http::RequestHead>::Take();
    }
    http::ParseResult r = request_parser_.Parse(in_.view(), request_head_.get());
    if (r.complete()) {
      StartRequest(r.consumed);
      return true;
    }
    if (r.failed()) {
      RejectRequest(ErrorCodeForStatus(r.http_status), http::ParseErrorName(r.error), nullptr);
      return true;
    }
  }
  if ((draining_ && in_.empty()) || client_eof_) {
    if (!out_.empty() || transport_->queued() > 0) {
      phase_ = Phase::kClosing;  // a response its socket could not take yet goes first
      return true;
    }
    Close("aborted", ShouldLinger());  // draining: a request may be on its way
    return false;
  }
  ssize_t n =
      ReadInto(*transport_, &client_readable_, in_, worker_->options().max_header_bytes + 4096);
  if (n > 0) {
    if (!request_started_) {
      request_started_ = true;
      ArmTimer(TimerKind::kHeader, worker_->options().header_timeout_ms);
    }
    return true;
  }
  if (n == 0 || n == kReadError) {
    client_eof_ = true;
    return true;
  }
  if (n == kReadBufferFull) {
    RejectRequest(ErrorCode::kHeadersTooLarge, "request header section too large", nullptr);
    return true;
  }
  if (n == kReadWouldBlock && !request_started_) {
    ReleaseIdleMemory();
  }
  return progressed;
}

void ClientConnection::ReleaseIdleMemory() {
  // Waiting for the next request: hold no buffers (they come back from the
  // worker's free list when bytes arrive), and no string storage a large
  // request or response left behind.
  in_.Release();
  out_.Release();
  GiveExchange();
  PerThreadFreeList<http::RequestHead>::Give(std::move(request_head_));
}

// An idle connection holds no Exchange (1.5 KiB, with the storage its
// strings kept): one comes from the worker thread's free list when a request
// begins and goes back when the connection is idle again (or closes after
// its answer), so a keep-alive request costs a pop and a push, no malloc.
// As with the HTTP/2 streams (http2_connection.cc), a kept exchange serves
// the worker that made it: the thread's only one, which outlives the
// thread's free lists (Worker::Join).
using IdleExchanges = PerThreadFreeList<Exchange, 128>;

Exchange& ClientConnection::TakeExchange() {
  if (exchange_ == nullptr) {
    exchange_ = IdleExchanges::Take(worker_, this, ClientContext{});
    exchange_->set_sink(this);
  }
  return *exchange_;
}

void ClientConnection::GiveExchange() {
  if (exchange_ != nullptr && exchange_->reusable()) {
    exchange_->ReleaseIdleMemory();
    IdleExchanges::Give(std::move(exchange_));
  }
}

void ClientConnection::StartRequest(size_t head_bytes) {
  head_bytes_ = head_bytes;
  version_minor_ = request_head_->version_minor;
  const http::Header* te = request_head_->Find(http::FieldId::kTe);
  client_takes_trailers_ = te != nullptr && http::HasToken(te->value, "trailers");
  http::FramingLimits limits{worker_->options().max_body_bytes};
  http::FramingResult framing = http::AnalyzeRequest(*request_head_, limits, &request_info_);
  if (!framing.ok()) {
    RejectRequest(ErrorCodeForStatus(framing.http_status), http::ParseErrorName(framing.error),
                  request_head_.get());
    return;
  }
  request_remaining_ = request_info_.content_length;
  request_chunked_.Reset();
  request_body_done_ =
      request_info_.body == http::BodyKind::kNone ||
      (request_info_.body == http::BodyKind::kContentLength && request_info_.content_length == 0);
  TakeExchange().Recycle(ClientContext{client_ip_, transport_->tls(), {}, client_port_, fd_});
  phase_ = Phase::kForward;
  exchange_->Start(request_head_.get(), request_info_);
}

void ClientConnection::RejectRequest(ErrorCode code, std::string_view detail,
                                     const http::RequestHead* head) {
  TakeExchange().Recycle(ClientContext{client_ip_, transport_->tls(), {}, client_port_, fd_});
  phase_ = Phase::kForward;
  request_body_done_ = true;
  linger_ = true;  // the rest of what the client sends is not read
  exchange_->Reject(code, detail, head);
}

// ---- the request through the exchange ----

bool ClientConnection::StepForward() {
  // Pump moves what it can until it is stuck: only what the connection did
  // (client bytes in or out), or room the exchange made for more request
  // body, is worth another round.
  bool progressed = false;
  if (!exchange_->finished()) {
    progressed = PushRequestBody();
    if (closed_ || exchange_->finished()) {
      return true;
    }
    bool pumped = exchange_->Pump();
    if (closed_) {
      return true;
    }
    progressed = progressed || (pumped && !request_body_done_);
  }
  size_t pending = out_.size();
  if (!FlushClient()) {
    return false;
  }
  bool flushed = out_.size() != pending;
  if (exchange_->finished()) {
    if (phase_ != Phase::kClosing) {
      EndTransaction();
    }
    return true;
  }
  if (phase_ == Phase::kTunnel) {
    if (progressed || flushed) {
      ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
    }
  } else if (flushed && !progressed) {
    exchange_->NoteClientProgress();  // a slow reader is no stalled server
  }
  return progressed || flushed;
}

void ClientConnection::ConsumeHead() {
  if (head_bytes_ > 0) {
    in_.Consume(head_bytes_);
    head_bytes_ = 0;
  }
}

bool ClientConnection::PushRequestBody() {
  bool progressed = false;
  while (!request_body_done_) {
    size_t room = exchange_->RequestBodyRoom();
    if (room == 0) {
      break;
    }
    ConsumeHead();  // the exchange sent the head on
    if (in_.empty()) {
      if (client_eof_) {
        if (phase_ == Phase::kTunnel) {
          request_body_done_ = true;  // the client ended the tunnel
          exchange_->EndRequestBody();
          return true;
        }
        // The client went away in the middle of its body.
        Close("aborted-client");
        return true;
      }
      ssize_t n = ReadInto(*transport_, &client_readable_, in_, kBodyBufferBytes);
      if (n > 0) {
        progressed = true;
        continue;
      }
      if (n == kReadError && phase_ == Phase::kTunnel) {
        // A reset, not a half-close: the client is gone.
        Close("aborted-client");
        return true;
      }
      if (n == 0 || n == kReadError) {
        client_eof_ = true;
        continue;
      }
      break;
    }
    if (phase_ == Phase::kTunnel || request_info_.body == http::BodyKind::kContentLength) {
      uint64_t limit =
          phase_ == Phase::kTunnel ? room : std::min<uint64_t>(room, request_remaining_);
      size_t take = static_cast<size_t>(std::min<uint64_t>(in_.size(), limit));
      exchange_->PushRequestBody(in_.view().substr(0, take));
      in_.Consume(take);
      progressed = true;
      if (phase_ != Phase::kTunnel) {
        request_remaining_ -= take;
        if (request_remaining_ == 0) {
          request_body_done_ = true;
          exchange_->EndRequestBody();
        }
      }
      continue;
    }
    http::ChunkedResult r = request_chunked_.Decode(in_.view());
    switch (r.status) {
      case http::ChunkedStatus::kData:
        exchange_->PushRequestBody(r.data);
        break;
      case http::ChunkedStatus::kNeedMore:
        break;
      case http::ChunkedStatus::kDone:
        request_body_done_ = true;
        if (!request_chunked_.trailers().empty()) {
          // On to the server in the last chunk, but no field that must not
          // be a trailer (RFC 9110 6.5.1).
          std::string lines;
          http::ForEachPassableTrailer(request_chunked_.trailers(),
                                       [&](std::string_view name, std::string_view value) {
                                         lines.append(name).append(": ").append(value).append(
                                             "\r\n");
                                       });
          exchange_->SetRequestTrailers(lines);
        }
        exchange_->EndRequestBody();
        break;
      case http::ChunkedStatus::kError:
        exchange_->FailRequestBody(ErrorCodeForStatus(r.http_status), http::ParseErrorName(r.error));
        return true;
    }
    in_.Consume(r.consumed);
    progressed = true;
  }
  return progressed;
}

void ClientConnection::EndTransaction() {
  ConsumeHead();
  idle_unsent_ = -1;
  answered_ = true;
  request_parser_.Reset();
  chunk_response_ = false;
  if (close_after_response_) {
    close_after_response_ = false;
    // A body not read to its end: the client may still be sending it.
    linger_ = linger_ || !request_body_done_;
    phase_ = Phase::kClosing;
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
    return;
  }
  phase_ = Phase::kHead;
  request_started_ = !in_.empty();
  if (request_started_) {
    ArmTimer(TimerKind::kHeader, worker_->options().header_timeout_ms);
  } else {
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
  }
}

// ---- the response in HTTP/1.x (ExchangeSink) ----

void ClientConnection::OnInterimHead(const http::ResponseHead& head) {
  // 100 Continue and other 1xx: passed on, the final response follows. An
  // HTTP/1.0 client does not know them (RFC 9110 15.2): dropped.
  if (version_minor_ >= 1) {
    http::ForwardResponseOptions options;
    AppendResponseHead(out_, head, options);
  }
}

void ClientConnection::OnResponseHead(const http::ResponseHead& head,
                                      const http::ResponseInfo& info,
                                      std::span<const http::Header> added, bool /*end*/) {
  http::ForwardResponseOptions options;
  switch (info.body) {
    case http::BodyKind::kChunked:
      if (version_minor_ >= 1) {
        // Re-chunked: the server's Transfer-Encoding fields (chunked last,
        // "gzip, chunked" keeps its gzip) stay as they are.
        chunk_response_ = true;
      } else {
        close_after_response_ = true;  // de-chunked, delimited by the close
      }
      break;
    case http::BodyKind::kUntilClose:
      close_after_response_ = true;
      break;
    case http::BodyKind::kTunnel:
      options.tunnel_upgrade = true;
      break;
    default:
      break;
  }
  if (!request_body_done_ || !request_info_.keep_alive || draining_) {
    close_after_response_ = true;
  }
  if (info.body != http::BodyKind::kTunnel) {
    if (close_after_response_) {
      options.connection = "close";
    } else if (version_minor_ == 0) {
      options.connection = "keep-alive";
    }
  }
  if (version_minor_ == 0) {
    options.reframe_body = true;  // HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1)
  }
  options.extra_headers = added;
  AppendResponseHead(out_, head, options);
  if (info.body == http::BodyKind::kTunnel) {
    // Either side ending the tunnel ends the connection.
    ConsumeHead();
    phase_ = Phase::kTunnel;
    request_body_done_ = false;
    close_after_response_ = true;
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
  }
}

void ClientConnection::OnLocalAnswer(const http::ResponseHead& /*head*/, std::string_view page_head,
                                     std::string_view body, bool must_close) {
  // A request whose body was not read cannot be followed by the next one;
  // draining, the connection ends after this answer too.
  bool close = must_close || request_info_.body != http::BodyKind::kNone ||
               !request_info_.keep_alive || draining_;
  if (close) {
    out_.Append(page_head.substr(0, page_head.size() - 2));  // before the empty line
    out_.Append("Connection: close\r\n\r\n");
  } else {
    out_.Append(page_head);
  }
  out_.Append(body);
  close_after_response_ = close;
}

void ClientConnection::OnResponseBody(std::string_view data) {
  if (chunk_response_) {
    AppendChunk(data, out_);
  } else {
    out_.Append(data);
  }
}

void ClientConnection::OnResponseEnd(std::string_view trailers) {
  if (!chunk_response_) {
    return;
  }
  if (client_takes_trailers_ && !trailers.empty()) {
    // The client said `TE: trailers`: the passable ones go on (without it
    // they are dropped, RFC 9112 7.1.2).
    out_.Append("0\r\n");
    http::ForEachPassableTrailer(trailers, [&](std::string_view name, std::string_view value) {
      out_.Append(name);
      out_.Append(": ");
      out_.Append(value);
      out_.Append("\r\n");
    });
    out_.Append("\r\n");
  } else {
    out_.Append(kLastChunk);
  }
}

void ClientConnection::OnExchangeAborted() {
  // The head went out: what was sent is delivered, then the connection is
  // reset so that no client can take the cut-short response as complete
  // (no TLS close_notify either: it would say "complete").
  net::ResetOnClose(fd_);
  abortive_close_ = true;
  phase_ = Phase::kClosing;
  ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
}

// ---- timers ----

void ClientConnection::ArmTimer(TimerKind kind, int64_t delay_ms) {
  timer_kind_ = kind;
  worker_->loop().Schedule(&timer_, delay_ms);
}

void ClientConnection::OnTimer() {
  if (closed_) {
    return;
  }
  switch (timer_kind_) {
    case TimerKind::kNone:
      return;
    case TimerKind::kHandshake:
      worker_->metrics().tls_handshake_timeouts.Inc();
      Close("handshake-timeout");
      return;
    case TimerKind::kIdle:
      if (phase_ == Phase::kTunnel) {
        worker_->metrics().timeouts_client.Inc();
      } else if (int unsent = 0; ::ioctl(fd_, SIOCOUTQ, &unsent) == 0 && unsent > 0 &&
                                 (idle_unsent_ < 0 || unsent < idle_unsent_)) {
        // The kernel is still delivering a response to a slow reader: it
        // raises a write event only once a good part of its queue drained,
        // which can take longer than the timeout. Progress since the last
        // look is no idleness.
        idle_unsent_ = unsent;
        ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
        return;
      }
      if (!out_.empty()) {
        // A response the client stopped taking: cut short, and the reset
        // says so (a FIN would end a close-delimited body as complete).
        net::ResetOnClose(fd_);
        abortive_close_ = true;
      }
      Close("idle-timeout");  // ends a tunnel; no transaction is in flight otherwise
      return;
    case TimerKind::kHeader:
      if (phase_ != Phase::kHead) {
        return;  // the head came; the exchange times the rest
      }
      worker_->metrics().timeouts_client.Inc();
      RejectRequest(ErrorCode::kRequestTimeout, "the request head did not arrive in time", nullptr);
      break;
  }
  Drive();
}

// ---- socket I/O ----

bool ClientConnection::FlushClient() {
  while (!out_.empty()) {
    std::string_view pending = out_.view();
    ssize_t n = transport_->Write(pending.data(), pending.size());
    if (n > 0) {
      out_.Consume(static_cast<size_t>(n));
      continue;
    }
    if (n == net::Transport::kWouldBlock) {
      return true;
    }
    Close("aborted-client");  // the client is gone
    return false;
  }
  return true;
}

bool ClientConnection::ShouldLinger() const {
  // Not in epoll while the server answered (NeedsClientEvents): bytes that
  // came meanwhile raised no event. A client that asked to keep the
  // connection may have sent its next request then; one that said
  // `Connection: close` sends nothing more (the close shape stays as cheap).
  const bool unseen = !registered_ && request_info_.keep_alive;
  return !abortive_close_ && !client_eof_ &&
         (linger_ || !in_.empty() || client_readable_.readable || unseen);
}

void ClientConnection::Close(std::string_view cause, bool linger) {
  if (closed_) {
    return;
  }
  closed_ = true;
  worker_->metrics().http1_connections.Add(-1);
  if (exchange_ != nullptr) {
    exchange_->Cancel(cause);  // logged as aborted if still in flight
  }
  worker_->loop().Cancel(&timer_);
  // No EPOLL_CTL_DEL: close(2) takes the descriptor out of the epoll set (it
  // is never duplicated), and events of this batch go to the graveyard object.
  if (!abortive_close_ && !linger && out_.empty() && transport_->CanCloseBatched()) {
    // The end of the response and the close go in the loop's batched submit
    // (io_uring): no send(2) and close(2) of their own.
    transport_->CloseBatched();
    worker_->ConnectionClosed(this);
    worker_->loop().DeleteLater(this);
    return;
  }
  // Queued bytes go before the end of the stream. Bytes lost (queued ones
  // the kernel has no room for, or our own) make it a reset: the response
  // was cut short (a FIN would end a close-delimited body as complete).
  if (!transport_->BeforeClose(out_.size())) {
    abortive_close_ = true;
  }
  if (linger && !abortive_close_) {
    // The descriptor goes to a LingeringClose, which stays counted.
    worker_->LingerThenClose(this, *transport_, registered_);
    worker_->loop().DeleteLater(this);
    return;
  }
  if (!abortive_close_) {
    transport_->Shutdown();
  }
  ::close(fd_);
  worker_->ConnectionClosed(this);
  worker_->loop().DeleteLater(this);
}

void* ClientConnection::operator new(size_t size) {
  return size == sizeof(ClientConnection) ? PerThreadBlocks<sizeof(ClientConnection)>::Take()
                                          : ::operator new(size);
}

void ClientConnection::operator delete(void* block, size_t size) {
  if (size == sizeof(ClientConnection)) {
    PerThreadBlocks<sizeof(ClientConnection)>::Give(block);
  } else {
    ::operator delete(block);
  }
}

void ClientConnection::HandOverToHttp2() {
  closed_ = true;
  worker_->metrics().http1_connections.Add(-1);
  worker_->loop().Cancel(&timer_);
  worker_->HandOverToHttp2(this, std::move(transport_), std::move(client_ip_), client_port_,
                           in_.view(), registered_);
  worker_->loop().DeleteLater(this);
}

}  // namespace kwd::proxy
