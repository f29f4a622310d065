#pragma once

// Thin helpers over BSD sockets: non-blocking, close-on-exec, IPv4 and IPv6.

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <string_view>

namespace kwd::net {

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string ToString() const;
  uint16_t port() const;
};

// Parses "host:port", "[v6]:port" or ":port" (any address). Numeric hosts
// only; "localhost" is accepted as 127.0.0.1. Returns false with `error` set.
bool ParseEndpoint(std::string_view text, Endpoint* out, std::string* error);
// Numeric address plus port.
bool MakeEndpoint(std::string_view address, uint16_t port, Endpoint* out);

// A listening socket with SO_REUSEADDR and, when `reuse_port`, SO_REUSEPORT
// (one listener per worker, the kernel spreads connections). Returns the fd
// or -1 with `error` set.
int Listen(const Endpoint& endpoint, bool reuse_port, int backlog, std::string* error);
// Whether `endpoint` is free for this process's SO_REUSEPORT listeners: a
// socket bound without SO_REUSEPORT fails there when another socket listens
// on it (another kwd-proxy, whose SO_REUSEPORT listeners would otherwise
// share the port's connections with ours without a word). Port 0 is always
// free. False with `error` set ("bind ADDR: Address already in use
// (another process listens there)").
bool PortFree(const Endpoint& endpoint, std::string* error);
// Starts a non-blocking connect; returns the fd (connection in progress or
// established) or -1.
int ConnectNonBlocking(const Endpoint& endpoint, int* error_number);
// The address a socket is bound to.
Endpoint LocalEndpoint(int fd);
Endpoint PeerEndpoint(int fd);
void SetNoDelay(int fd);
// For a listener whose clients always send first (an HTTP request, a TLS
// ClientHello, a PROXY header): TCP_NODELAY, which Linux copies to every
// socket accepted from it (no setsockopt per connection), and, when
// `defer_accept_seconds` > 0, TCP_DEFER_ACCEPT: the kernel hands a connection
// over once its first bytes are there, so the accept finds the request
// already readable (one wake-up and one empty read fewer per connection). A
// client that stays silent is handed over after about that many seconds
// anyway, and the proxy's own timeouts take it from there.
void PrepareClientFirstListener(int fd, int defer_accept_seconds);

// TCP_QUICKACK off on a listener of clients that send first and are answered
// at once (HTTP): the sockets accepted from it start in delayed-ACK mode, so
// the ACK of a request rides on its answer instead of going as a segment of
// its own (HAProxy's HTTP frontends do the same). AckAtOnce undoes it for a
// connection that waits for more of a request: a client with Nagle on would
// otherwise hold its next small write until the delayed ACK (40 ms).
void AckWithTheAnswer(int fd);
void AckAtOnce(int fd);

// Unsent bytes the kernel queues for `fd` before a send would block (and
// before EPOLLOUT is reported again), TCP_NOTSENT_LOWAT. Set on a listening
// socket, the connections accepted from it inherit it.
void SetNotSentLowWater(int fd, int bytes);
// Makes the coming close(2) of `fd` a reset rather than a FIN (SO_LINGER 0):
// the peer sees the stream cut short, not ended cleanly, when bytes meant
// for it are lost (a response cut after its head must not look complete).
void ResetOnClose(int fd);
// Pending socket error (SO_ERROR), 0 when none.
int SocketError(int fd);
// The numeric address of an endpoint without port ("10.0.0.1", "::1").
std::string AddressString(const Endpoint& endpoint);
// Whether a socket(), accept() or connect() failed for want of a local
// resource (descriptors, memory, ephemeral ports): this process's problem,
// not the peer's.
bool IsLocalResourceError(int error_number);

}  // namespace kwd::net
