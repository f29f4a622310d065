#pragma once

// A TLS passthrough connection (`--passthrough-listen`, SAP's end-to-end
// SSL): reads the ClientHello without terminating TLS, routes by its server
// name (routing::PassthroughRouter), connects to the chosen server and then
// copies bytes both ways, the ClientHello first, through two bounded
// buffers: when one side cannot take more, the other is not read. Runs in
// the worker's epoll loop next to the HTTP connections; no thread, no TLS.

#include <cstdint>
#include <string>

#include "dataplane/net/event_loop.h"
#include "dataplane/proxy/buffer.h"
#include "dataplane/proxy/worker.h"
#include "dataplane/routing/passthrough_router.h"
#include "dataplane/tls/client_hello.h"

namespace kwd::proxy {

class PassthroughConnection final : public WorkerConnection {
 public:
  PassthroughConnection(Worker* worker, int fd, std::string client_ip);
  ~PassthroughConnection() override;

  void Start() override;
  void OnIo(uint32_t events) override;
  void BeginDrain() override;

 private:
  enum class Phase { kHello, kConnecting, kSplice, kClosed };
  // The upstream socket's events come through this.
  struct UpstreamSide final : net::IoHandler {
    PassthroughConnection* owner = nullptr;
    void OnIo(uint32_t events) override { owner->OnUpstreamIo(events); }
  };
  struct Side {
    int fd = -1;
    bool readable = true;
    bool writable = true;
    bool eof = false;         // read returned 0
    bool shut_write = false;  // we sent our FIN towards it
  };

  void OnUpstreamIo(uint32_t events);
  void ReadHello();
  void Route(int exclude_server);
  void Connect();
  void OnConnectFailed(int error_number);
  void Pump();
  // Moves bytes from `from` into `buffer`, then from `buffer` into `to`.
  // Returns false on a socket error.
  bool Move(Side& from, Buffer& buffer, Side& to, uint64_t* moved);
  void Reject(int reject_index, int status, std::string_view reason, std::string_view detail);
  void Finish(int status, std::string_view reason);
  void Close();
  void OnTimer();
  void LogLine(int status, std::string_view reason);

  Worker* worker_;
  Side client_;
  Side upstream_;
  UpstreamSide upstream_handler_;
  std::string client_ip_;
  Phase phase_ = Phase::kHello;
  Buffer in_;   // client -> server (starts with the ClientHello)
  Buffer out_;  // server -> client
  tls::ClientHelloParser hello_;
  routing::PassthroughDecision decision_;
  bool retried_ = false;
  bool logged_ = false;
  uint64_t bytes_in_ = 0;
  uint64_t bytes_out_ = 0;
  int64_t start_ms_ = 0;
  int64_t last_activity_ms_ = 0;
  net::Timer timer_;
};

}  // namespace kwd::proxy
