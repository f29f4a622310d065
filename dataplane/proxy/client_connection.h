#pragma once

// One client connection and the request it is carrying. Requests on a
// connection are handled one after the other (pipelined requests wait in the
// buffer and are answered in order). Bodies stream both ways through bounded
// buffers: when one side cannot take more, the other side is not read.

#include <array>
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
#include "dataplane/proxy/worker.h"
#include "dataplane/routing/router.h"

namespace kwd::proxy {

class Worker;
class UpstreamConnection;
struct GroupMetrics;

class ClientConnection final : public net::IoHandler, public net::Deletable, public UpstreamOwner {
 public:
  // `transport` is plain or TLS (its handshake runs in Drive); the
  // connection owns it and the descriptor under it.
  ClientConnection(Worker* worker, std::unique_ptr<net::Transport> transport,
                   std::string client_ip);
  ~ClientConnection() override;

  void Start();
  void OnIo(uint32_t events) override;
  void OnUpstreamIo(uint32_t events) override;
  // Worker is draining: finish the current request, then close.
  void BeginDrain();
  bool idle() const { return phase_ == Phase::kHead && in_.empty() && !request_started_; }
  size_t slot = 0;  // index in the worker's connection list

 private:
  enum class Phase { kHead, kConnecting, kReconnecting, kForward, kTunnel, kClosing };
  enum class TimerKind { kNone, kHandshake, kIdle, kHeader, kConnect, kResponse };

  void Drive();
  void DriveSteps();
  // The client socket is in epoll only once the connection has to wait for
  // it: a request read at once and answered while the client sends nothing
  // more (Connection: close) costs no epoll_ctl at all.
  bool NeedsClientEvents() const;
  // Advances the transport's handshake; true once established.
  bool StepHandshake();
  bool StepHead();
  bool StepForward();
  bool StepTunnel();
  void StartRequest(size_t head_bytes);
  // Idle between requests: gives back buffers and oversized string storage.
  void ReleaseIdleMemory();
  void ConnectUpstream();
  // Re-encryption: puts a TLS transport on the new upstream_ (false: failed
  // and answered).
  bool StartUpstreamTls();
  // Advances the upstream TLS handshake once TCP is connected: true once
  // established; false while waiting or after a failure (answered 502).
  bool StepUpstreamHandshake();
  // 502 EPROTERROR for a group whose TLS to the server failed (`reason`:
  // config, verify, handshake), counted in kwd_proxy_upstream_tls_errors_total.
  void OnUpstreamTlsFailed(std::string_view reason, std::string_view detail);
  void OnConnected();
  void OnConnectFailed(int error_number);
  bool RetryElsewhere();
  void RetryOnFreshConnection();
  void ResetRequest();
  bool MoveRequestBody();
  bool MoveResponse();
  bool HandleResponseHead();
  void FinishTransaction();
  void AbortTransaction(ErrorCode code, std::string_view detail);
  // Logs and counts the transaction as aborted, delivers what is queued for
  // the client, then closes.
  void EndAborted(std::string_view cause);
  void LogAborted(std::string_view cause);
  void AnswerLocally(ErrorCode code, std::string_view detail, bool close);
  void ReleaseUpstream(bool reusable);
  // Ends the connection. A transaction still in flight is logged and counted
  // as aborted, `cause` naming the side that ended it.
  void Close(std::string_view cause = "aborted");
  // The client speaks HTTP/2 (ALPN h2, or the h2c preface): an
  // Http2Connection takes the transport and what was read.
  void HandOverToHttp2();
  void ArmTimer(TimerKind kind, int64_t delay_ms);
  void OnTimer();
  void LogAndCount(int status, std::string_view reason);

  bool FlushClient();
  bool FlushUpstream();
  // Bytes queued towards the server and not sent yet.
  size_t UpstreamPending() const { return upstream_out_.size() - upstream_sent_; }

  Worker* worker_;
  std::unique_ptr<net::Transport> transport_;
  int fd_;
  std::string client_ip_;
  std::string request_client_ip_;  // the client as trusted proxies name it, for the log
  Phase phase_ = Phase::kHead;
  bool closed_ = false;
  bool registered_ = false;  // fd_ is in the worker's epoll set
  bool abortive_close_ = false;  // the close resets: no orderly end of the stream
  bool client_eof_ = false;
  Readiness client_readable_{.readable = true};
  Readiness upstream_readable_;
  bool close_after_response_ = false;
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
  size_t head_bytes_ = 0;
  bool request_started_ = false;   // bytes of a new request arrived
  int64_t request_start_us_ = 0;   // MonotonicUs() when the head was complete
  int64_t upstream_start_us_ = 0;  // when the first upstream connect began; 0: none
  uint64_t request_body_bytes_ = 0;
  std::string request_id_;  // X-Request-Id (request_id.h), logged and forwarded
  std::string trace_id_;    // from a valid traceparent, for the log
  // The request is https: it arrived over TLS, or a trusted proxy's
  // X-Forwarded-Proto said so (--trusted-proxies). The one place the permission
  // table's `secure` rule, X-Forwarded-Proto, the affinity cookie's Secure
  // flag and the access log read.
  bool request_https_ = false;
  // The peer (the socket's, or the PROXY header's) is in --trusted-proxies:
  // its X-Request-Id and X-Forwarded-For are kept.
  bool peer_trusted_ = false;
  std::string method_;  // copies for logging after the head left the buffer
  std::string target_;
  int version_minor_ = 1;
  bool wants_json_ = false;
  std::array<std::string_view, 16> cookies_{};
  routing::Decision decision_;
  bool decided_ = false;
  // The target to forward when the routing resolved the received one
  // (routing::UpstreamTarget), copied at once: the router's scratch is reused.
  std::string upstream_target_;
  bool rewrite_target_ = false;
  bool retried_ = false;
  bool retried_reuse_ = false;

  // Request body towards the upstream.
  uint64_t request_remaining_ = 0;
  http::ChunkedDecoder request_chunked_;
  bool request_done_ = false;

  // The upstream side.
  UpstreamConnection* upstream_ = nullptr;
  bool upstream_reused_ = false;
  bool upstream_eof_ = false;
  std::string upstream_out_;
  size_t upstream_sent_ = 0;
  std::string sent_head_;  // to resend on a fresh connection
  Buffer upstream_in_;
  http::ResponseParser response_parser_;
  std::unique_ptr<http::ResponseHead> response_head_;  // likewise
  http::ResponseInfo response_info_;
  bool response_head_done_ = false;
  size_t head_consumed_ = 0;
  InterimBudget interim_;
  bool response_started_ = false;  // any response byte arrived
  bool response_done_ = false;
  bool chunk_response_ = false;         // re-chunk towards the client
  bool client_takes_trailers_ = false;  // the request had `TE: trailers`
  uint64_t response_remaining_ = 0;
  http::ChunkedDecoder response_chunked_;
  int response_status_ = 0;
  uint64_t response_body_bytes_ = 0;
  std::string scratch_;   // error pages, the affinity cookie
  std::string head_out_;  // serialised response heads

  TimerKind timer_kind_ = TimerKind::kNone;
  net::Timer timer_;
};

}  // namespace kwd::proxy
