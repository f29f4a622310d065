#pragma once

// The request-handling core under the client codecs: one request routed by
// the Router and forwarded over the HTTP/1.1 upstream pools (connect, reuse,
// retry, re-encryption), its response head checked and rewritten, error
// pages, counting and the access log. An HTTP/2 stream (http2_connection.h)
// drives one Exchange through ExchangeSink; the HTTP/1.1 ClientConnection
// shares the pieces below (upstream TLS, readiness, counting and logging).
//
// Bodies stream through bounded buffers both ways: the request body is taken
// only as fast as the upstream takes it (RequestBodyRoom), the response body
// is read from the upstream only while the client drains it.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dataplane/http/chunked.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"
#include "dataplane/net/event_loop.h"
#include "dataplane/net/transport.h"
#include "dataplane/proxy/buffer.h"
#include "dataplane/proxy/error_page.h"
#include "dataplane/proxy/worker.h"
#include "dataplane/routing/router.h"

namespace kwd::proxy {

// Edge-triggered readiness of one socket, cached between events. A FIN that
// arrives with data raises no edge of its own after the data is read, so the
// peer's close is remembered from the event that reported it.
struct Readiness {
  bool readable = false;
  bool peer_closed = false;  // EPOLLRDHUP, EPOLLHUP or EPOLLERR was reported
  void Note(uint32_t events);
};

// ReadInto's results besides a positive byte count (0 is EOF).
inline constexpr ssize_t kReadWouldBlock = -1;
inline constexpr ssize_t kReadError = -2;
inline constexpr ssize_t kReadBufferFull = -3;
// Reads once from `transport` into `buffer` (grown up to `max_capacity`).
ssize_t ReadInto(net::Transport& transport, Readiness* readiness, Buffer& buffer,
                 size_t max_capacity);

// What one finished (or aborted) transaction logs and counts.
struct TransactionRecord {
  std::string_view client_ip;
  std::string_view method;
  std::string_view target;
  int version_minor = 1;
  std::string_view protocol;  // "" : HTTP/1.x by version_minor
  int status = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  const routing::Decision* decision = nullptr;  // null: not routed
  bool server_answered = false;                 // the response head came from the server
  int64_t request_start_us = 0;
  int64_t upstream_start_us = 0;
  std::string_view reason;
  std::string_view request_id;
  std::string_view trace_id;
  const net::TlsInfo* tls = nullptr;
};
// kwd_proxy_requests_total and the duration of the request's group, the
// admin page's per-server counts, and the access-log line.
void CountAndLog(Worker& worker, const TransactionRecord& record);

// A routed request goes to its server: kwd_proxy_server_requests_total, and
// the sticky-routing counters.
void CountRouted(Worker& worker, const routing::Decision& decision);
void CountServerRequest(Worker& worker, const routing::Decision& decision);
// A connect to the decision's server failed: counted, and the server marked
// down (passive health) until its checks succeed again.
void CountConnectFailure(Worker& worker, const routing::Decision& decision, int error_number);

// The SSL_CIPHER_* and SSL_CLIENT_CERT(_CHAIN_n) fields SAP's ICM reads from
// a TLS-terminating Web Dispatcher. `key_size` must outlive the fields.
inline constexpr size_t kMaxForwardedChain = 8;
size_t AppendTlsHeaders(const net::TlsInfo& tls, std::string_view key_size,
                        std::span<http::Header> out);

// Re-encryption: puts a TLS transport on `upstream` for the decision's group.
// False with `*detail` when the group's TLS settings are unusable.
bool StartUpstreamTls(const routing::Decision& decision, UpstreamConnection* upstream,
                      std::string* detail);
enum class UpstreamHandshake { kDone, kWantIo, kFailed };
// Advances the upstream TLS handshake; on kFailed `*reason` is "verify" or
// "handshake" and `*detail` says why.
UpstreamHandshake StepUpstreamTls(Worker& worker, UpstreamConnection* upstream,
                                  std::string_view* reason, std::string* detail);
// Counts and logs a failed TLS setup to a server (the request gets 502);
// returns the text for the client.
std::string_view CountUpstreamTlsFailure(Worker& worker, const routing::Decision& decision,
                                         std::string_view reason, std::string_view detail);

bool IsIdempotentMethod(std::string_view method);

// A server's interim (1xx) responses before its final one, each passed on to
// the client: at most kMaxResponses of them, their heads together at most
// --max-header-size bytes (one head's limit). Beyond that the request is
// answered 502, so a server cannot keep a request (and the client) busy with
// an endless series of them. Go's HTTP client bounds them alike.
struct InterimBudget {
  static constexpr int kMaxResponses = 16;
  int responses = 0;
  size_t bytes = 0;
  // Counts one interim head of `head_bytes`: false once over the budget.
  bool Take(size_t head_bytes, size_t max_bytes) {
    ++responses;
    bytes += head_bytes;
    return responses <= kMaxResponses && bytes <= max_bytes;
  }
};
inline constexpr std::string_view kTooManyInterimResponses =
    "the server sent too many interim (1xx) responses";

// The downstream side of an Exchange (an HTTP/2 stream).
class ExchangeSink {
 public:
  // The response head: status and the server's fields, of which the sink
  // drops the hop-by-hop ones (http::IsHopByHop), and `set_cookie`, when not
  // empty, an affinity cookie to add. `end`: no body follows. The views are
  // valid during the call.
  virtual void OnResponseHead(int status, std::span<const http::Header> fields,
                              std::string_view set_cookie, bool end) = 0;
  // An interim (1xx) response from the server, e.g. 100 Continue.
  virtual void OnInterimHead(int status) = 0;
  // Response body bytes (or its end) are ready: ReadResponseBody.
  virtual void OnResponseBodyReady() = 0;
  // `bytes` of request body left for the server: the client may send more.
  virtual void OnRequestBodyConsumed(size_t bytes) = 0;
  // The response cannot be completed after its head went out: reset the
  // stream.
  virtual void OnExchangeAborted() = 0;
  // Something changed outside the sink's own calls (upstream I/O, a timer):
  // the codec should send what is pending. Called last: the exchange may be
  // deleted by it.
  virtual void OnExchangeProgress() = 0;

 protected:
  ~ExchangeSink() = default;
};

// Who the client is, as the connection knows it.
struct ClientContext {
  std::string_view client_ip;  // the peer (or its PROXY header's address)
  const net::TlsInfo* tls = nullptr;
  std::string_view protocol;  // for the access log: "HTTP/2.0"
};

class Exchange final : public UpstreamOwner {
 public:
  Exchange(Worker* worker, ExchangeSink* sink, ClientContext client);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Routes the request and starts forwarding it (or answers it at once).
  // `head` and what it views must stay valid while the exchange lives;
  // `info` is the head's framing (body kChunked: length unknown, the body
  // is sent chunked).
  void Start(const http::RequestHead* head, const http::RequestInfo& info);
  // Answers without routing (a malformed request).
  void Reject(ErrorCode code, std::string_view detail);

  // Request body: room for more bytes now, taking bytes, and its end.
  size_t RequestBodyRoom() const;
  void PushRequestBody(std::string_view data);
  void EndRequestBody();
  // Trailer fields ("name: value\r\n" lines, already filtered) for the last
  // chunk of a request body forwarded chunked; dropped when it is forwarded
  // with a Content-Length (no place for them).
  void SetRequestTrailers(std::string_view lines) { request_trailers_.assign(lines); }

  // Up to `max` response body bytes into `out`; `*end` once all were read.
  size_t ReadResponseBody(char* out, size_t max, bool* end);
  // The chunked response's trailer lines (unfiltered, see
  // http::ForEachPassableTrailer), complete once ReadResponseBody ended.
  std::string_view response_trailers() const { return response_chunked_.trailers(); }
  // Moves bytes both ways as far as the buffers allow.
  void Pump();
  // The client went away or reset the stream.
  void Cancel(std::string_view cause);
  // Whether the request went to a server (its head was handed to an
  // upstream connection).
  bool forwarded() const { return forwarded_; }
  // Like Cancel, but neither logged nor counted as a request: for a stream
  // that ended before it was forwarded, which the codec counts and
  // summarises instead (rapid reset would flood the access log).
  void Discard();

  void OnUpstreamIo(uint32_t events) override;

  bool finished() const { return finished_; }
  int status() const { return response_status_; }

 private:
  enum class Phase { kIdle, kConnecting, kReconnecting, kForward, kDone };
  enum class TimerKind { kNone, kConnect, kResponse };

  void ConnectUpstream();
  void OnConnected();
  void OnConnectFailed(int error_number);
  bool RetryElsewhere();
  void RetryOnFreshConnection();
  void OnTlsFailed(std::string_view reason, std::string_view detail);
  bool Step();
  bool MoveRequestBody();
  bool MoveResponse();
  bool HandleResponseHead(size_t head_bytes);
  void Finish();
  void Abort(ErrorCode code, std::string_view detail);
  void AnswerLocally(ErrorCode code, std::string_view detail);
  void Log(int status, std::string_view reason);
  void ReleaseUpstream(bool reusable);
  bool FlushUpstream();
  size_t UpstreamPending() const { return upstream_out_.size() - upstream_sent_; }
  void ArmTimer(TimerKind kind, int64_t delay_ms);
  void OnTimer();
  void Route();

  Worker* worker_;
  ExchangeSink* sink_;
  ClientContext client_;
  Phase phase_ = Phase::kIdle;
  bool finished_ = false;  // logged and counted; the upstream is released

  const http::RequestHead* head_ = nullptr;
  http::RequestInfo info_;
  std::string method_;
  std::string target_;
  std::string request_client_ip_;
  std::string request_id_;
  std::string trace_id_;
  bool https_ = false;
  bool peer_trusted_ = false;
  bool wants_json_ = false;
  int64_t request_start_us_ = 0;
  int64_t upstream_start_us_ = 0;
  std::array<std::string_view, 16> cookies_{};
  routing::Decision decision_;
  bool decided_ = false;
  bool forwarded_ = false;
  std::string upstream_target_;
  bool rewrite_target_ = false;
  bool retried_ = false;
  bool retried_reuse_ = false;

  // Request body: raw bytes from the client until the upstream takes them.
  Buffer request_body_;
  bool request_end_ = false;   // the client's body ended
  bool request_done_ = false;  // ... and all of it is queued for the server
  std::string request_trailers_;
  uint64_t request_body_bytes_ = 0;

  UpstreamConnection* upstream_ = nullptr;
  Readiness upstream_readable_;
  bool upstream_reused_ = false;
  bool upstream_eof_ = false;
  std::string upstream_out_;
  size_t upstream_sent_ = 0;
  std::string sent_head_;
  Buffer upstream_in_;
  http::ResponseParser response_parser_;
  http::ResponseHead response_head_;
  http::ResponseInfo response_info_;
  InterimBudget interim_;
  bool response_head_done_ = false;  // the head went to the sink
  bool response_started_ = false;
  bool response_done_ = false;  // all of the response is in body_
  uint64_t response_remaining_ = 0;
  http::ChunkedDecoder response_chunked_;
  int response_status_ = 0;
  uint64_t response_body_bytes_ = 0;
  Buffer body_;  // response body for the client
  std::string scratch_;

  TimerKind timer_kind_ = TimerKind::kNone;
  net::Timer timer_;
};

}  // namespace kwd::proxy
