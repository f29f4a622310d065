#include "dataplane/proxy/exchange.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "common/log.h"
#include "dataplane/http/forward.h"
#include "dataplane/net/socket.h"
#include "dataplane/proxy/request_id.h"
#include "dataplane/tls/tls_transport.h"
#include "dataplane/tls/upstream_tls.h"

namespace kwd::proxy {

namespace {

// Pending bytes towards one side beyond which the other side is not read.
constexpr size_t kHighWater = 64 * 1024;
constexpr size_t kBodyBufferBytes = 64 * 1024;
constexpr uint32_t kReadableEvents = EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR;

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void AppendChunk(std::string_view data, std::string& out) {
  char size_line[24];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
  out.append(size_line, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
}

constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Request-head storage beyond what an idle exchange keeps, held per thread
// for the next request that needs it: a head with 4 KiB of cookies was
// otherwise allocated, zero-filled and freed per keep-alive request. A held
// string keeps its length, and the head writer zero-fills only what a head
// needs beyond it. Bounded: kMaxHeads strings of at most kMaxBytes per thread.
class IdleHeads {
 public:
  static constexpr size_t kKeepStringBytes = 4096;
  // Takes `s`'s storage when it is larger than an idle exchange keeps; `s` is
  // left without storage of its own either way.
  static void Give(std::string& s) {
    if (s.capacity() <= kKeepStringBytes) {
      return;
    }
    State& state = ThisThread();
    if (state.count < kMaxHeads && s.capacity() <= kMaxBytes) {
      state.heads[state.count++].swap(s);
    }
    std::string().swap(s);
  }
  // Gives `s` held storage when it has less than `bytes` and some is held.
  static void Take(size_t bytes, std::string& s) {
    if (s.capacity() >= bytes) {
      return;
    }
    State& state = ThisThread();
    if (state.count > 0) {
      s.swap(state.heads[--state.count]);
    }
  }

 private:
  static constexpr size_t kMaxHeads = 16;
  static constexpr size_t kMaxBytes = 64 * 1024;
  struct State {
    std::array<std::string, kMaxHeads> heads;
    size_t count = 0;
  };
  static State& ThisThread() {
    static thread_local State state;
    return state;
  }
};

// About the size of a request head as received: from its method to the end of
// its last field's value, which for HTTP/1.1 lie in one buffer. (An HTTP/2
// head's views do not; the figure only decides whether to take held storage.)
size_t ReceivedHeadBytes(const http::RequestHead& head) {
  const std::span<const http::Header> fields = head.fields();
  const std::string_view last = fields.empty() ? head.target : fields.back().value;
  const auto begin = reinterpret_cast<uintptr_t>(head.method.data());
  const auto end = reinterpret_cast<uintptr_t>(last.data() + last.size());
  return end > begin ? end - begin : 0;
}

constexpr std::string_view kChainHeaders[kMaxForwardedChain] = {
    "SSL_CLIENT_CERT_CHAIN_1", "SSL_CLIENT_CERT_CHAIN_2", "SSL_CLIENT_CERT_CHAIN_3",
    "SSL_CLIENT_CERT_CHAIN_4", "SSL_CLIENT_CERT_CHAIN_5", "SSL_CLIENT_CERT_CHAIN_6",
    "SSL_CLIENT_CERT_CHAIN_7", "SSL_CLIENT_CERT_CHAIN_8"};

}  // namespace

// ---- shared with the HTTP/1.1 connection ----

void Readiness::Note(uint32_t events) {
  if ((events & kReadableEvents) != 0) {
    readable = true;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    peer_closed = true;
  }
}

ssize_t ReadInto(net::Transport& transport, Readiness* readiness, Buffer& buffer,
                 size_t max_capacity) {
  // Edge-triggered readiness is cached: no read that is known to block.
  if (!readiness->readable) {
    return kReadWouldBlock;
  }
  size_t free_bytes = 0;
  char* p = buffer.PrepareWrite(4096, max_capacity, &free_bytes);
  if (free_bytes == 0) {
    return kReadBufferFull;
  }
  bool drained = false;
  ssize_t n = transport.Read(p, free_bytes, &drained);
  if (n > 0) {
    buffer.Commit(static_cast<size_t>(n));
  }
  // A drained socket raises a new edge when data comes. A FIN that came with
  // the data does not: the next read returns the EOF.
  if (drained && (n <= 0 || !readiness->peer_closed)) {
    readiness->readable = false;
  }
  if (n > 0 || n == net::Transport::kEof) {
    return n;
  }
  return n == net::Transport::kWouldBlock ? kReadWouldBlock : kReadError;
}

void CountAndLog(Worker& worker, const TransactionRecord& t) {
  int64_t now_us = MonotonicUs();
  double duration_ms =
      t.request_start_us == 0 ? 0 : static_cast<double>(now_us - t.request_start_us) / 1000.0;
  const auto& table_metrics = *worker.table_metrics();
  const GroupMetrics* group = &table_metrics.no_group;
  const routing::Decision* decision = t.decision;
  if (decision != nullptr && decision->group_index >= 0 &&
      static_cast<size_t>(decision->group_index) < table_metrics.groups.size() &&
      decision->group != nullptr) {
    group = &table_metrics.groups[decision->group_index];
  }
  group->requests[StatusCodeIndex(t.status)]->Inc();
  worker.stats().CountResponse(decision, t.status, worker.loop().now_ms());
  group->duration->Observe(duration_ms / 1000.0);
  AccessLog& log = worker.access_log();
  if (!log.enabled()) {
    return;
  }
  AccessLogEntry entry;
  entry.client_ip = t.client_ip;
  entry.method = t.method;  // "" before a request line was parsed
  entry.target = t.target;
  entry.version_minor = t.version_minor;
  entry.protocol = t.protocol;
  entry.status = t.status;
  entry.bytes_sent = t.bytes_sent;
  entry.bytes_received = t.bytes_received;
  if (decision != nullptr && decision->group != nullptr) {
    entry.group = decision->group->key;
  }
  if (decision != nullptr && decision->server != nullptr && t.server_answered) {
    entry.server = decision->server->name;
  }
  entry.duration_ms = duration_ms;
  if (t.upstream_start_us != 0) {
    entry.upstream_ms = static_cast<double>(now_us - t.upstream_start_us) / 1000.0;
  }
  entry.reason = t.reason;
  entry.request_id = t.request_id;
  entry.trace_id = t.trace_id;
  if (t.tls != nullptr) {
    entry.tls_version = t.tls->version;
  }
  log.Write(entry, time(nullptr));
}

void CountRouted(Worker& worker, const routing::Decision& decision) {
  ProxyMetrics& metrics = worker.metrics();
  if (decision.lost != routing::Identifier::kNone) {
    metrics.sticky_lost[static_cast<size_t>(decision.lost)]->Inc();
  }
  switch (decision.reason) {
    case routing::Reason::kStickyContextId:
    case routing::Reason::kStickySaplb:
    case routing::Reason::kStickyJSessionId:
    case routing::Reason::kStickySapExtSid:
    case routing::Reason::kStickyAffinityCookie: {
      static constexpr routing::Identifier kByReason[] = {
          routing::Identifier::kNone,      routing::Identifier::kSapContextId,
          routing::Identifier::kSaplb,     routing::Identifier::kJSessionId,
          routing::Identifier::kSapExtSid, routing::Identifier::kAffinityCookie};
      metrics.sticky_routed[static_cast<size_t>(kByReason[static_cast<size_t>(decision.reason)])]
          ->Inc();
      break;
    }
    default:
      break;
  }
}

namespace {
const ServerMetrics* ServerMetricsFor(Worker& worker, const routing::Decision& decision) {
  const auto& table_metrics = worker.table_metrics();
  if (decision.group_index >= 0 &&
      static_cast<size_t>(decision.group_index) < table_metrics->groups.size()) {
    const auto& group = table_metrics->groups[decision.group_index];
    if (static_cast<size_t>(decision.server_index) < group.servers.size()) {
      return &group.servers[decision.server_index];
    }
  }
  return nullptr;
}
}  // namespace

void CountServerRequest(Worker& worker, const routing::Decision& decision) {
  if (const ServerMetrics* server = ServerMetricsFor(worker, decision)) {
    server->requests->Inc();
  }
}

void CountConnectFailure(Worker& worker, const routing::Decision& decision, int error_number) {
  if (const ServerMetrics* server = ServerMetricsFor(worker, decision)) {
    server->connect_errors->Inc();
  }
  // Passive health: the health checker re-admits the server once its pings
  // succeed again.
  const routing::ServerEntry* server = decision.server;
  if (server->health != nullptr && server->health->SetHealthy(false, UnixNowMs())) {
    Log(LogLevel::kWarn, "proxy", "server marked down after a failed connect",
        {{"group", decision.group->key},
         {"server", server->name},
         {"error", std::strerror(error_number)}});
  }
}

size_t AppendTlsHeaders(const net::TlsInfo& tls, std::string_view key_size,
                        std::span<http::Header> out) {
  // Clients' own fields of these names are always dropped
  // (http::SerializeRequestHead).
  size_t n = 0;
  out[n++] = {"SSL_CIPHER_SUITE", tls.cipher};
  out[n++] = {"SSL_CIPHER_USEKEYSIZE", key_size};
  if (tls.peer_verified && !tls.peer_pem_line.empty()) {
    out[n++] = {"SSL_CLIENT_CERT", tls.peer_pem_line};
    for (size_t i = 0; i < tls.peer_chain_pem_lines.size() && i < kMaxForwardedChain; ++i) {
      out[n++] = {kChainHeaders[i], tls.peer_chain_pem_lines[i]};
    }
  }
  return n;
}

bool StartUpstreamTls(const routing::Decision& decision, UpstreamConnection* upstream,
                      std::string* detail) {
  const auto& tls = decision.group->tls;
  if (tls == nullptr || !tls->error().empty()) {
    *detail = "the proxy has no usable TLS settings for the group";
    return false;
  }
  std::shared_ptr<SSL_CTX> ctx = tls->Context();
  std::string error;
  std::unique_ptr<tls::TlsTransport> transport =
      ctx == nullptr ? nullptr
                     : tls::TlsTransport::Client(ctx.get(), upstream->fd,
                                                 tls->ServerName(upstream->address), &error);
  if (transport == nullptr) {
    *detail = error.empty() ? "no TLS context" : error;
    return false;
  }
  tls->OfferSession(transport->ssl(), upstream->address, upstream->port);
  upstream->tls_key = tls->key();
  upstream->tls = tls;
  upstream->transport = std::move(transport);
  return true;
}

UpstreamHandshake StepUpstreamTls(Worker& worker, UpstreamConnection* upstream,
                                  std::string_view* reason, std::string* detail) {
  net::Transport& transport = *upstream->transport;
  if (transport.established()) {
    return UpstreamHandshake::kDone;
  }
  switch (transport.Handshake()) {
    case net::Transport::HandshakeStatus::kDone: {
      const net::TlsInfo* info = transport.tls();
      worker.metrics()
          .registry()
          .GetCounter("kwd_proxy_upstream_tls_handshakes_total",
                      "TLS handshakes with servers of re-encrypting groups, by whether a "
                      "session was resumed.",
                      {{"resumed", info != nullptr && info->resumed ? "true" : "false"}})
          .Inc();
      return UpstreamHandshake::kDone;
    }
    case net::Transport::HandshakeStatus::kWantIo:
      return UpstreamHandshake::kWantIo;
    case net::Transport::HandshakeStatus::kFailed:
      break;
  }
  auto* tls_transport = static_cast<tls::TlsTransport*>(upstream->transport.get());
  long verify = SSL_get_verify_result(tls_transport->ssl());
  if (verify != X509_V_OK) {
    *reason = "verify";
    *detail = std::string("the server's certificate did not verify: ") +
              X509_verify_cert_error_string(verify);
  } else {
    *reason = "handshake";
    *detail =
        std::string("TLS handshake with the server failed: ") + std::string(transport.error());
  }
  return UpstreamHandshake::kFailed;
}

std::string_view CountUpstreamTlsFailure(Worker& worker, const routing::Decision& decision,
                                         std::string_view reason, std::string_view detail) {
  std::string group = decision.group != nullptr ? decision.group->key : "";
  worker.metrics()
      .registry()
      .GetCounter("kwd_proxy_upstream_tls_errors_total",
                  "Requests of re-encrypting groups answered 502 because TLS to the server "
                  "could not be set up (config), the server's certificate or name did not verify "
                  "(verify) or the handshake failed (handshake). Never sent in clear instead.",
                  {{"group", group}, {"reason", std::string(reason)}})
      .Inc();
  Log(LogLevel::kWarn, "proxy", "TLS to a server failed: answered 502",
      {{"group", group},
       {"server", decision.server != nullptr ? decision.server->name : ""},
       {"reason", std::string(reason)},
       {"error", std::string(detail)}});
  // The detail (paths, OpenSSL's words) goes to the log, not to clients.
  return reason == "verify" ? "the server's TLS certificate did not verify"
                            : "TLS to the server could not be established";
}

bool IsIdempotentMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "PUT" ||
         method == "DELETE" || method == "TRACE";
}

// ---- Exchange ----

Exchange::Exchange(Worker* worker, ExchangeSink* sink, ClientContext client)
    : worker_(worker),
      sink_(sink),
      client_(client),
      response_parser_(http::HeadLimits{worker->options().max_header_bytes, 8 * 1024}),
      response_chunked_(http::ChunkedLimits{.max_body_bytes = ~0ull, .keep_trailers = true}),
      timer_(this, [](void* self) { static_cast<Exchange*>(self)->OnTimer(); }) {}

Exchange::~Exchange() {
  Cancel("aborted-client");
  worker_->loop().Cancel(&timer_);
  PerThreadFreeList<http::ResponseHead>::Give(std::move(response_head_));
}

void Exchange::Recycle(ClientContext client) {
  client_ = client;
  phase_ = Phase::kIdle;
  finished_ = true;  // nothing in flight until Start or Reject
  head_ = nullptr;
  method_.clear();
  target_.clear();
  version_minor_ = 1;
  request_client_ip_.clear();
  request_id_.clear();
  trace_id_.clear();
  https_ = false;
  peer_trusted_ = false;
  wants_json_ = false;
  request_start_us_ = 0;
  upstream_start_us_ = 0;
  decided_ = false;
  forwarded_ = false;
  rewrite_target_ = false;
  retried_ = false;
  retried_reuse_ = false;
  tunnel_ = false;
  upstream_shut_ = false;
  request_body_.Clear();
  request_end_ = false;
  request_done_ = false;
  request_trailers_.clear();
  request_body_bytes_ = 0;
  forward_head_ = nullptr;
  forward_host_ = {};
  response_edits_.clear();
  upstream_readable_ = {};
  upstream_reused_ = false;
  upstream_eof_ = false;
  head_unsent_ = 0;
  response_parser_.Reset();
  response_chunked_.Reset();  // else a later response would end with these trailers
  interim_ = {};
  response_head_done_ = false;
  response_started_ = false;
  response_done_ = false;
  response_remaining_ = 0;
  response_status_ = 0;
  response_body_bytes_ = 0;
}

void Exchange::ReleaseIdleMemory() {
  request_body_.Release();
  upstream_in_.Release();
  PerThreadFreeList<http::ResponseHead>::Give(std::move(response_head_));
  IdleHeads::Give(sent_head_);
  for (std::string* s : {&upstream_out_, &scratch_}) {
    if (s->capacity() > IdleHeads::kKeepStringBytes) {
      std::string().swap(*s);
    }
  }
}

void Exchange::Start(const http::RequestHead* head, const http::RequestInfo& info) {
  head_ = head;
  info_ = info;
  finished_ = false;
  request_start_us_ = MonotonicUs();
  method_.assign(head->method);
  target_.assign(head->target);
  version_minor_ = head->version_minor;
  peer_trusted_ = worker_->options().trusted_proxies.Contains(client_.client_ip);
  const http::Header* request_id = head->Find(http::FieldId::kXRequestId);
  if (request_id != nullptr && peer_trusted_ && ValidRequestId(request_id->value)) {
    request_id_.assign(request_id->value);
  } else {
    GenerateRequestId(&request_id_);
  }
  const http::Header* traceparent = head->Find("traceparent");
  if (traceparent != nullptr) {
    trace_id_.assign(TraceIdFromTraceparent(traceparent->value));
  } else {
    trace_id_.clear();
  }
  const http::Header* accept = head->Find("accept");
  wants_json_ = accept != nullptr && accept->value.find("application/json") != std::string::npos;
  const http::ForwardedClient forwarded =
      http::ResolveForwarded(*head, client_.client_ip, worker_->options().trusted_proxies);
  // Empty: the peer itself (Log falls back to it), no copy per request.
  if (forwarded.client_ip.data() == client_.client_ip.data()) {
    request_client_ip_.clear();
  } else {
    request_client_ip_.assign(forwarded.client_ip);
  }
  https_ = client_.tls != nullptr || forwarded.https;
  request_done_ = info_.body == http::BodyKind::kNone ||
                  (info_.body == http::BodyKind::kContentLength && info_.content_length == 0);
  request_end_ = request_done_;
  Route();
  if (decision_.secure_redirect != routing::SecureRedirect::kNone) {
    CountSecureRedirect();
  }
  if (decision_.server == nullptr) {
    if (decision_.secure_redirect == routing::SecureRedirect::kRedirected) {
      AnswerSecureRedirect();
    } else if (routing::IsRuleAnswer(decision_.reason)) {
      AnswerByRule();
    } else if (decision_.status == 403) {
      AnswerLocally(ErrorCode::kDenied, "access to this URL is not permitted", false);
    } else if (decision_.status == 400) {
      worker_->metrics().bad_requests.Inc();
      AnswerLocally(ErrorCode::kBadRequest, "malformed request target");
    } else {
      AnswerLocally(ErrorCode::kNoServer,
                    decision_.group == nullptr ? "no logon group serves this URL"
                                               : "no server of the logon group is available",
                    false);
    }
    return;
  }
  CountRouted(*worker_, decision_);
  ConnectUpstream();
}

void Exchange::Route() {
  routing::Request request;
  request.method = head_->method;
  request.target = head_->target;
  request.host = info_.host;
  request.https = https_;
  size_t cookie_count = 0;
  for (const auto& field : head_->fields()) {
    if (cookie_count < cookies_.size() && http::EqualsIgnoreCase(field.name, "cookie")) {
      cookies_[cookie_count++] = field.value;
    }
  }
  request.cookie_headers = std::span<const std::string_view>(cookies_.data(), cookie_count);
  request.headers = &rule_headers_;
  rule_headers_.Reset();
  request.remote_addr =
      request_client_ip_.empty() ? client_.client_ip : std::string_view(request_client_ip_);
  routing::Router& router = worker_->router();
  decision_ = router.Route(request);
  forward_head_ = head_;
  forward_host_ = {};
  response_edits_.clear();
  if (decision_.modified) {
    if (decision_.server != nullptr) {
      if (TakeModifications()) {
        worker_->metrics().modification_requests[0]->Inc();
      } else {
        // Not forwarded after all: the decision is given back.
        router.Complete(decision_);
        decision_.counted = false;
        decision_.server = nullptr;
        decision_.reason = routing::Reason::kRuleError;
        decision_.status = 500;
      }
    } else if (decision_.reason == routing::Reason::kRuleRedirect) {
      rule_location_.swap(router.modification_state().location);
    }
  }
  rewrite_target_ = routing::UpstreamTarget(decision_, request.target, &upstream_target_);
  decided_ = true;
}

void Exchange::RuleHeaders::Collect(std::vector<modification::HeaderView>* out) const {
  bool host = false;
  for (const http::Header& field : exchange_->head_->fields()) {
    out->emplace_back(field.name, field.value);
    host = host || field.Id() == http::FieldId::kHost;
  }
  if (!host && !exchange_->info_.host.empty()) {
    // HTTP/2's :authority, an absolute-form target's authority.
    out->emplace_back("Host", exchange_->info_.host);
  }
}

std::string_view Exchange::RuleHeaders::ServerPort() const {
  const ProxyOptions& options = exchange_->worker_->options();
  const uint16_t port =
      exchange_->client_.tls != nullptr ? options.public_https_port : options.public_http_port;
  if (port == 0) {
    return {};
  }
  char* end = std::to_chars(port_.data(), port_.data() + port_.size(), port).ptr;
  return std::string_view(port_.data(), static_cast<size_t>(end - port_.data()));
}

std::string_view Exchange::RuleHeaders::ServerAddr() const {
  if (server_addr_size_ < 0) {
    server_addr_size_ = 0;
    net::Endpoint local;
    local.len = sizeof local.addr;
    if (exchange_->client_.fd >= 0 &&
        getsockname(exchange_->client_.fd, reinterpret_cast<sockaddr*>(&local.addr), &local.len) ==
            0) {
      std::string address = net::AddressString(local);
      if (address.size() <= server_addr_.size()) {
        std::copy(address.begin(), address.end(), server_addr_.begin());
        server_addr_size_ = static_cast<int>(address.size());
      }
    }
  }
  return std::string_view(server_addr_.data(), static_cast<size_t>(server_addr_size_));
}

std::string_view Exchange::RuleHeaders::RemotePort() const {
  // The port belongs to the connection's peer: not to an address taken from
  // X-Forwarded-For (a trusted proxy's client), whose port is not known.
  if (exchange_->client_.client_port == 0 || !exchange_->request_client_ip_.empty()) {
    return {};
  }
  char* end = std::to_chars(remote_port_.data(), remote_port_.data() + remote_port_.size(),
                            exchange_->client_.client_port)
                  .ptr;
  return std::string_view(remote_port_.data(), static_cast<size_t>(end - remote_port_.data()));
}

bool Exchange::TakeModifications() {
  modification::State& state = worker_->router().modification_state();
  // Swapped, not copied: the router's state gets our old storage to reuse.
  response_edits_.swap(state.response_edits);
  if (!state.headers_changed) {
    return true;
  }
  mod_fields_.swap(state.headers);
  // SAP's pseudo header only chooses the system: it is never sent on.
  std::erase_if(mod_fields_, [](const modification::Header& field) {
    return http::EqualsIgnoreCase(field.first, "~webdisp_target_sid");
  });
  size_t bytes = 0;
  for (const auto& [name, value] : mod_fields_) {
    bytes += name.size() + value.size() + 4;
  }
  if (mod_fields_.size() > http::kMaxHeaders || bytes > 2 * worker_->options().max_header_bytes) {
    WarnRuleFailure("the rules made the request head too large to forward (more than " +
                    std::to_string(http::kMaxHeaders) + " fields or twice --max-header-size)");
    return false;
  }
  if (mod_head_ == nullptr) {
    mod_head_ = std::make_unique<http::RequestHead>();
  }
  http::RequestHead& head = *mod_head_;
  head.method = head_->method;
  head.target = head_->target;
  head.target_form = head_->target_form;
  head.version_minor = head_->version_minor;
  head.scheme = head_->scheme;
  head.authority = head_->authority;
  head.path_and_query = head_->path_and_query;
  head.header_count = 0;
  for (const auto& [name, value] : mod_fields_) {
    head.headers[head.header_count++] = http::Header{name, value};
    if (http::EqualsIgnoreCase(name, "host")) {
      forward_host_ = value;  // a rule set Host: the server is sent that one
    }
  }
  forward_head_ = mod_head_.get();
  return true;
}

void Exchange::AnswerByRule() {
  auto& outcomes = worker_->metrics().modification_requests;
  switch (decision_.reason) {
    case routing::Reason::kRuleRedirect:
      outcomes[1]->Inc();
      scratch_.clear();
      AppendRedirectResponse(decision_.status, rule_location_, &scratch_);
      SendLocalAnswer(decision_.status, "", "redirected by a modification rule", false);
      return;
    case routing::Reason::kRuleForbidden:
      outcomes[2]->Inc();
      AnswerLocally(ErrorCode::kDenied, "access to this URL is not permitted", false);
      return;
    case routing::Reason::kRuleGone:
      outcomes[3]->Inc();
      AnswerLocally(ErrorCode::kGone, "this URL is no longer available", false);
      return;
    case routing::Reason::kUnknownSystem:
      outcomes[5]->Inc();
      AnswerLocally(ErrorCode::kNoServer,
                    "no UrlMapping serves the SAP system the modification rules chose",
                    false);
      return;
    default:
      break;
  }
  outcomes[4]->Inc();
  const std::string& error = worker_->router().modification_state().error;
  if (!error.empty()) {
    WarnRuleFailure(error);
  }
  AnswerLocally(ErrorCode::kRuleFailed, "the modification rules failed on this request", false);
}

void Exchange::WarnRuleFailure(std::string_view why) {
  // A rule that fails on some requests would log one line per request:
  // one line per worker per 10 s, with the count of the others.
  thread_local int64_t rule_warned_us = 0;
  thread_local uint64_t rule_failures = 0;
  const int64_t now_us = MonotonicUs();
  ++rule_failures;
  if (rule_warned_us != 0 && now_us - rule_warned_us < 10'000'000) {
    return;
  }
  ::kwd::Log(LogLevel::kWarn, "proxy", "modification rules failed on a request: answered 500",
      {{"error", std::string(why)},
       {"host", decision_.virtual_host != nullptr ? decision_.virtual_host->host : ""},
       {"failures", std::to_string(rule_failures)}});
  rule_warned_us = now_us;
  rule_failures = 0;
}

bool Exchange::EditResponseHead() {
  mod_response_fields_.clear();
  for (const http::Header& field : response_head_->fields()) {
    mod_response_fields_.emplace_back(field.name, field.value);
  }
  modification::ApplyResponseEdits(response_edits_, &mod_response_fields_);
  if (mod_response_fields_.size() > http::kMaxHeaders) {
    Abort(ErrorCode::kBadGateway, "the modification rules made too many response header fields");
    return false;
  }
  response_head_->header_count = 0;
  for (const auto& [name, value] : mod_response_fields_) {
    response_head_->headers[response_head_->header_count++] = http::Header{name, value};
  }
  return true;
}

void Exchange::Reject(ErrorCode code, std::string_view detail, const http::RequestHead* head) {
  finished_ = false;
  request_start_us_ = MonotonicUs();
  if (code != ErrorCode::kRequestTimeout) {
    worker_->metrics().bad_requests.Inc();
  }
  if (head != nullptr) {
    method_.assign(head->method);
    target_.assign(head->target);
    version_minor_ = head->version_minor;
    const http::Header* accept = head->Find("accept");
    wants_json_ = accept != nullptr && accept->value.find("application/json") != std::string::npos;
  }
  GenerateRequestId(&request_id_);
  AnswerLocally(code, detail);
}

void Exchange::ConnectUpstream() {
  const routing::ServerEntry* server = decision_.server;
  if (upstream_start_us_ == 0) {
    upstream_start_us_ = MonotonicUs();
  }
  upstream_readable_ = {};
  std::string_view tls_key;
  if (decision_.group != nullptr && decision_.group->reencrypt) {
    const auto& tls = decision_.group->tls;
    if (tls == nullptr || !tls->error().empty()) {
      OnTlsFailed("config", tls == nullptr ? "the proxy has no TLS settings for the group"
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
  int fd = worker_->ConnectToServer(endpoint, &err);
  if (fd < 0) {
    OnConnectFailed(err);
    return;
  }
  worker_->metrics().upstream_connects.Inc();
  upstream_ = new UpstreamConnection(worker_, fd, server->address, server->port);
  upstream_->owner = this;
  std::string detail;
  if (!tls_key.empty() && !StartUpstreamTls(decision_, upstream_, &detail)) {
    OnTlsFailed("config", detail);
    return;
  }
  phase_ = Phase::kConnecting;
  worker_->loop().Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, upstream_);
  ArmTimer(TimerKind::kConnect, worker_->options().connect_timeout_ms);
}

void Exchange::OnTlsFailed(std::string_view reason, std::string_view detail) {
  if (upstream_ != nullptr) {
    upstream_->Close();
    upstream_ = nullptr;
  }
  phase_ = Phase::kForward;
  Abort(ErrorCode::kBadGateway, CountUpstreamTlsFailure(*worker_, decision_, reason, detail));
}

void Exchange::OnUpstreamIo(uint32_t events) {
  upstream_readable_.Note(events);
  if (phase_ == Phase::kConnecting || phase_ == Phase::kReconnecting) {
    int err = upstream_->connecting ? net::SocketError(upstream_->fd) : 0;
    if (err != 0 || (upstream_->connecting && (events & EPOLLERR) != 0)) {
      if (phase_ == Phase::kReconnecting) {
        Abort(ErrorCode::kBadGateway, "the selected server is not reachable");
      } else {
        OnConnectFailed(err != 0 ? err : ECONNREFUSED);
      }
      sink_->OnExchangeProgress();
      return;
    }
    if (upstream_->connecting && (events & EPOLLOUT) == 0) {
      return;
    }
    upstream_->connecting = false;
    std::string_view reason;
    std::string detail;
    switch (StepUpstreamTls(*worker_, upstream_, &reason, &detail)) {
      case UpstreamHandshake::kWantIo:
        return;
      case UpstreamHandshake::kFailed:
        OnTlsFailed(reason, detail);
        sink_->OnExchangeProgress();
        return;
      case UpstreamHandshake::kDone:
        break;
    }
    if (phase_ == Phase::kReconnecting) {
      phase_ = Phase::kForward;
      ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
    } else {
      OnConnected();
    }
  }
  Pump();
  sink_->OnExchangeProgress();
}

void Exchange::OnConnected() {
  phase_ = Phase::kForward;
  // Uninitialised storage: the fields are written as they are added (most
  // requests add none), not 14 of them zeroed per request first. Header is
  // an implicit-lifetime aggregate: the storage holds them once written.
  constexpr size_t kExtra = 6 + kMaxForwardedChain;
  alignas(http::Header) std::byte extra_storage[sizeof(http::Header) * kExtra];
  const std::span<http::Header> extra(
      std::launder(reinterpret_cast<http::Header*>(extra_storage)), kExtra);
  size_t extra_count = 0;
  if (const http::Header* te = forward_head_->Find(http::FieldId::kTe);
      te != nullptr && http::HasToken(te->value, "trailers")) {
    // The client takes trailers (gRPC asks so; RFC 9113 8.2.2 allows HTTP/2
    // clients no other TE): the server is told, as some send trailers only
    // then. TE is hop-by-hop, so it is named in Connection (RFC 9110 10.1.4).
    extra[extra_count++] = {"TE", "trailers"};
    extra[extra_count++] = {"Connection", "TE"};
  }
  char key_size[16];
  http::ForwardRequestOptions options;
  options.client_ip = client_.client_ip;
  options.keep_forwarded_for = peer_trusted_;
  options.proto = https_ ? "https" : "http";
  options.tunnel_upgrade = info_.upgrade_websocket;
  options.request_id = request_id_;
  if (decision_.sap_client_protocol) {
    options.client_protocol = options.proto;  // as the client spoke (or a trusted proxy said)
  }
  if (decision_.sap_access_points) {
    options.access_points = worker_->options().access_points;
  }
  if (rewrite_target_) {
    options.target = upstream_target_;
  }
  if (info_.body == http::BodyKind::kChunked) {
    options.reframe_body = true;
    extra[extra_count++] = {"Transfer-Encoding", "chunked"};
  }
  if (const net::TlsInfo* tls = client_.tls; tls != nullptr) {
    char* end = std::to_chars(key_size, key_size + sizeof key_size, tls->cipher_bits).ptr;
    extra_count += AppendTlsHeaders(*tls, std::string_view(key_size, end),
                                    extra.subspan(extra_count));
  }
  options.extra_headers = std::span<const http::Header>(extra.data(), extra_count);
  IdleHeads::Take(ReceivedHeadBytes(*forward_head_), sent_head_);
  if (forward_host_.empty()) {
    http::SerializeRequestHead(*forward_head_, info_, options, sent_head_);
  } else {
    http::RequestInfo info = info_;
    info.host = forward_host_;
    http::SerializeRequestHead(*forward_head_, info, options, sent_head_);
  }
  head_unsent_ = sent_head_.size();  // written from sent_head_ itself: no copy
  upstream_out_.clear();
  upstream_sent_ = 0;
  CountServerRequest(*worker_, decision_);
  forwarded_ = true;
  ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
  if (!request_end_) {
    sink_->OnRequestBodyWanted();  // last: it may end the exchange
  }
}

void Exchange::OnConnectFailed(int error_number) {
  if (upstream_ != nullptr) {
    upstream_->Close();
    upstream_ = nullptr;
  }
  phase_ = Phase::kForward;
  if (net::IsLocalResourceError(error_number)) {
    worker_->WarnOutOfResources("connect to a server", error_number);
    AnswerLocally(ErrorCode::kNoServer,
                  "the proxy cannot open a connection now (out of file descriptors or ports)");
    return;
  }
  CountConnectFailure(*worker_, decision_, error_number);
  if (RetryElsewhere()) {
    return;
  }
  Abort(ErrorCode::kBadGateway, "the selected server is not reachable");
}

bool Exchange::RetryElsewhere() {
  // Only a request nobody is stuck to, that may safely be sent twice, of
  // which nothing was sent yet.
  if (retried_ || decision_.reason != routing::Reason::kBalance || !IsIdempotentMethod(method_) ||
      request_body_bytes_ != 0) {
    return false;
  }
  const routing::ServerEntry* failed = decision_.server;
  worker_->router().Complete(decision_);
  decided_ = false;
  Route();
  retried_ = true;
  if (decision_.server == nullptr || decision_.server == failed) {
    AnswerLocally(ErrorCode::kNoServer, "no server of the logon group is reachable", false);
    return true;
  }
  worker_->metrics().retries.Inc();
  ConnectUpstream();
  return true;
}

void Exchange::RetryOnFreshConnection() {
  const routing::ServerEntry* server = decision_.server;
  net::Endpoint endpoint;
  int err = 0;
  int fd = -1;
  if (net::MakeEndpoint(server->address, static_cast<uint16_t>(server->port), &endpoint)) {
    fd = worker_->ConnectToServer(endpoint, &err);
  }
  if (fd < 0) {
    Abort(ErrorCode::kBadGateway, "the selected server is not reachable");
    return;
  }
  worker_->metrics().upstream_connects.Inc();
  upstream_ = new UpstreamConnection(worker_, fd, server->address, server->port);
  upstream_->owner = this;
  std::string detail;
  if (decision_.group != nullptr && decision_.group->reencrypt &&
      !StartUpstreamTls(decision_, upstream_, &detail)) {
    OnTlsFailed("config", detail);
    return;
  }
  upstream_readable_ = {};
  head_unsent_ = sent_head_.size();
  upstream_out_.clear();
  upstream_sent_ = 0;
  upstream_eof_ = false;
  phase_ = Phase::kReconnecting;
  worker_->loop().Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, upstream_);
  ArmTimer(TimerKind::kConnect, worker_->options().connect_timeout_ms);
}

// ---- body flow ----

size_t Exchange::RequestBodyRoom() const {
  if (finished_ || request_end_ || phase_ != Phase::kForward) {
    return 0;
  }
  return request_body_.size() >= kHighWater ? 0 : kHighWater - request_body_.size();
}

void Exchange::PushRequestBody(std::string_view data) {
  if (finished_ || request_end_) {
    sink_->OnRequestBodyConsumed(data.size());  // dropped: the response is decided
    return;
  }
  if (info_.body == http::BodyKind::kContentLength &&
      request_body_bytes_ + request_body_.size() + data.size() > info_.content_length) {
    // More DATA than content-length said (nghttp2 checks this too).
    data = data.substr(0, info_.content_length - request_body_bytes_ - request_body_.size());
  }
  if (info_.body == http::BodyKind::kChunked &&
      request_body_bytes_ + request_body_.size() + data.size() >
          worker_->options().max_body_bytes) {
    // Length unknown (an HTTP/2 stream without content-length, sent
    // chunked): the limit an HTTP/1.1 chunked body has (413; the stream is
    // reset once the answer is out, or at once if the server answered).
    sink_->OnRequestBodyConsumed(data.size());
    worker_->metrics().bad_requests.Inc();
    Abort(ErrorCode::kBodyTooLarge, http::ParseErrorName(http::ParseError::kBodyTooLarge));
    return;
  }
  request_body_.Append(data);
}

void Exchange::EndRequestBody() {
  request_end_ = true;
}

void Exchange::FailRequestBody(ErrorCode code, std::string_view detail) {
  if (finished_) {
    return;
  }
  worker_->metrics().bad_requests.Inc();
  Abort(code, detail);
}

bool Exchange::Pump() {
  if (phase_ != Phase::kForward) {
    return false;
  }
  bool any = false;
  for (int round = 0; round < 10'000 && phase_ == Phase::kForward; ++round) {
    if (!Step(&any)) {
      break;
    }
  }
  if (phase_ == Phase::kForward && any && !tunnel_) {
    ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
  }
  return any;
}

void Exchange::NoteClientProgress() {
  if (phase_ == Phase::kForward && !tunnel_) {
    ArmTimer(TimerKind::kResponse, worker_->options().response_timeout_ms);
  }
}

bool Exchange::Step(bool* moved) {
  bool progressed = MoveRequestBody();
  size_t pending_up = UpstreamPending();
  if (!FlushUpstream()) {
    upstream_eof_ = true;
  }
  // Bytes sent are progress (for the timer), but worth another round only
  // when they made room for more request body: the response was read after.
  bool sent = UpstreamPending() != pending_up;
  progressed = MoveResponse() || progressed;
  *moved = *moved || progressed || sent;
  progressed = progressed || (sent && !request_done_);
  if (phase_ != Phase::kForward) {
    return false;
  }
  if (tunnel_ && request_done_ && !upstream_shut_ && upstream_ != nullptr &&
      UpstreamPending() == 0 && upstream_->transport->FlushQueued()) {
    // The client half-closed the tunnel: its FIN follows its last bytes to
    // the server, whose answer still flows back until it closes (as HAProxy
    // keeps a tunnel half-open); the client's idle timeout bounds the wait.
    upstream_shut_ = true;
    upstream_->transport->Shutdown();
    ::shutdown(upstream_->fd, SHUT_WR);
  }
  if (response_done_) {
    Finish();
    return false;
  }
  return progressed;
}

bool Exchange::MoveRequestBody() {
  bool progressed = false;
  if (request_done_ || UpstreamPending() >= kHighWater) {
    return false;
  }
  if (!request_body_.empty()) {
    std::string_view data = request_body_.view();
    if (info_.body == http::BodyKind::kChunked) {
      AppendChunk(data, upstream_out_);
    } else {
      upstream_out_.append(data);
    }
    request_body_bytes_ += data.size();
    size_t n = data.size();
    request_body_.Consume(n);
    sink_->OnRequestBodyConsumed(n);
    progressed = true;
  }
  if (request_end_ && request_body_.empty()) {
    if (info_.body == http::BodyKind::kChunked && !request_trailers_.empty()) {
      upstream_out_.append("0\r\n");
      upstream_out_.append(request_trailers_);
      upstream_out_.append("\r\n");
    } else if (info_.body == http::BodyKind::kChunked) {
      upstream_out_.append(kLastChunk);
    }
    request_done_ = true;
    progressed = true;
  }
  return progressed;
}

bool Exchange::FlushUpstream() {
  if (upstream_ == nullptr) {
    return true;
  }
  while (head_unsent_ > 0) {
    ssize_t n = upstream_->transport->Write(sent_head_.data() + sent_head_.size() - head_unsent_,
                                            head_unsent_);
    if (n > 0) {
      head_unsent_ -= static_cast<size_t>(n);
      continue;
    }
    return n == net::Transport::kWouldBlock;
  }
  while (upstream_sent_ < upstream_out_.size()) {
    ssize_t n = upstream_->transport->Write(upstream_out_.data() + upstream_sent_,
                                            upstream_out_.size() - upstream_sent_);
    if (n > 0) {
      upstream_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n == net::Transport::kWouldBlock) {
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

bool Exchange::MoveResponse() {
  bool progressed = false;
  while (!response_done_ && phase_ == Phase::kForward) {
    if (!response_head_done_) {
      if (!upstream_in_.empty()) {
        if (response_head_ == nullptr) {
          response_head_ = PerThreadFreeList<http::ResponseHead>::Take();
        }
        http::ParseResult r = response_parser_.Parse(upstream_in_.view(), response_head_.get());
        if (r.complete()) {
          size_t consumed = r.consumed;
          if (!HandleResponseHead(consumed)) {
            return true;
          }
          upstream_in_.Consume(consumed);
          progressed = true;
          continue;
        }
        if (r.failed()) {
          Abort(ErrorCode::kBadGateway, "the server sent a malformed response");
          return true;
        }
      }
    } else if (!upstream_in_.empty()) {
      if (sink_->ResponseBacklog() >= kHighWater) {
        break;
      }
      std::string_view data = upstream_in_.view();
      switch (response_info_.body) {
        case http::BodyKind::kContentLength: {
          size_t take = static_cast<size_t>(std::min<uint64_t>(data.size(), response_remaining_));
          sink_->OnResponseBody(data.substr(0, take));
          upstream_in_.Consume(take);
          response_remaining_ -= take;
          response_body_bytes_ += take;
          response_done_ = response_remaining_ == 0;
          break;
        }
        case http::BodyKind::kChunked: {
          http::ChunkedResult r = response_chunked_.Decode(data);
          if (r.status == http::ChunkedStatus::kError) {
            Abort(ErrorCode::kBadGateway, "the server sent a malformed chunked body");
            return true;
          }
          if (r.status == http::ChunkedStatus::kData) {
            response_body_bytes_ += r.data.size();
            sink_->OnResponseBody(r.data);
          } else if (r.status == http::ChunkedStatus::kDone) {
            response_done_ = true;
          }
          upstream_in_.Consume(r.consumed);
          break;
        }
        default:  // until close, or a tunnel
          sink_->OnResponseBody(data);
          response_body_bytes_ += data.size();
          upstream_in_.Consume(data.size());
          break;
      }
      progressed = true;
      continue;
    }
    if (sink_->ResponseBacklog() >= kHighWater) {
      break;
    }
    if (upstream_eof_) {
      if (response_head_done_ && (response_info_.body == http::BodyKind::kUntilClose || tunnel_)) {
        response_done_ = true;
        return true;
      }
      if (!response_started_ && upstream_reused_ && !retried_reuse_ &&
          info_.body == http::BodyKind::kNone && IsIdempotentMethod(method_)) {
        // A pooled connection the server had closed: send again on a new one.
        retried_reuse_ = true;
        ReleaseUpstream(false);
        upstream_reused_ = false;
        RetryOnFreshConnection();
        return true;
      }
      Abort(ErrorCode::kBadGateway, response_head_done_
                                        ? "the server closed the connection mid-body"
                                        : "the server closed the connection without a response");
      return true;
    }
    ssize_t n = ReadInto(*upstream_->transport, &upstream_readable_, upstream_in_,
                         kBodyBufferBytes + worker_->options().max_header_bytes);
    if (n > 0) {
      response_started_ = true;
      progressed = true;
      continue;
    }
    if (n == 0 || n == kReadError) {
      upstream_eof_ = true;
      continue;
    }
    if (n == kReadBufferFull) {
      Abort(ErrorCode::kBadGateway, "the server's response head is too large");
      return true;
    }
    break;
  }
  return progressed;
}

bool Exchange::HandleResponseHead(size_t head_bytes) {
  const http::ResponseHead& head = *response_head_;
  http::FramingResult framing = http::AnalyzeResponse(head, method_, &response_info_);
  if (!framing.ok()) {
    Abort(ErrorCode::kBadGateway, "the server sent a response with invalid framing");
    return false;
  }
  if (response_info_.interim) {
    // 1xx (100 Continue, 103 Early Hints): passed on, the final response
    // follows.
    if (!interim_.Take(head_bytes, worker_->options().max_header_bytes)) {
      Abort(ErrorCode::kBadGateway, kTooManyInterimResponses);
      return false;
    }
    sink_->OnInterimHead(head);
    response_parser_.Reset();
    return true;
  }
  if (response_info_.body == http::BodyKind::kTunnel && !info_.upgrade_websocket) {
    // Only an upgrade the client asked for (and was passed on) may turn the
    // connection into a tunnel: else its next requests would reach the
    // server unrouted, past the permissions.
    Abort(ErrorCode::kBadGateway,
          "the server switched protocols though the request asked for no upgrade");
    return false;
  }
  if (response_info_.transfer_coded && version_minor_ == 0 &&
      response_info_.body != http::BodyKind::kNone) {
    // HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1), and without it the
    // client would take the coded bytes ("gzip") for the content.
    Abort(ErrorCode::kBadGateway,
          "the server used a transfer coding an HTTP/1.0 client cannot take");
    return false;
  }
  response_status_ = head.status_code;
  bool set_affinity = decision_.set_affinity_cookie;
  for (const auto& field : head.fields()) {
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
  scratch_.clear();
  if (set_affinity) {
    scratch_ = worker_->router().AffinityCookieHeader(decision_, https_);
  }
  std::array<http::Header, 2> added;
  size_t added_count = 0;
  if (!scratch_.empty()) {
    added[added_count++] = {"Set-Cookie", scratch_};
  }
  // The mapping's HSTS, unless the server sent its own (kept, not doubled).
  if (std::string_view hsts = HstsValue();
      !hsts.empty() && head.Find("strict-transport-security") == nullptr) {
    added[added_count++] = {"Strict-Transport-Security", hsts};
  }
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
      break;
    case http::BodyKind::kTunnel:
      // The request side opens again: the client's bytes go to the server
      // as they come, until either side ends. No response timeout: the
      // client's connection times an idle tunnel out.
      tunnel_ = true;
      request_end_ = false;
      request_done_ = false;
      worker_->loop().Cancel(&timer_);
      break;
    default:
      break;
  }
  if (!response_edits_.empty() && !EditResponseHead()) {
    return false;
  }
  response_head_done_ = true;
  sink_->OnResponseHead(head, response_info_,
                        std::span<const http::Header>(added.data(), added_count), response_done_);
  return true;
}

void Exchange::Finish() {
  // Reused only when nothing follows the response: neither in our buffer nor
  // in the socket (a read that filled the buffer did not prove it drained,
  // and bytes already there raise no new edge for the idle pool to see).
  bool reusable = response_info_.keep_alive && request_done_ && !upstream_eof_ && !tunnel_ &&
                  response_info_.body != http::BodyKind::kUntilClose && upstream_in_.empty() &&
                  head_unsent_ == 0 && upstream_sent_ == upstream_out_.size() &&
                  upstream_ != nullptr;
  if (reusable && upstream_readable_.readable && upstream_->transport->tls() != nullptr) {
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
  Conclude(response_status_, routing::ReasonName(decision_.reason));
  sink_->OnResponseEnd(response_chunked_.trailers());
}

void Exchange::Conclude(int status, std::string_view reason) {
  Log(status, reason);
  Settle();
}

void Exchange::Settle() {
  if (decided_) {
    worker_->router().Complete(decision_);
    decided_ = false;
  }
  finished_ = true;
  phase_ = Phase::kDone;
  worker_->loop().Cancel(&timer_);
}

void Exchange::Abort(ErrorCode code, std::string_view detail) {
  if (!response_head_done_) {
    AnswerLocally(code, detail);
    return;
  }
  std::string reason(routing::ReasonName(decision_.reason));
  reason.append(code == ErrorCode::kGatewayTimeout ? ",aborted-timeout"
                : code == ErrorCode::kBadGateway   ? ",aborted-upstream"
                                                   : ",aborted-client");
  ReleaseUpstream(false);
  Conclude(response_status_, reason);
  sink_->OnExchangeAborted();
}

void Exchange::AnswerLocally(ErrorCode code, std::string_view detail, bool must_close) {
  // The page (error_page.h) as HTTP/1.1 bytes, its head also parsed into
  // fields for HTTP/2.
  scratch_.clear();
  AppendErrorResponse(code, detail, wants_json_, false, method_ == "HEAD", &scratch_);
  worker_->metrics().local_responses[static_cast<size_t>(code)]->Inc();
  SendLocalAnswer(ErrorInfoFor(code).status, ErrorInfoFor(code).sap_code, detail, must_close);
}

void Exchange::SendLocalAnswer(int status, std::string_view sap_code, std::string_view detail,
                               bool must_close) {
  ReleaseUpstream(false);
  response_status_ = status;
  std::string_view reason =
      decided_ ? routing::ReasonName(decision_.reason) : std::string_view("bad-request");
  worker_->stats().RecordLocalAnswer(decided_ ? &decision_ : nullptr, response_status_, sap_code,
                                     reason, detail, UnixNowMs());
  DeliverLocalAnswer(reason, must_close);
}

void Exchange::AnswerSecureRedirect() {
  scratch_.clear();
  AppendRedirectResponse(decision_.status, decision_.location, &scratch_);
  ReleaseUpstream(false);
  response_status_ = decision_.status;
  // The request's body, if any, is not read: HTTP/1.1 closes after the answer.
  DeliverLocalAnswer(routing::ReasonName(decision_.reason), false);
}

void Exchange::CountSecureRedirect() {
  const auto outcome = decision_.secure_redirect;
  worker_->metrics().secure_redirects[static_cast<size_t>(outcome)]->Inc();
  if (outcome == routing::SecureRedirect::kNoHttpsPort) {
    // A configuration problem of this proxy, the same for every such
    // request: said once, counted always.
    static std::atomic<bool> said{false};
    if (!said.exchange(true, std::memory_order_relaxed)) {
      kwd::Log(LogLevel::kWarn, "proxy",
               "a UrlMapping asks to redirect secure-only URLs to https, but this proxy has no "
               "https port (--tls-listen, or --public-ports https=PORT behind a TLS-terminating "
               "load balancer): such requests are answered 403 "
               "(kwd_proxy_secure_redirects_total{outcome=\"no-https-port\"})",
               {{"host", decision_.virtual_host == nullptr        ? std::string_view()
                         : decision_.virtual_host->host.empty() ? std::string_view("*")
                                                                : decision_.virtual_host->host}});
    }
  }
}

std::string_view Exchange::HstsValue() const {
  return https_ && decided_ ? decision_.hsts : std::string_view();
}

void Exchange::DeliverLocalAnswer(std::string_view reason, bool must_close) {
  if (std::string_view hsts = HstsValue(); !hsts.empty()) {
    // Before the empty line that ends the head.
    size_t head_end = scratch_.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      std::string field = "Strict-Transport-Security: ";
      field.append(hsts).append("\r\n");
      scratch_.insert(head_end + 2, field);
    }
  }
  if (response_head_ == nullptr) {
    response_head_ = PerThreadFreeList<http::ResponseHead>::Take();
  }
  http::ResponseParser parser;
  http::ParseResult r = parser.Parse(scratch_, response_head_.get());
  size_t head_bytes = r.complete() ? r.consumed : scratch_.size();
  if (!r.complete()) {
    response_head_->header_count = 0;
  }
  std::string_view body = std::string_view(scratch_).substr(head_bytes);
  response_body_bytes_ = body.size();
  response_done_ = true;
  response_head_done_ = true;
  Conclude(response_status_, reason);
  sink_->OnLocalAnswer(*response_head_, std::string_view(scratch_).substr(0, head_bytes), body,
                       must_close);
}

void Exchange::Cancel(std::string_view cause) {
  if (finished_) {
    return;
  }
  std::string reason(decided_ ? routing::ReasonName(decision_.reason) : "bad-request");
  reason.append(",").append(cause);
  ReleaseUpstream(false);
  Conclude(response_head_done_ ? response_status_ : 0, reason);
}

void Exchange::Discard() {
  if (finished_) {
    return;
  }
  ReleaseUpstream(false);
  Settle();
}

void Exchange::Log(int status, std::string_view reason) {
  TransactionRecord record;
  record.client_ip =
      request_client_ip_.empty() ? client_.client_ip : std::string_view(request_client_ip_);
  record.method = method_;
  record.target = target_;
  record.version_minor = version_minor_;
  record.protocol = client_.protocol;
  record.status = status;
  record.bytes_sent = response_body_bytes_;
  record.bytes_received = request_body_bytes_;
  record.decision = decided_ ? &decision_ : nullptr;
  record.server_answered = response_head_done_ && upstream_start_us_ != 0 && response_started_;
  record.request_start_us = request_start_us_;
  record.upstream_start_us = upstream_start_us_;
  record.reason = reason;
  record.request_id = request_id_;
  record.trace_id = trace_id_;
  record.tls = client_.tls;
  CountAndLog(*worker_, record);
}

void Exchange::ReleaseUpstream(bool reusable) {
  if (upstream_ == nullptr) {
    return;
  }
  if (reusable) {
    upstream_->owner = nullptr;
    worker_->ReleaseIdle(upstream_);
  } else {
    // Request bytes (a tunnel's client data) the server never got: the
    // reset tells it the stream was cut short.
    upstream_->Close(UpstreamPending() + request_body_.size());
  }
  upstream_ = nullptr;
  upstream_in_.Clear();
  upstream_in_.Release();  // back to the thread's blocks while the client takes the response
  upstream_out_.clear();
  upstream_sent_ = 0;
  head_unsent_ = 0;
}

void Exchange::ArmTimer(TimerKind kind, int64_t delay_ms) {
  net::EventLoop& loop = worker_->loop();
  if (timer_kind_ == kind && timer_.armed() && timer_.deadline_ms() == loop.now_ms() + delay_ms) {
    return;  // armed alike in this turn of the loop already
  }
  timer_kind_ = kind;
  loop.Schedule(&timer_, delay_ms);
}

void Exchange::OnTimer() {
  if (finished_) {
    return;
  }
  ProxyMetrics& metrics = worker_->metrics();
  switch (timer_kind_) {
    case TimerKind::kNone:
      return;
    case TimerKind::kConnect:
      if (phase_ != Phase::kConnecting && phase_ != Phase::kReconnecting) {
        return;
      }
      metrics.timeouts_upstream.Inc();
      if (phase_ == Phase::kReconnecting) {
        Abort(ErrorCode::kGatewayTimeout, "the selected server did not accept in time");
      } else {
        OnConnectFailed(ETIMEDOUT);
      }
      break;
    case TimerKind::kResponse:
      metrics.timeouts_upstream.Inc();
      kwd::Log(LogLevel::kWarn, "proxy", "no progress on a forwarded request: timing out",
               {{"target", target_},
                {"server", decision_.server != nullptr ? std::string_view(decision_.server->name)
                                                       : std::string_view("-")},
                {"request_done", request_done_ ? "true" : "false"},
                {"request_buffered", std::to_string(request_body_.size())},
                {"upstream_pending", std::to_string(UpstreamPending())},
                {"response_started", response_started_ ? "true" : "false"},
                {"client_pending", std::to_string(sink_->ResponseBacklog())}});
      Abort(ErrorCode::kGatewayTimeout, "the server did not answer in time");
      break;
  }
  sink_->OnExchangeProgress();
}

}  // namespace kwd::proxy
