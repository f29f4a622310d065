#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dataplane/net/cidr.h"
#include "dataplane/net/socket.h"
#include "dataplane/tls/server_tls.h"
#include "dataplane/tls/upstream_tls.h"

namespace kwd::proxy {

// SAP's access-point list for x-sap-webdisp-ap: "HTTP=<http>,HTTPS=<https>",
// a port of 0 left out.
std::string FormatAccessPoints(uint16_t http_port, uint16_t https_port);

// Everything `kwd-proxy serve` can be told. Defaults follow SAP's ICM where
// it has one (keep-alive 60 s, max request 100 MB) and common proxy practice
// elsewhere.
struct ProxyOptions {
  net::Endpoint listen;        // --listen, default 0.0.0.0:8080
  net::Endpoint admin_listen;  // --admin-listen, default 127.0.0.1:9901 (loopback)
  // --tls-listen (with --tls-cert-dir): HTTPS termination; len 0 when off.
  net::Endpoint tls_listen;
  tls::ServerTlsOptions tls;  // --tls-cert-dir, --tls-client-ca, --tls-verify-client
  tls::UpstreamTlsOptions upstream_tls;  // --upstream-cert-dir (re-encryption client certs)
  int workers = 1;             // --workers
  std::string node_id;         // --node-id, default the host name

  int64_t header_timeout_ms = 10'000;    // --header-timeout: whole request head
  int64_t handshake_timeout_ms = 10'000;  // --tls-handshake-timeout: TLS handshake
  int64_t idle_timeout_ms = 60'000;      // --idle-timeout: keep-alive between requests
  int64_t connect_timeout_ms = 5'000;    // --connect-timeout: upstream connect
  int64_t response_timeout_ms = 60'000;  // --response-timeout: upstream response head (504)
  int64_t body_timeout_ms = 60'000;      // no progress while streaming a body
  uint64_t max_body_bytes = 102400ull * 1024;  // --max-body-size (413)
  size_t max_header_bytes = 64 * 1024;         // --max-header-size (431)
  // The upstream keep-alive pool, per worker and server: up to
  // max_idle_upstream_per_server idle connections, the most recently used
  // taken first; one unused for upstream_idle_timeout_ms closes, and a
  // connection released to a full pool closes the one idle longest. 512
  // covers every request of 512 concurrent clients going to one server, so
  // a burst after a pause reuses the connections of the last one instead of
  // reconnecting (a few KiB of kernel memory and a descriptor each, for at
  // most the timeout). 30 s is below the keep-alive timeouts of SAP's ICM
  // (60 s) and nginx (75 s), so the server rarely closes one first. Not flags.
  size_t max_idle_upstream_per_server = 512;
  int64_t upstream_idle_timeout_ms = 30'000;
  size_t max_connections = 10'000;             // per worker; beyond: accept and close

  // TLS passthrough (--passthrough-listen): off unless set.
  bool passthrough = false;
  net::Endpoint passthrough_listen;
  size_t max_client_hello_bytes = 16 * 1024;
  size_t passthrough_buffer_bytes = 64 * 1024;  // per direction
  int64_t passthrough_idle_timeout_ms = 3'600'000;  // no byte either way (SAP: 1 h)

  // --proxy-protocol http,tls,passthrough: these listeners require a PROXY
  // v1/v2 header (within header_timeout_ms).
  bool proxy_protocol_http = false;
  bool proxy_protocol_tls = false;
  bool proxy_protocol_passthrough = false;
  // --trusted-proxies: peers whose X-Forwarded-For/-Proto are honoured.
  net::CidrSet trusted_proxies;
  // --public-ports http=80,https=443: the ports clients reach the HTTP and
  // HTTPS listeners on (a Service's ports), for SAP's x-sap-webdisp-ap.
  // Not given: the ports --listen and --tls-listen are bound to. 0: none.
  bool public_ports_given = false;
  uint16_t public_http_port = 0;
  uint16_t public_https_port = 0;
  // The x-sap-webdisp-ap value ("HTTP=80,HTTPS=443"), set by Worker::Start.
  std::string access_points;

  // HTTP/2 (ALPN h2 on --tls-listen; --h2c: prior knowledge on --listen).
  bool h2c = false;
  uint32_t h2_max_concurrent_streams = 100;  // --h2-max-concurrent-streams, 1-1000
  int64_t h2_ping_timeout_ms = 20'000;       // --h2-ping-timeout

  std::string access_log = "-";  // --access-log FILE | - (stdout) | off
  std::string affinity_key;      // from --affinity-key-file or KWD_AFFINITY_KEY
};

}  // namespace kwd::proxy
