#include "dataplane/proxy/client_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "dataplane/http/forward.h"
#include "dataplane/net/socket.h"
#include "dataplane/proxy/exchange.h"
#include "dataplane/proxy/http2_connection.h"
#include "dataplane/proxy/request_id.h"
#include "dataplane/proxy/worker.h"
#include "dataplane/tls/tls_transport.h"
#include "dataplane/tls/upstream_tls.h"

namespace kwd::proxy {

namespace {

// Pending bytes towards one side beyond which the other side is not read.
constexpr size_t kHighWater = 64 * 1024;
// Read buffers while streaming bodies.
constexpr size_t kBodyBufferBytes = 64 * 1024;

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
constexpr ssize_t kWouldBlock = -1;
constexpr ssize_t kIoError = -2;
constexpr ssize_t kBufferFull = -3;

void AppendChunk(std::string_view data, std::string& out) {
  char size_line[24];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
  out.append(size_line, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
}

void AppendChunk(std::string_view data, Buffer& out) {
  char size_line[24];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
  out.Append(std::string_view(size_line, static_cast<size_t>(n)));
  out.Append(data);
  out.Append("\r\n");
}

constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Makes the coming close of `fd` a reset rather than a FIN: a response cut
// short after its head (above all a close-delimited body towards an HTTP/1.0
// client) must not look complete to the client.
void ResetOnClose(int fd) {
  linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

}  // namespace

ClientConnection::ClientConnection(Worker* worker, std::unique_ptr<net::Transport> transport,
                                   std::string client_ip)
    : worker_(worker),
      transport_(std::move(transport)),
      fd_(transport_->fd()),
      client_ip_(std::move(client_ip)),
      request_parser_(http::HeadLimits{worker->options().max_header_bytes, 8 * 1024}),
      request_chunked_(http::ChunkedLimits{worker->options().max_body_bytes}),
      upstream_in_(16 * 1024),
      response_parser_(http::HeadLimits{worker->options().max_header_bytes, 8 * 1024}),
      response_chunked_(http::ChunkedLimits{.max_body_bytes = ~0ull, .keep_trailers = true}),
      timer_(this, [](void* self) { static_cast<ClientConnection*>(self)->OnTimer(); }) {
  h2c_sniff_ = worker->options().h2c && transport_->established();
  // Strings grow to what the first request needs and keep that capacity
  // (clear() frees nothing): no reservation for a connection that may carry
  // one small request only.
}

ClientConnection::~ClientConnection() {
  // The heads go back to the worker's free lists (a connection closed after
  // one request never went idle, where they are given back otherwise): a new
  // connection per request then takes them from there instead of from malloc.
  PerThreadFreeList<http::RequestHead>::Give(std::move(request_head_));
  PerThreadFreeList<http::ResponseHead>::Give(std::move(response_head_));
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

bool ClientConnection::NeedsClientEvents() const {
  // Waiting for the server with the whole request sent and nothing to write:
  // the client is not read until the response is done (a FIN or reset it
  // sends meanwhile shows when the response is written, as before), and
  // registering later reports whatever readiness arrived in between.
  bool waiting_for_server =
      phase_ == Phase::kConnecting || phase_ == Phase::kReconnecting || phase_ == Phase::kForward;
  return !(waiting_for_server && request_done_ && out_.empty());
}

void ClientConnection::OnIo(uint32_t events) {
  client_readable_.Note(events);
  if (phase_ == Phase::kConnecting || phase_ == Phase::kReconnecting) {
    return;  // the client waits until the upstream answers the connect
  }
  Drive();
}

void ClientConnection::OnUpstreamIo(uint32_t events) {
  upstream_readable_.Note(events);
  if (phase_ == Phase::kReconnecting) {
    int err = upstream_->connecting ? net::SocketError(upstream_->fd) : 0;
    if (err != 0 || (upstream_->connecting && (events & EPOLLERR) != 0)) {
      AbortTransaction(ErrorCode::kBadGateway, "the selected server is not reachable");
    } else if (upstream_->connecting && (events & EPOLLOUT) == 0) {
      return;
    } else {
      upstream_->connecting = false;
      if (StepUpstreamHandshake()) {
        phase_ = Phase::kForward;
        ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
      } else if (upstream_ != nullptr) {
        return;  // the handshake goes on
      }
      // Else it failed and the 502 is queued: Drive sends it.
    }
  } else if (phase_ == Phase::kConnecting) {
    int err = upstream_->connecting ? net::SocketError(upstream_->fd) : 0;
    if (err != 0 || (upstream_->connecting && (events & EPOLLERR) != 0)) {
      OnConnectFailed(err != 0 ? err : ECONNREFUSED);
    } else if (upstream_->connecting && (events & EPOLLOUT) == 0) {
      return;
    } else {
      // TCP is up; a re-encrypting group's handshake follows before the
      // request goes out.
      upstream_->connecting = false;
      if (StepUpstreamHandshake()) {
        OnConnected();
      } else if (upstream_ != nullptr) {
        return;  // the handshake goes on
      }
      // Else it failed and the 502 is queued: Drive sends it.
    }
  }
  Drive();
}

void ClientConnection::BeginDrain() {
  draining_ = true;
  if (idle()) {
    Close();
  }
}

void ClientConnection::Drive() {
  DriveSteps();
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
      case Phase::kConnecting:
      case Phase::kReconnecting:
        return;
      case Phase::kForward:
        progressed = StepForward();
        break;
      case Phase::kTunnel:
        progressed = StepTunnel();
        break;
      case Phase::kClosing:
        if (FlushClient() && out_.empty()) {
          Close();
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
      request_https_ = transport_->tls() != nullptr;
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
      worker_->metrics().bad_requests.Inc();
      method_.clear();
      target_.clear();
      AnswerLocally(ErrorCodeForStatus(r.http_status), http::ParseErrorName(r.error), true);
      return true;
    }
  }
  if ((draining_ && in_.empty()) || client_eof_) {
    if (!out_.empty()) {
      phase_ = Phase::kClosing;  // a response its socket could not take yet goes first
      return true;
    }
    Close();
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
  if (n == 0 || n == kIoError) {
    client_eof_ = true;
    return true;
  }
  if (n == kBufferFull) {
    worker_->metrics().bad_requests.Inc();
    AnswerLocally(ErrorCode::kHeadersTooLarge, "request header section too large", true);
    return true;
  }
  if (n == kWouldBlock && !request_started_) {
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
  upstream_in_.Release();
  PerThreadFreeList<http::RequestHead>::Give(std::move(request_head_));
  PerThreadFreeList<http::ResponseHead>::Give(std::move(response_head_));
  constexpr size_t kKeepStringBytes = 4096;
  for (std::string* s : {&upstream_out_, &sent_head_, &head_out_, &scratch_}) {
    if (s->capacity() > kKeepStringBytes) {
      std::string().swap(*s);
    }
  }
}

void ClientConnection::StartRequest(size_t head_bytes) {
  head_bytes_ = head_bytes;
  request_start_us_ = MonotonicUs();
  method_.assign(request_head_->method);
  target_.assign(request_head_->target);
  const http::Header* request_id = request_head_->Find("x-request-id");
  peer_trusted_ = worker_->options().trusted_proxies.Contains(client_ip_);
  if (request_id != nullptr && peer_trusted_ && ValidRequestId(request_id->value)) {
    request_id_.assign(request_id->value);
  } else {
    GenerateRequestId(&request_id_);
  }
  const http::Header* traceparent = request_head_->Find("traceparent");
  trace_id_.assign(traceparent != nullptr ? TraceIdFromTraceparent(traceparent->value) : "");
  version_minor_ = request_head_->version_minor;
  const http::Header* te = request_head_->Find("te");
  client_takes_trailers_ = te != nullptr && http::HasToken(te->value, "trailers");
  const http::Header* accept = request_head_->Find("accept");
  wants_json_ = accept != nullptr && accept->value.find("application/json") != std::string::npos;

  http::FramingLimits limits{worker_->options().max_body_bytes};
  http::FramingResult framing = http::AnalyzeRequest(*request_head_, limits, &request_info_);
  if (!framing.ok()) {
    worker_->metrics().bad_requests.Inc();
    AnswerLocally(ErrorCodeForStatus(framing.http_status), http::ParseErrorName(framing.error),
                  true);
    return;
  }
  size_t cookie_count = 0;
  for (const auto& field : request_head_->fields()) {
    if (cookie_count < cookies_.size() && http::EqualsIgnoreCase(field.name, "cookie")) {
      cookies_[cookie_count++] = field.value;
    }
  }
  request_https_ = transport_->tls() != nullptr;
  routing::Request request;
  request.method = request_head_->method;
  request.target = request_head_->target;
  request.host = request_info_.host;
  // Trusted peers (--trusted-proxies) may say who the client is and that it
  // used https; others' X-Forwarded-* are replaced.
  const http::ForwardedClient forwarded =
      http::ResolveForwarded(*request_head_, client_ip_, worker_->options().trusted_proxies);
  request_client_ip_.assign(forwarded.client_ip);
  request_https_ = request_https_ || forwarded.https;
  request.https = request_https_;
  request.cookie_headers = std::span<const std::string_view>(cookies_.data(), cookie_count);
  decision_ = worker_->router().Route(request);
  rewrite_target_ = routing::UpstreamTarget(decision_, request.target, &upstream_target_);
  decided_ = true;
  retried_ = false;

  if (decision_.server == nullptr) {
    bool has_body = request_info_.body != http::BodyKind::kNone;
    bool close = has_body || !request_info_.keep_alive;
    if (decision_.status == 403) {
      AnswerLocally(ErrorCode::kDenied, "access to this URL is not permitted", close);
    } else if (decision_.status == 400) {
      worker_->metrics().bad_requests.Inc();
      AnswerLocally(ErrorCode::kBadRequest, "malformed request target", true);
    } else {
      AnswerLocally(ErrorCode::kNoServer,
                    decision_.group == nullptr ? "no logon group serves this URL"
                                               : "no server of the logon group is available",
                    close);
    }
    return;
  }
  CountRouted(*worker_, decision_);
  request_remaining_ = request_info_.content_length;
  request_chunked_.Reset();
  request_done_ =
      request_info_.body == http::BodyKind::kNone ||
      (request_info_.body == http::BodyKind::kContentLength && request_info_.content_length == 0);
  ConnectUpstream();
}

// ---- the upstream connection ----

void ClientConnection::ConnectUpstream() {
  const routing::ServerEntry* server = decision_.server;
  if (upstream_start_us_ == 0) {
    upstream_start_us_ = MonotonicUs();
  }
  upstream_readable_ = {};
  std::string_view tls_key;
  if (decision_.group != nullptr && decision_.group->reencrypt) {
    // Never in clear: a group whose TLS cannot be set up gets 502.
    const auto& tls = decision_.group->tls;
    if (tls == nullptr || !tls->error().empty()) {
      OnUpstreamTlsFailed("config", tls == nullptr ? "the proxy has no TLS settings for the group"
                                                   : std::string_view(tls->error()));
      return;
    }
    tls_key = tls->key();
  }
  upstream_ = worker_->TakeIdle(server->address, server->port, tls_key);
  if (upstream_ != nullptr) {
    upstream_->owner = this;
    upstream_reused_ = true;
    worker_->metrics().upstream_reused.Inc();
    OnConnected();
    return;
  }
  upstream_reused_ = false;
  net::Endpoint endpoint;
  if (!net::MakeEndpoint(server->address, static_cast<uint16_t>(server->port), &endpoint)) {
    OnConnectFailed(EINVAL);
    return;
  }
  int err = 0;
  int fd = net::ConnectNonBlocking(endpoint, &err);
  if (fd < 0) {
    OnConnectFailed(err);
    return;
  }
  worker_->metrics().upstream_connects.Inc();
  upstream_ = new UpstreamConnection(worker_, fd, server->address, server->port);
  upstream_->owner = this;
  if (!tls_key.empty() && !StartUpstreamTls()) {
    return;
  }
  phase_ = Phase::kConnecting;
  worker_->loop().Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, upstream_);
  ArmTimer(TimerKind::kConnect, worker_->options().connect_timeout_ms);
}

bool ClientConnection::StartUpstreamTls() {
  std::string detail;
  if (!proxy::StartUpstreamTls(decision_, upstream_, &detail)) {
    OnUpstreamTlsFailed("config", detail);
    return false;
  }
  return true;
}

bool ClientConnection::StepUpstreamHandshake() {
  std::string_view reason;
  std::string detail;
  switch (StepUpstreamTls(*worker_, upstream_, &reason, &detail)) {
    case UpstreamHandshake::kDone:
      return true;
    case UpstreamHandshake::kWantIo:
      return false;
    case UpstreamHandshake::kFailed:
      break;
  }
  OnUpstreamTlsFailed(reason, detail);
  return false;
}

void ClientConnection::OnUpstreamTlsFailed(std::string_view reason, std::string_view detail) {
  if (upstream_ != nullptr) {
    upstream_->Close();
    upstream_ = nullptr;
  }
  phase_ = Phase::kForward;  // no longer waiting for the connect
  AbortTransaction(ErrorCode::kBadGateway,
                   CountUpstreamTlsFailure(*worker_, decision_, reason, detail));
  if (phase_ == Phase::kClosing) {
    // The connect timer must not fire on an answered request (a second
    // answer, the server marked down for a connect that succeeded).
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
  }
}

void ClientConnection::OnConnected() {
  phase_ = Phase::kForward;
  std::array<http::Header, 4 + kMaxForwardedChain> extra{};
  size_t extra_count = 0;
  char key_size[16];
  http::ForwardRequestOptions options;
  options.client_ip = client_ip_;
  options.keep_forwarded_for = peer_trusted_;
  options.proto = request_https_ ? "https" : "http";
  options.tunnel_upgrade = request_info_.upgrade_websocket;
  options.request_id = request_id_;
  if (rewrite_target_) {
    options.target = upstream_target_;
  }
  if (request_info_.body == http::BodyKind::kChunked) {
    options.reframe_body = true;
    extra[extra_count++] = {"Transfer-Encoding", "chunked"};
  }
  if (const net::TlsInfo* tls = transport_->tls(); tls != nullptr) {
    int n = std::snprintf(key_size, sizeof key_size, "%d", tls->cipher_bits);
    extra_count += AppendTlsHeaders(*tls, std::string_view(key_size, static_cast<size_t>(n)),
                                    std::span<http::Header>(extra).subspan(extra_count));
  }
  options.extra_headers = std::span<const http::Header>(extra.data(), extra_count);
  http::SerializeRequestHead(*request_head_, request_info_, options, sent_head_);
  upstream_out_.assign(sent_head_);
  upstream_sent_ = 0;
  in_.Consume(head_bytes_);
  head_bytes_ = 0;
  CountServerRequest(*worker_, decision_);
  ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
}

void ClientConnection::OnConnectFailed(int error_number) {
  if (upstream_ != nullptr) {
    upstream_->Close();
    upstream_ = nullptr;
  }
  phase_ = Phase::kForward;  // no longer waiting for the connect
  if (net::IsLocalResourceError(error_number)) {
    // The proxy is out of descriptors (or ports): the server is not at fault,
    // stays up, and another server would fail the same way.
    worker_->WarnOutOfResources("connect to a server", error_number);
    AnswerLocally(ErrorCode::kNoServer,
                  "the proxy cannot open a connection now (out of file descriptors or ports)",
                  true);
    return;
  }
  CountConnectFailure(*worker_, decision_, error_number);
  if (RetryElsewhere()) {
    return;
  }
  AbortTransaction(ErrorCode::kBadGateway, "the selected server is not reachable");
}

bool ClientConnection::RetryElsewhere() {
  // Only a request nobody is stuck to, that may safely be sent twice, whose
  // head is still in the buffer (nothing was sent yet).
  if (retried_ || decision_.reason != routing::Reason::kBalance || !IsIdempotentMethod(method_) ||
      head_bytes_ == 0) {
    return false;
  }
  const routing::ServerEntry* failed = decision_.server;
  worker_->router().Complete(decision_);
  decided_ = false;
  routing::Request request;
  request.method = request_head_->method;
  request.target = request_head_->target;
  request.host = request_info_.host;
  request.https = request_https_;
  size_t cookie_count = 0;
  for (const auto& field : request_head_->fields()) {
    if (cookie_count < cookies_.size() && http::EqualsIgnoreCase(field.name, "cookie")) {
      cookies_[cookie_count++] = field.value;
    }
  }
  request.cookie_headers = std::span<const std::string_view>(cookies_.data(), cookie_count);
  decision_ = worker_->router().Route(request);
  rewrite_target_ = routing::UpstreamTarget(decision_, request.target, &upstream_target_);
  decided_ = true;
  retried_ = true;
  if (decision_.server == nullptr || decision_.server == failed) {
    bool close = request_info_.body != http::BodyKind::kNone || !request_info_.keep_alive;
    AnswerLocally(ErrorCode::kNoServer, "no server of the logon group is reachable", close);
    return true;
  }
  worker_->metrics().retries.Inc();
  ConnectUpstream();
  return true;
}

// ---- forwarding ----

bool ClientConnection::StepForward() {
  bool progressed = MoveRequestBody();
  if (closed_ || phase_ != Phase::kForward) {
    return true;
  }
  // Progress is measured on what is pending: a flush that sends everything
  // resets the offset, possibly to the value it had before.
  size_t pending_up = UpstreamPending();
  if (!FlushUpstream()) {
    upstream_eof_ = true;
  }
  progressed = progressed || UpstreamPending() != pending_up;
  progressed = MoveResponse() || progressed;
  if (closed_ || phase_ != Phase::kForward) {
    return true;
  }
  size_t pending = out_.size();
  if (!FlushClient()) {
    return false;
  }
  progressed = progressed || out_.size() != pending;
  if (response_done_) {
    FinishTransaction();
    return true;
  }
  if (progressed) {
    ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
  }
  return progressed;
}

bool ClientConnection::MoveRequestBody() {
  bool progressed = false;
  while (!request_done_ && UpstreamPending() < kHighWater) {
    if (in_.empty()) {
      if (client_eof_) {
        // The client went away in the middle of its body.
        Close("aborted-client");
        return true;
      }
      ssize_t n = ReadInto(*transport_, &client_readable_, in_, kBodyBufferBytes);
      if (n > 0) {
        progressed = true;
        continue;
      }
      if (n == 0 || n == kIoError) {
        client_eof_ = true;
        continue;
      }
      break;
    }
    if (request_info_.body == http::BodyKind::kContentLength) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(in_.size(), request_remaining_));
      upstream_out_.append(in_.view().data(), take);
      request_body_bytes_ += take;
      in_.Consume(take);
      request_remaining_ -= take;
      request_done_ = request_remaining_ == 0;
      progressed = true;
      continue;
    }
    http::ChunkedResult r = request_chunked_.Decode(in_.view());
    switch (r.status) {
      case http::ChunkedStatus::kData:
        AppendChunk(r.data, upstream_out_);
        request_body_bytes_ += r.data.size();
        break;
      case http::ChunkedStatus::kNeedMore:
        break;
      case http::ChunkedStatus::kDone:
        upstream_out_.append(kLastChunk);
        request_done_ = true;
        break;
      case http::ChunkedStatus::kError:
        worker_->metrics().bad_requests.Inc();
        AbortTransaction(ErrorCodeForStatus(r.http_status), http::ParseErrorName(r.error));
        return true;
    }
    in_.Consume(r.consumed);
    progressed = true;
  }
  return progressed;
}

bool ClientConnection::MoveResponse() {
  bool progressed = false;
  while (!response_done_ && !closed_ && phase_ == Phase::kForward) {
    if (!response_head_done_) {
      if (!upstream_in_.empty()) {
        if (response_head_ == nullptr) {
          response_head_ = PerThreadFreeList<http::ResponseHead>::Take();
        }
        http::ParseResult r = response_parser_.Parse(upstream_in_.view(), response_head_.get());
        if (r.complete()) {
          head_consumed_ = r.consumed;
          if (!HandleResponseHead()) {
            return true;
          }
          progressed = true;
          continue;
        }
        if (r.failed()) {
          AbortTransaction(ErrorCode::kBadGateway, "the server sent a malformed response");
          return true;
        }
      }
    } else if (!upstream_in_.empty()) {
      if (out_.size() >= kHighWater) {
        break;
      }
      std::string_view data = upstream_in_.view();
      switch (response_info_.body) {
        case http::BodyKind::kContentLength: {
          size_t take = static_cast<size_t>(std::min<uint64_t>(data.size(), response_remaining_));
          out_.Append(data.substr(0, take));
          upstream_in_.Consume(take);
          response_remaining_ -= take;
          response_body_bytes_ += take;
          response_done_ = response_remaining_ == 0;
          break;
        }
        case http::BodyKind::kChunked: {
          http::ChunkedResult r = response_chunked_.Decode(data);
          if (r.status == http::ChunkedStatus::kError) {
            AbortTransaction(ErrorCode::kBadGateway, "the server sent a malformed chunked body");
            return true;
          }
          if (r.status == http::ChunkedStatus::kData) {
            response_body_bytes_ += r.data.size();
            if (chunk_response_) {
              AppendChunk(r.data, out_);
            } else {
              out_.Append(r.data);
            }
          } else if (r.status == http::ChunkedStatus::kDone) {
            if (chunk_response_ && client_takes_trailers_ &&
                !response_chunked_.trailers().empty()) {
              // The client said `TE: trailers`: the passable ones go on
              // (without it they are dropped, RFC 9112 7.1.2).
              out_.Append("0\r\n");
              http::ForEachPassableTrailer(response_chunked_.trailers(),
                                           [&](std::string_view name, std::string_view value) {
                                             out_.Append(name);
                                             out_.Append(": ");
                                             out_.Append(value);
                                             out_.Append("\r\n");
                                           });
              out_.Append("\r\n");
            } else if (chunk_response_) {
              out_.Append(kLastChunk);
            }
            response_done_ = true;
          }
          upstream_in_.Consume(r.consumed);
          break;
        }
        default:  // until close
          out_.Append(data);
          response_body_bytes_ += data.size();
          upstream_in_.Consume(data.size());
          break;
      }
      progressed = true;
      continue;
    }
    if (out_.size() >= kHighWater) {
      break;
    }
    if (upstream_eof_) {
      if (response_head_done_ && response_info_.body == http::BodyKind::kUntilClose) {
        response_done_ = true;
        return true;
      }
      if (!response_started_ && upstream_reused_ && !retried_reuse_ &&
          request_info_.body == http::BodyKind::kNone && IsIdempotentMethod(method_)) {
        // A pooled connection the server had closed: send again on a new one.
        // Only an idempotent request: the server may have acted on the first
        // one before closing (RFC 9110 9.2.2); any other gets 502 below.
        retried_reuse_ = true;
        ReleaseUpstream(false);
        upstream_reused_ = false;
        RetryOnFreshConnection();
        return true;
      }
      if (!response_head_done_) {
        AbortTransaction(ErrorCode::kBadGateway,
                         "the server closed the connection without a response");
      } else {
        // Truncated body: the client gets what was sent, then a reset.
        AbortTransaction(ErrorCode::kBadGateway, "the server closed the connection mid-body");
      }
      return true;
    }
    ssize_t n = ReadInto(*upstream_->transport, &upstream_readable_, upstream_in_,
                         kBodyBufferBytes + worker_->options().max_header_bytes);
    if (n > 0) {
      response_started_ = true;
      progressed = true;
      continue;
    }
    if (n == 0 || n == kIoError) {
      upstream_eof_ = true;
      continue;
    }
    if (n == kBufferFull) {
      AbortTransaction(ErrorCode::kBadGateway, "the server's response head is too large");
      return true;
    }
    break;
  }
  return progressed;
}

void ClientConnection::RetryOnFreshConnection() {
  const routing::ServerEntry* server = decision_.server;
  net::Endpoint endpoint;
  int err = 0;
  int fd = -1;
  if (net::MakeEndpoint(server->address, static_cast<uint16_t>(server->port), &endpoint)) {
    fd = net::ConnectNonBlocking(endpoint, &err);
  }
  if (fd < 0) {
    AbortTransaction(ErrorCode::kBadGateway, "the selected server is not reachable");
    return;
  }
  worker_->metrics().upstream_connects.Inc();
  upstream_ = new UpstreamConnection(worker_, fd, server->address, server->port);
  upstream_->owner = this;
  if (decision_.group != nullptr && decision_.group->reencrypt && !StartUpstreamTls()) {
    return;
  }
  upstream_readable_ = {};
  upstream_out_.assign(sent_head_);
  upstream_sent_ = 0;
  upstream_eof_ = false;
  phase_ = Phase::kReconnecting;
  worker_->loop().Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, upstream_);
  ArmTimer(TimerKind::kConnect, worker_->options().connect_timeout_ms);
}

bool ClientConnection::HandleResponseHead() {
  http::FramingResult framing = http::AnalyzeResponse(*response_head_, method_, &response_info_);
  if (!framing.ok()) {
    AbortTransaction(ErrorCode::kBadGateway, "the server sent a response with invalid framing");
    return false;
  }
  if (response_info_.interim) {
    // 100 Continue and other 1xx: pass on, the final response follows. An
    // HTTP/1.0 client does not know them (RFC 9110 15.2): dropped.
    if (version_minor_ >= 1) {
      http::ForwardResponseOptions options;
      http::SerializeResponseHead(*response_head_, options, head_out_);
      out_.Append(head_out_);
    }
    upstream_in_.Consume(head_consumed_);
    response_parser_.Reset();
    return true;
  }
  if (response_info_.body == http::BodyKind::kTunnel && !request_info_.upgrade_websocket) {
    // Only an upgrade the client asked for (and we passed on) may turn the
    // connection into a tunnel: else its next requests would reach the
    // server unrouted, past the permissions.
    AbortTransaction(ErrorCode::kBadGateway,
                     "the server switched protocols though the request asked for no upgrade");
    return false;
  }
  if (response_info_.transfer_coded && version_minor_ == 0 &&
      response_info_.body != http::BodyKind::kNone) {
    // HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1), and without it the
    // client would take the coded bytes ("gzip") for the content.
    AbortTransaction(ErrorCode::kBadGateway,
                     "the server used a transfer coding an HTTP/1.0 client cannot take");
    return false;
  }
  response_head_done_ = true;
  response_status_ = response_head_->status_code;

  std::array<http::Header, 2> extra{};
  size_t extra_count = 0;
  bool set_affinity = decision_.set_affinity_cookie;
  for (const auto& field : response_head_->fields()) {
    if (!http::EqualsIgnoreCase(field.name, "set-cookie")) {
      continue;
    }
    std::string_view cookie = field.value;
    size_t eq = cookie.find('=');
    if (eq == std::string_view::npos || cookie.substr(0, eq) != "JSESSIONID") {
      continue;
    }
    std::string_view value = cookie.substr(eq + 1);
    value = value.substr(0, value.find(';'));
    if (!value.empty() && worker_->router().LearnJSessionId(decision_, value)) {
      worker_->metrics().sessions_learned.Inc();
      set_affinity = true;
    }
  }
  if (set_affinity) {
    scratch_ = worker_->router().AffinityCookieHeader(decision_, request_https_);
    if (!scratch_.empty()) {
      extra[extra_count++] = {"Set-Cookie", scratch_};
    }
  }

  http::ForwardResponseOptions options;
  switch (response_info_.body) {
    case http::BodyKind::kNone:
      response_done_ = true;
      break;
    case http::BodyKind::kContentLength:
      response_remaining_ = response_info_.content_length;
      response_done_ = response_remaining_ == 0;
      break;
    case http::BodyKind::kChunked:
      response_chunked_.Reset();
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
  }
  if (!request_done_ || !request_info_.keep_alive || draining_) {
    close_after_response_ = true;
  }
  if (response_info_.body != http::BodyKind::kTunnel) {
    if (close_after_response_) {
      options.connection = "close";
    } else if (version_minor_ == 0) {
      options.connection = "keep-alive";
    }
  }
  if (version_minor_ == 0) {
    options.reframe_body = true;  // HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1)
  }
  options.extra_headers = std::span<const http::Header>(extra.data(), extra_count);
  http::SerializeResponseHead(*response_head_, options, head_out_);
  out_.Append(head_out_);
  upstream_in_.Consume(head_consumed_);
  if (response_info_.body == http::BodyKind::kTunnel) {
    phase_ = Phase::kTunnel;
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
  }
  return true;
}

bool ClientConnection::StepTunnel() {
  bool progressed = false;
  if (!in_.empty()) {
    upstream_out_.append(in_.view());
    in_.Consume(in_.size());
    progressed = true;
  }
  if (!upstream_in_.empty()) {
    out_.Append(upstream_in_.view());
    upstream_in_.Consume(upstream_in_.size());
    progressed = true;
  }
  size_t before_up = UpstreamPending();
  size_t before_out = out_.size();
  bool up_ok = FlushUpstream();
  if (!FlushClient()) {
    return false;
  }
  progressed = progressed || before_up != UpstreamPending() || before_out != out_.size();
  if (!client_eof_ && UpstreamPending() < kHighWater) {
    ssize_t n = ReadInto(*transport_, &client_readable_, in_, kBodyBufferBytes);
    if (n > 0) {
      progressed = true;
    } else if (n == 0 || n == kIoError) {
      client_eof_ = true;
    }
  }
  if (!upstream_eof_ && out_.size() < kHighWater) {
    ssize_t n =
        ReadInto(*upstream_->transport, &upstream_readable_, upstream_in_, kBodyBufferBytes);
    if (n > 0) {
      progressed = true;
    } else if (n == 0 || n == kIoError) {
      upstream_eof_ = true;
    }
  }
  if (!up_ok || ((client_eof_ || upstream_eof_) && in_.empty() && upstream_in_.empty())) {
    // Either side ended the tunnel: deliver what is buffered, then close.
    phase_ = Phase::kClosing;
    LogAndCount(response_status_, routing::ReasonName(decision_.reason));
    worker_->router().Complete(decision_);
    decided_ = false;
    ReleaseUpstream(false);
    return true;
  }
  if (progressed) {
    ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
  }
  return progressed;
}

void ClientConnection::FinishTransaction() {
  // Reused only when nothing follows the response: neither in our buffer nor
  // in the socket (a read that filled the buffer did not prove it drained,
  // and bytes already there raise no new edge for the idle pool to see).
  bool reusable = response_info_.keep_alive && request_done_ && !upstream_eof_ &&
                  response_info_.body != http::BodyKind::kUntilClose && upstream_in_.empty() &&
                  upstream_sent_ == upstream_out_.size();
  if (reusable && upstream_readable_.readable && upstream_ != nullptr &&
      upstream_->transport->tls() != nullptr) {
    // A TLS read returns one record, so the last one never proves the socket
    // empty: one more read does (it also takes a TLS 1.3 session ticket that
    // came after the response). Any data instead: not reusable.
    char extra;
    bool drained = false;
    reusable = upstream_->transport->Read(&extra, 1, &drained) == net::Transport::kWouldBlock;
  } else {
    reusable = reusable && !upstream_readable_.readable;
  }
  ReleaseUpstream(reusable);
  LogAndCount(response_status_, routing::ReasonName(decision_.reason));
  worker_->router().Complete(decision_);
  decided_ = false;
  ResetRequest();
  if (close_after_response_) {
    phase_ = Phase::kClosing;
    close_after_response_ = false;
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

void ClientConnection::ResetRequest() {
  request_parser_.Reset();
  request_client_ip_.clear();
  response_parser_.Reset();
  response_head_done_ = false;
  response_started_ = false;
  response_done_ = false;
  chunk_response_ = false;
  response_remaining_ = 0;
  response_status_ = 0;
  response_body_bytes_ = 0;
  request_body_bytes_ = 0;
  request_start_us_ = 0;
  upstream_start_us_ = 0;
  request_id_.clear();
  trace_id_.clear();
  request_done_ = false;
  retried_ = false;
  retried_reuse_ = false;
  upstream_reused_ = false;
}

void ClientConnection::AbortTransaction(ErrorCode code, std::string_view detail) {
  if (!response_head_done_) {
    AnswerLocally(code, detail, true);
  } else {
    // The head went out: what was sent is delivered, then the connection is
    // reset so that no client can take the cut-short response as complete.
    ResetOnClose(fd_);
    abortive_close_ = true;  // no TLS close_notify either: it would say "complete"
    EndAborted(code == ErrorCode::kGatewayTimeout ? "aborted-timeout"
               : code == ErrorCode::kBadGateway   ? "aborted-upstream"
                                                  : "aborted-client");
  }
}

void ClientConnection::EndAborted(std::string_view cause) {
  // What the client was sent of the response is delivered, then the
  // connection ends: the only way HTTP/1.1 has to say it was cut short.
  LogAborted(cause);
  worker_->router().Complete(decision_);
  decided_ = false;
  ReleaseUpstream(false);
  phase_ = Phase::kClosing;
  ArmTimer(TimerKind::kIdle, worker_->options().idle_timeout_ms);
}

void ClientConnection::LogAborted(std::string_view cause) {
  // The status the client was sent (0: no response head left), the routing
  // reason and why the transaction ended.
  std::string reason(routing::ReasonName(decision_.reason));
  reason.append(",").append(cause);
  LogAndCount(response_head_done_ ? response_status_ : 0, reason);
}

void ClientConnection::AnswerLocally(ErrorCode code, std::string_view detail, bool close) {
  scratch_.clear();
  AppendErrorResponse(code, detail, wants_json_, close, method_ == "HEAD", &scratch_);
  out_.Append(scratch_);
  ReleaseUpstream(false);
  response_status_ = ErrorInfoFor(code).status;
  worker_->metrics().local_responses[static_cast<size_t>(code)]->Inc();
  std::string_view reason =
      decided_ ? routing::ReasonName(decision_.reason) : std::string_view("bad-request");
  worker_->stats().RecordLocalAnswer(decided_ ? &decision_ : nullptr, response_status_,
                                     ErrorInfoFor(code).sap_code, reason, detail, UnixNowMs());
  LogAndCount(response_status_, reason);
  if (decided_) {
    worker_->router().Complete(decision_);
    decided_ = false;
  }
  if (head_bytes_ > 0) {
    in_.Consume(head_bytes_);
    head_bytes_ = 0;
  }
  ResetRequest();
  wants_json_ = false;
  if (close || draining_) {
    phase_ = Phase::kClosing;
    return;
  }
  phase_ = Phase::kHead;
  request_started_ = !in_.empty();
  ArmTimer(
      request_started_ ? TimerKind::kHeader : TimerKind::kIdle,
      request_started_ ? worker_->options().header_timeout_ms : worker_->options().idle_timeout_ms);
}

void ClientConnection::ReleaseUpstream(bool reusable) {
  if (upstream_ == nullptr) {
    return;
  }
  if (reusable) {
    upstream_->owner = nullptr;
    worker_->ReleaseIdle(upstream_);
  } else {
    upstream_->Close();
  }
  upstream_ = nullptr;
  upstream_in_.Clear();
  upstream_out_.clear();
  upstream_sent_ = 0;
  upstream_eof_ = false;
}

void ClientConnection::LogAndCount(int status, std::string_view reason) {
  TransactionRecord record;
  record.client_ip = request_client_ip_.empty() ? client_ip_ : request_client_ip_;
  record.method = method_;
  record.target = target_;
  record.version_minor = version_minor_;
  record.status = status;
  record.bytes_sent = response_body_bytes_;
  record.bytes_received = request_body_bytes_;
  record.decision = decided_ ? &decision_ : nullptr;
  record.server_answered = response_head_done_;
  record.request_start_us = request_start_us_;
  record.upstream_start_us = upstream_start_us_;
  record.reason = reason;
  record.request_id = request_id_;
  record.trace_id = trace_id_;
  record.tls = transport_->tls();
  CountAndLog(*worker_, record);
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
  ProxyMetrics& metrics = worker_->metrics();
  switch (timer_kind_) {
    case TimerKind::kNone:
      return;
    case TimerKind::kHandshake:
      worker_->metrics().tls_handshake_timeouts.Inc();
      Close("handshake-timeout");
      return;
    case TimerKind::kIdle:
      if (phase_ == Phase::kTunnel) {
        metrics.timeouts_client.Inc();
      }
      Close("idle-timeout");  // ends a tunnel; no transaction is in flight otherwise
      return;
    case TimerKind::kHeader:
      metrics.timeouts_client.Inc();
      method_.clear();
      target_.clear();
      AnswerLocally(ErrorCode::kRequestTimeout, "the request head did not arrive in time", true);
      break;
    case TimerKind::kConnect:
      if (phase_ != Phase::kConnecting && phase_ != Phase::kReconnecting) {
        // Left over from a connect that ended otherwise (answered locally,
        // its answer still being flushed): nothing is connecting any more.
        Close("idle-timeout");
        return;
      }
      metrics.timeouts_upstream.Inc();
      if (phase_ == Phase::kReconnecting) {
        AbortTransaction(ErrorCode::kGatewayTimeout, "the selected server did not accept in time");
      } else {
        OnConnectFailed(ETIMEDOUT);
      }
      break;
    case TimerKind::kResponse:
      metrics.timeouts_upstream.Inc();
      Log(LogLevel::kWarn, "proxy", "no progress on a forwarded request: timing out",
          {{"target", target_},
           {"server", decision_.server != nullptr ? std::string_view(decision_.server->name)
                                                  : std::string_view("-")},
           {"request_done", request_done_ ? "true" : "false"},
           {"request_remaining", std::to_string(request_remaining_)},
           {"client_buffered", std::to_string(in_.size())},
           {"upstream_pending", std::to_string(UpstreamPending())},
           {"response_started", response_started_ ? "true" : "false"},
           {"client_pending", std::to_string(out_.size())}});
      AbortTransaction(ErrorCode::kGatewayTimeout, "the server did not answer in time");
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

bool ClientConnection::FlushUpstream() {
  if (upstream_ == nullptr) {
    return true;
  }
  while (upstream_sent_ < upstream_out_.size()) {
    ssize_t n = upstream_->transport->Write(upstream_out_.data() + upstream_sent_,
                                            upstream_out_.size() - upstream_sent_);
    if (n > 0) {
      upstream_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n == net::Transport::kWouldBlock) {
      // Keep the pending bytes at the front so the buffer stays bounded.
      if (upstream_sent_ >= kHighWater) {
        upstream_out_.erase(0, upstream_sent_);
        upstream_sent_ = 0;
      }
      return true;
    }
    return false;
  }
  upstream_out_.clear();
  upstream_sent_ = 0;
  return true;
}

void ClientConnection::Close(std::string_view cause) {
  if (closed_) {
    return;
  }
  closed_ = true;
  worker_->metrics().http1_connections.Add(-1);
  ReleaseUpstream(false);
  if (decided_) {
    LogAborted(cause);
    worker_->router().Complete(decision_);
    decided_ = false;
  }
  worker_->loop().Cancel(&timer_);
  // No EPOLL_CTL_DEL: close(2) takes the descriptor out of the epoll set (it
  // is never duplicated), and events of this batch go to the graveyard object.
  if (!abortive_close_) {
    transport_->Shutdown();
  }
  ::close(fd_);
  worker_->ConnectionClosed(this);
  worker_->loop().DeleteLater(this);
}

void ClientConnection::HandOverToHttp2() {
  closed_ = true;
  worker_->metrics().http1_connections.Add(-1);
  worker_->loop().Cancel(&timer_);
  worker_->HandOverToHttp2(this, std::move(transport_), std::move(client_ip_), in_.view(),
                           registered_);
  worker_->loop().DeleteLater(this);
}

}  // namespace kwd::proxy
