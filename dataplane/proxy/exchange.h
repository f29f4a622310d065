#pragma once

// The request-handling core under the client codecs: one request routed by
// the Router and forwarded over the HTTP/1.1 upstream pools (connect, reuse,
// retry, re-encryption), its response head checked and rewritten, error
// pages, counting and the access log. Both client codecs drive it through
// ExchangeSink: an HTTP/2 stream (http2_connection.h) owns one Exchange, an
// HTTP/1.1 ClientConnection keeps one and recycles it per request.
//
// Bodies stream through bounded buffers both ways: the request body is taken
// only as fast as the upstream takes it (RequestBodyRoom), the response body
// is read from the upstream only while the client drains it.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/modification/program.h"
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

// The downstream side of an Exchange: the client codec (an HTTP/2 stream,
// or the HTTP/1.1 ClientConnection) that writes the response to the client
// in its protocol and feeds the request body with PushRequestBody.
class ExchangeSink {
 public:
  // The server's response head: `head` with its fields, of which the sink
  // drops the hop-by-hop ones, `info` its framing (the body the exchange
  // passes on decoded: kChunked bodies come without the chunking), and
  // `added`, fields the proxy adds after the server's (an affinity
  // Set-Cookie, Strict-Transport-Security). `end`: no body follows. The
  // views are valid during the call.
  virtual void OnResponseHead(const http::ResponseHead& head, const http::ResponseInfo& info,
                              std::span<const http::Header> added, bool end) = 0;
  // An interim (1xx) response from the server, e.g. 100 Continue.
  virtual void OnInterimHead(const http::ResponseHead& head) = 0;
  // The proxy answers itself (error_page.h): `page_head` is the HTTP/1.1
  // head of the page without a Connection field (ends with the empty line),
  // `head` the same parsed, `body` the page (empty for HEAD). `must_close`:
  // the request's bytes may not all have been read or the failure concerns
  // the connection, so an HTTP/1.1 connection must end after the answer.
  virtual void OnLocalAnswer(const http::ResponseHead& head, std::string_view page_head,
                             std::string_view body, bool must_close) = 0;
  // Response body bytes (decoded), and its end with the chunked response's
  // trailer lines (unfiltered, see http::ForEachPassableTrailer; usually
  // empty).
  virtual void OnResponseBody(std::string_view data) = 0;
  virtual void OnResponseEnd(std::string_view trailers) = 0;
  // Response bytes the sink holds that the client has not taken: the
  // upstream is not read while they reach the high-water mark.
  virtual size_t ResponseBacklog() const = 0;
  // `bytes` of request body left for the server: the client may send more.
  virtual void OnRequestBodyConsumed(size_t bytes) = 0;
  // The head is on its way to the server and RequestBodyRoom opened: body
  // bytes the client already sent may be pushed now, before anything is
  // written (a body found malformed then sends nothing).
  virtual void OnRequestBodyWanted() {}
  // The response cannot be completed after its head went out (logged and
  // counted already): reset the stream or the connection.
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
  std::string_view protocol;  // for the access log: "HTTP/2.0"; "": HTTP/1.x
  uint16_t client_port = 0;   // the peer's port (or its PROXY header's); 0: unknown
  int fd = -1;                // the client connection's socket (%{SERVER_ADDR})
};

class Exchange final : public UpstreamOwner {
 public:
  Exchange(Worker* worker, ExchangeSink* sink, ClientContext client);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Made ready for the next request of a connection (an HTTP/1.1 one keeps
  // one exchange): only when finished() or not started. Nothing is in
  // flight (finished()) until Start or Reject. Keeps its storage; `client`
  // may have changed (a TLS handshake finished).
  void Recycle(ClientContext client);
  // Gives back buffers and the response head while the connection idles.
  void ReleaseIdleMemory();

  // Routes the request and starts forwarding it (or answers it at once).
  // `head` and what it views must stay valid while the exchange lives;
  // `info` is the head's framing (body kChunked: length unknown, the body
  // is sent chunked).
  void Start(const http::RequestHead* head, const http::RequestInfo& info);
  // Answers without routing (a malformed request; kRequestTimeout: one that
  // did not arrive in time). `head`, when given, names the request in the
  // log and chooses the page's format.
  void Reject(ErrorCode code, std::string_view detail, const http::RequestHead* head = nullptr);

  // Request body: room for more bytes now (none before the head is on its
  // way to the server), taking bytes, and its end. After a 101 to a
  // WebSocket upgrade the "body" is the client's side of the tunnel.
  size_t RequestBodyRoom() const;
  void PushRequestBody(std::string_view data);
  void EndRequestBody();
  // The client's request body was malformed: answered, or the response is
  // cut short if it began.
  void FailRequestBody(ErrorCode code, std::string_view detail);
  // Trailer fields ("name: value\r\n" lines, already filtered) for the last
  // chunk of a request body forwarded chunked; dropped when it is forwarded
  // with a Content-Length (no place for them).
  void SetRequestTrailers(std::string_view lines) { request_trailers_.assign(lines); }

  // Moves bytes both ways as far as the buffers allow; true if any moved.
  bool Pump();
  // The client took response bytes the exchange could not see (a slow
  // reader draining the sink's backlog): not a stalled response.
  void NoteClientProgress();
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
  // Nothing in flight, no upstream, no timer: the exchange may serve
  // another connection of the worker (ClientConnection's free list), whose
  // sink it then reports to.
  bool reusable() const { return finished_ && upstream_ == nullptr && !timer_.armed(); }
  void set_sink(ExchangeSink* sink) { sink_ = sink; }
  // Waiting for a connection to the server (the client need not be read).
  bool connecting() const { return phase_ == Phase::kConnecting || phase_ == Phase::kReconnecting; }
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
  // One round of Pump; `*moved` is set when bytes moved. False: no further
  // round would move more.
  bool Step(bool* moved);
  bool MoveRequestBody();
  bool MoveResponse();
  bool HandleResponseHead(size_t head_bytes);
  void Finish();
  // Logs and counts the transaction and ends it (finished()).
  void Conclude(int status, std::string_view reason);
  // The end without a log line: the decision completed, the timer stopped.
  void Settle();
  void Abort(ErrorCode code, std::string_view detail);
  // `must_close`: see ExchangeSink::OnLocalAnswer.
  void AnswerLocally(ErrorCode code, std::string_view detail, bool must_close = true);
  // A secure-only URL over plain http: the redirect to https (or its
  // counting when the redirect could not be made).
  void AnswerSecureRedirect();
  void CountSecureRedirect();
  // The HTTP/1.1 response in scratch_ goes to the client: HSTS added when
  // it applies, logged as `reason`.
  void DeliverLocalAnswer(std::string_view reason, bool must_close);
  // The Strict-Transport-Security value for this request's responses: its
  // mapping's, over https only (RFC 6797 7.2); "" none.
  std::string_view HstsValue() const;
  void Log(int status, std::string_view reason);
  void ReleaseUpstream(bool reusable);
  bool FlushUpstream();
  size_t UpstreamPending() const {
    return head_unsent_ + upstream_out_.size() - upstream_sent_;
  }
  void ArmTimer(TimerKind kind, int64_t delay_ms);
  void OnTimer();
  void Route();
  // Takes what the modification rules made of the request (Decision::modified)
  // from the router: the request head to forward and the response edits.
  // False when the changed head cannot be sent (too many fields).
  bool TakeModifications();
  // A modification rule answered the request itself (redirect, 403, 410, 500).
  void AnswerByRule();
  // The rules' response header edits on the server's response head.
  bool EditResponseHead();
  // The proxy's own answer in scratch_ (an HTTP/1.1 response): sent.
  void SendLocalAnswer(int status, std::string_view sap_code, std::string_view detail,
                       bool must_close);
  // Logs why the rules failed on a request (at most once per 10 s per thread).
  void WarnRuleFailure(std::string_view why);

  // The request's fields for modification rules (routing::Request::headers).
  class RuleHeaders final : public routing::RequestHeaderSource {
   public:
    explicit RuleHeaders(Exchange* exchange) : exchange_(exchange) {}
    void Collect(std::vector<modification::HeaderView>* out) const override;
    std::string_view ServerPort() const override;
    std::string_view ServerAddr() const override;
    std::string_view RemotePort() const override;
    // Before each request: what was asked of the kernel is asked again
    // (an exchange serves other connections later).
    void Reset() { server_addr_size_ = -1; }

   private:
    Exchange* exchange_;
    mutable std::array<char, 8> port_{};
    mutable std::array<char, 8> remote_port_{};
    // The connection's local address, asked of the kernel once per request
    // that reads it (server_addr_size_ < 0: not yet).
    mutable std::array<char, 64> server_addr_{};
    mutable int server_addr_size_ = -1;
  };

  Worker* worker_;
  ExchangeSink* sink_;
  ClientContext client_;
  Phase phase_ = Phase::kIdle;
  bool finished_ = false;  // logged and counted; the upstream is released

  const http::RequestHead* head_ = nullptr;  // as received
  // What is forwarded: head_, or mod_head_ when modification rules changed
  // the request's fields.
  const http::RequestHead* forward_head_ = nullptr;
  http::RequestInfo info_;
  // Modification rules (docs/modification-rules.md): the fields they left
  // (owned here; mod_head_ views them), the response edits to apply, the
  // redirect target. Swapped with the router's state: no copy, and the
  // storage is reused from request to request.
  RuleHeaders rule_headers_{this};
  std::unique_ptr<http::RequestHead> mod_head_;
  std::vector<modification::Header> mod_fields_;
  std::vector<modification::ResponseEdit> response_edits_;
  std::vector<modification::Header> mod_response_fields_;
  std::string rule_location_;
  std::string_view forward_host_;  // a rule set Host: forwarded instead of info_.host

  std::string method_;
  std::string target_;
  int version_minor_ = 1;
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
  bool tunnel_ = false;  // 101 to an upgrade: bytes pass both ways until either ends
  // The client half-closed the tunnel and its FIN went on to the server
  // (shutdown SHUT_WR) once every byte before it had: the server's side
  // still flows until the server closes.
  bool upstream_shut_ = false;

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
  // The request head as sent; its last head_unsent_ bytes go to the server
  // before upstream_out_ (kept whole for a retry on a fresh connection).
  std::string sent_head_;
  size_t head_unsent_ = 0;
  Buffer upstream_in_;
  http::ResponseParser response_parser_;
  // Taken from the worker's free list when a head is parsed; given back by
  // ReleaseIdleMemory and the destructor.
  std::unique_ptr<http::ResponseHead> response_head_;
  http::ResponseInfo response_info_;
  InterimBudget interim_;
  bool response_head_done_ = false;  // the head went to the sink
  bool response_started_ = false;
  bool response_done_ = false;  // all of the response went to the sink
  uint64_t response_remaining_ = 0;
  http::ChunkedDecoder response_chunked_;
  int response_status_ = 0;
  uint64_t response_body_bytes_ = 0;
  std::string scratch_;

  TimerKind timer_kind_ = TimerKind::kNone;
  net::Timer timer_;
};

}  // namespace kwd::proxy
