#include "common/admin_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <string_view>

#include "common/host_name.h"

namespace kwd {
namespace {

// After the answer: how long the peer may take to close before we do (its
// unread bytes would otherwise turn our close into a reset that can destroy
// the answer in flight).
constexpr int64_t kDrainMs = 1000;
// A failed accept for lack of descriptors is retried after this pause
// instead of spinning on a listener that stays readable.
constexpr int64_t kAcceptPauseMs = 100;
constexpr int kBacklog = 16;
constexpr size_t kReadChunk = 16 * 1024;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// RFC 9110 tchar.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    return true;
  }
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), IsTokenChar);
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

// Parses a request head that ends with CRLF CRLF. Returns 0, or the status
// to answer with.
int ParseHead(std::string_view head, AdminHttpRequest* request, uint64_t* content_length) {
  size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  size_t first_space = line.find(' ');
  size_t second_space =
      first_space == std::string_view::npos ? first_space : line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos) {
    return 400;
  }
  std::string_view method = line.substr(0, first_space);
  std::string_view target = line.substr(first_space + 1, second_space - first_space - 1);
  std::string_view version = line.substr(second_space + 1);
  if (!IsToken(method)) {
    return 400;
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    // 505 only for a well-formed HTTP-version (HTTP/DIGIT.DIGIT) we do not speak.
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    bool well_formed = version.size() == 8 && version.starts_with("HTTP/") && digit(version[5]) &&
                       version[6] == '.' && digit(version[7]);
    return well_formed ? 505 : 400;
  }
  // Origin form only; no controls, spaces or fragment.
  if (target.empty() || target.front() != '/' ||
      std::any_of(target.begin(), target.end(),
                  [](char c) { return c <= 0x20 || c >= 0x7f || c == '#'; })) {
    return 400;
  }
  size_t question = target.find('?');
  request->method = std::string(method);
  request->path = std::string(target.substr(0, question));
  request->query =
      question == std::string_view::npos ? std::string() : std::string(target.substr(question + 1));

  bool has_length = false;
  bool has_transfer_encoding = false;
  bool has_host = false;
  *content_length = 0;
  size_t pos = line_end + 2;
  for (;;) {
    size_t end = head.find("\r\n", pos);
    std::string_view field = head.substr(pos, end - pos);
    if (field.empty()) {
      break;  // the blank line ending the head
    }
    pos = end + 2;
    size_t colon = field.find(':');
    if (colon == std::string_view::npos || !IsToken(field.substr(0, colon))) {
      return 400;  // includes obs-fold (leading whitespace) and a bare LF
    }
    std::string_view name = field.substr(0, colon);
    std::string_view value = field.substr(colon + 1);
    if (std::any_of(value.begin(), value.end(), [](char c) {
          return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
        })) {
      return 400;
    }
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
      value.remove_suffix(1);
    }
    if (EqualsIgnoreCase(name, "content-length")) {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return 400;
      }
      uint64_t length = 0;
      for (char c : value) {
        length = length * 10 + static_cast<uint64_t>(c - '0');
      }
      if (has_length && length != *content_length) {
        return 400;
      }
      has_length = true;
      *content_length = length;
    } else if (EqualsIgnoreCase(name, "transfer-encoding")) {
      has_transfer_encoding = true;
    } else if (EqualsIgnoreCase(name, "authorization")) {
      request->authorization = std::string(value);
    } else if (EqualsIgnoreCase(name, "host")) {
      if (has_host || value.empty()) {
        return 400;  // RFC 9112 3.2: one Host, with a value here
      }
      has_host = true;
      request->host = std::string(value);
    }
  }
  if (has_transfer_encoding) {
    return has_length ? 400 : 411;
  }
  return 0;
}

std::string Serialize(const AdminHttpResponse& response, bool head_only) {
  std::string out;
  out.reserve(256 + (head_only ? 0 : response.body.size()));
  out.append("HTTP/1.1 ").append(std::to_string(response.status)).push_back(' ');
  out.append(HttpReasonPhrase(response.status)).append("\r\n");
  out.append("Content-Type: ").append(response.content_type).append("\r\n");
  out.append("Content-Length: ").append(std::to_string(response.body.size())).append("\r\n");
  out.append("Cache-Control: no-store\r\nConnection: close\r\n");
  // No page of another site may frame an admin page (clickjacking the drain
  // buttons) or have a JSON or text answer sniffed into something else.
  out.append("X-Frame-Options: DENY\r\nX-Content-Type-Options: nosniff\r\n");
  bool has_csp = false;
  for (const auto& [name, value] : response.headers) {
    out.append(name).append(": ").append(value);
    if (EqualsIgnoreCase(name, "content-security-policy")) {
      has_csp = true;
      if (value.find("frame-ancestors") == std::string::npos) {
        out.append("; frame-ancestors 'none'");
      }
    }
    out.append("\r\n");
  }
  if (!has_csp) {
    out.append("Content-Security-Policy: frame-ancestors 'none'\r\n");
  }
  out.append("\r\n");
  if (!head_only) {
    out.append(response.body);
  }
  return out;
}

enum class Phase { kHead, kBody, kWrite, kDrain, kDone };

AdminHttpHead Refusal(int status, std::string reason) {
  AdminHttpHead result;
  result.verdict = AdminHttpHead::Verdict::kRefuse;
  result.status = status;
  result.reason = std::move(reason);
  return result;
}

bool IsLoopbackAddress(std::string_view address) {
  in_addr v4{};
  in6_addr v6{};
  std::string text(address);
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) {
      return true;
    }
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      return v6.s6_addr[12] == 127;
    }
  }
  return false;
}

// The same address in two spellings ("::ffff:10.0.0.1" and "10.0.0.1",
// "::1" and "0:0::1").
bool SameAddress(std::string_view a, std::string_view b) {
  auto parse = [](std::string_view text, in6_addr* out) {
    std::string s(text);
    in_addr v4{};
    if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) {
      *out = in6_addr{};
      out->s6_addr[10] = 0xff;
      out->s6_addr[11] = 0xff;
      std::memcpy(&out->s6_addr[12], &v4, 4);
      return true;
    }
    return ::inet_pton(AF_INET6, s.c_str(), out) == 1;
  };
  in6_addr x{};
  in6_addr y{};
  return parse(a, &x) && parse(b, &y) && std::memcmp(&x, &y, sizeof x) == 0;
}

// The host of a Host field value: "[::1]:9901" -> "::1", "Name.:80" ->
// "Name"; "" when there is none.
std::string_view HostOfField(std::string_view field) {
  std::string_view host = HostWithoutPort(field);
  // What follows the host must be nothing or ":" and a port number
  // ("localhost:evil", "[::1]evil.com" name no host of ours).
  std::string_view rest = field.substr(host.size());
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);  // the trailing dot HostWithoutPort took off
  }
  if (!rest.empty() &&
      (rest.size() < 2 || rest.size() > 6 || rest.front() != ':' ||
       !std::all_of(rest.begin() + 1, rest.end(), [](char c) { return c >= '0' && c <= '9'; }))) {
    return {};
  }
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 2 || host.back() != ']') {
      return {};
    }
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

std::string LocalAddress(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    return {};
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* address =
      local.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
  if (::inet_ntop(local.ss_family, address, text, sizeof text) == nullptr) {
    return {};
  }
  return text;
}

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == ':';
}

}  // namespace

bool AdminHostAllowed(std::string_view host_field, std::string_view local_address,
                      const std::vector<std::string>& allowed_hosts) {
  if (host_field.empty()) {
    return true;
  }
  std::string_view host = HostOfField(host_field);
  if (host.empty()) {
    return false;
  }
  if (EqualsIgnoreCase(host, "localhost") || IsLoopbackAddress(host) ||
      (!local_address.empty() && SameAddress(host, local_address))) {
    return true;
  }
  for (const std::string& entry : allowed_hosts) {
    std::string_view allowed = entry;
    if (allowed.starts_with("*.")) {
      std::string_view suffix = allowed.substr(1);  // ".example.com"
      if (host.size() > suffix.size() &&
          EqualsIgnoreCase(host.substr(host.size() - suffix.size()), suffix)) {
        return true;
      }
    } else if (EqualsIgnoreCase(host, allowed) || SameAddress(host, allowed)) {
      return true;
    }
  }
  return false;
}

bool ParseAdminAllowedHosts(std::string_view list, std::vector<std::string>* out,
                            std::string* error) {
  size_t count = 0;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') {
      entry.remove_prefix(1);
    }
    while (!entry.empty() && entry.back() == ' ') {
      entry.remove_suffix(1);
    }
    std::string_view name = entry.starts_with("*.") ? entry.substr(2) : entry;
    if (name.empty() || name.size() > 253 || name.front() == '.' || name.back() == '.' ||
        !std::all_of(name.begin(), name.end(), IsHostNameChar) ||
        (name.find(':') != std::string_view::npos &&
         (entry.size() != name.size() || !SameAddress(name, name)))) {
      *error = "not a host name, IP address or *.suffix: \"" + std::string(entry) + "\"";
      return false;
    }
    out->emplace_back(entry);
    ++count;
  }
  if (count == 0) {
    *error = "no name given";
    return false;
  }
  return true;
}

// The head is complete when it holds CRLF CRLF.
AdminHttpHead ParseAdminHttpHead(std::string_view received, const AdminHttpLimits& limits,
                                 size_t searched) {
  searched = std::min(searched, received.size());
  size_t from = searched >= 3 ? searched - 3 : 0;
  size_t end = received.find("\r\n\r\n", from);
  auto too_large = [&] {
    return Refusal(431,
                   "request head larger than " + std::to_string(limits.max_head_bytes) + " bytes");
  };
  if (end == std::string_view::npos) {
    if (received.size() > limits.max_head_bytes) {
      return too_large();
    }
    return {};
  }
  end += 4;
  if (end > limits.max_head_bytes) {
    return too_large();
  }
  AdminHttpHead result;
  int status = ParseHead(received.substr(0, end), &result.request, &result.content_length);
  if (status != 0) {
    return Refusal(status, status == 411 ? "Transfer-Encoding is not accepted; send Content-Length"
                                         : "malformed request");
  }
  if (result.content_length > limits.max_body_bytes) {
    return Refusal(413,
                   "request body larger than " + std::to_string(limits.max_body_bytes) + " bytes");
  }
  result.verdict = AdminHttpHead::Verdict::kRequest;
  result.head_size = end;
  return result;
}

struct AdminHttpServer::Connection {
  int fd = -1;
  Phase phase = Phase::kHead;
  std::string head;
  uint64_t body_left = 0;
  AdminHttpRequest request;
  std::string out;
  size_t out_offset = 0;
  int64_t deadline_ms = 0;
  std::string local_address;  // numeric, what the client connected to

  ~Connection() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

AdminHttpServer::AdminHttpServer(AdminHttpLimits limits, AdminHttpHandler handler)
    : limits_(limits), handler_(std::move(handler)) {}

AdminHttpServer::~AdminHttpServer() {
  Stop();
}

bool AdminHttpServer::Start(const std::string& host, uint16_t port, std::string* error) {
  if (listen_fd_ >= 0) {
    *error = "already started";
    return false;
  }
  std::string address = host;
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  sockaddr_storage storage{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    length = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    length = sizeof(sockaddr_in6);
  } else {
    *error = "not a numeric IP address: " + host;
    return false;
  }
  int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::strerror(errno);
    return false;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0 ||
      ::listen(fd, kBacklog) != 0) {
    *error = std::strerror(errno);
    ::close(fd);
    return false;
  }
  socklen_t bound_length = sizeof storage;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &bound_length);
  port_ = ntohs(storage.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    *error = std::strerror(errno);
    ::close(fd);
    return false;
  }
  listen_fd_ = fd;
  thread_ = std::thread([this] { Run(); });
  return true;
}

void AdminHttpServer::Stop() {
  if (listen_fd_ < 0) {
    return;
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) {
    thread_.join();
  }
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = -1;
  wake_fd_ = -1;
}

void AdminHttpServer::Run() {
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  int64_t accept_paused_until = 0;
  char buffer[kReadChunk];

  auto answer = [&](Connection& c, const AdminHttpResponse& response, bool head_only) {
    c.out = Serialize(response, head_only);
    c.out_offset = 0;
    c.phase = Phase::kWrite;
    c.deadline_ms = NowMs() + limits_.write_timeout_ms;
    c.head.clear();
    c.head.shrink_to_fit();
  };
  auto refuse = [&](Connection& c, int status, std::string text) {
    AdminHttpResponse response;
    response.status = status;
    response.body = std::move(text) + "\n";
    answer(c, response, false);
  };
  auto dispatch = [&](Connection& c) {
    AdminHttpResponse response;
    if (!AdminHostAllowed(c.request.host, c.local_address, limits_.allowed_hosts)) {
      // DNS rebinding: a page of another site reaching this port by a name
      // that resolves here. Its Host is not echoed.
      response.status = 421;
      response.body =
          "this admin server answers only for its own address, localhost and the names given "
          "with --admin-allowed-hosts\n";
      answer(c, response, c.request.method == "HEAD");
      return;
    }
    try {
      response = handler_(c.request);
    } catch (const std::exception& e) {
      response = AdminHttpResponse{};
      response.status = 500;
      response.body = std::string("internal error: ") + e.what() + "\n";
    }
    answer(c, response, c.request.method == "HEAD");
  };
  // `searched` bytes of the head were looked at before.
  auto on_head_bytes = [&](Connection& c, size_t searched) {
    AdminHttpHead parsed = ParseAdminHttpHead(c.head, limits_, searched);
    if (parsed.verdict == AdminHttpHead::Verdict::kNeedMore) {
      return;
    }
    if (parsed.verdict == AdminHttpHead::Verdict::kRefuse) {
      refuse(c, parsed.status, std::move(parsed.reason));
      return;
    }
    c.request = std::move(parsed.request);
    uint64_t already = std::min<uint64_t>(c.head.size() - parsed.head_size, parsed.content_length);
    c.body_left = parsed.content_length - already;
    c.head.clear();
    if (c.body_left == 0) {
      dispatch(c);
    } else {
      c.phase = Phase::kBody;
    }
  };
  auto on_readable = [&](Connection& c) {
    // A few reads per wake-up: a fast sender cannot keep the loop here past
    // the other connections' deadlines.
    for (int reads = 0; reads < 8; ++reads) {
      ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      }
      if (n <= 0) {
        c.phase = Phase::kDone;  // closed or reset before the request ended
        return;
      }
      size_t got = static_cast<size_t>(n);
      if (c.phase == Phase::kHead) {
        size_t searched = c.head.size();
        c.head.append(buffer, got);
        on_head_bytes(c, searched);
      } else if (c.phase == Phase::kBody) {
        c.body_left -= std::min<uint64_t>(c.body_left, got);
        if (c.body_left == 0) {
          dispatch(c);
        }
      }
      // kDrain: discarded. kWrite: the request is complete; later bytes are
      // left in the socket until the answer is out.
      if (c.phase == Phase::kWrite) {
        return;
      }
    }
  };
  auto on_writable = [&](Connection& c) {
    while (c.out_offset < c.out.size()) {
      ssize_t n =
          ::send(c.fd, c.out.data() + c.out_offset, c.out.size() - c.out_offset, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      }
      if (n < 0) {
        c.phase = Phase::kDone;
        return;
      }
      c.out_offset += static_cast<size_t>(n);
    }
    c.out.clear();
    c.out.shrink_to_fit();
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Phase::kDrain;
    c.deadline_ms = NowMs() + kDrainMs;
  };

  for (;;) {
    int64_t now = NowMs();
    // Deadlines.
    for (auto& c : connections) {
      if (now < c->deadline_ms) {
        continue;
      }
      if (c->phase == Phase::kHead || c->phase == Phase::kBody) {
        refuse(*c, 408, "request not received in time");
      } else {
        c->phase = Phase::kDone;
      }
    }
    std::erase_if(connections, [](const auto& c) { return c->phase == Phase::kDone; });

    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    // Full, a new connection takes the slot of the oldest one whose request
    // has not arrived yet: clients that never finish their heads cannot keep
    // a probe of /healthz out for request_timeout_ms.
    auto oldest_unfinished = [&]() -> std::unique_ptr<Connection>* {
      std::unique_ptr<Connection>* oldest = nullptr;
      for (auto& c : connections) {
        if ((c->phase == Phase::kHead || c->phase == Phase::kBody) &&
            (oldest == nullptr || c->deadline_ms < (*oldest)->deadline_ms)) {
          oldest = &c;
        }
      }
      return oldest;
    };
    bool room = connections.size() < limits_.max_connections || oldest_unfinished() != nullptr;
    bool accepting = room && now >= accept_paused_until;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    // Nothing due (no connection, accepts not paused): sleep until a
    // connection or Stop, not once a second for nothing.
    int64_t next = std::numeric_limits<int64_t>::max();
    if (!accepting && room) {
      next = std::min(next, accept_paused_until);
    }
    for (auto& c : connections) {
      fds.push_back({c->fd, static_cast<short>(c->phase == Phase::kWrite ? POLLOUT : POLLIN), 0});
      next = std::min(next, c->deadline_ms);
    }
    int timeout = next == std::numeric_limits<int64_t>::max()
                      ? -1
                      : static_cast<int>(std::clamp<int64_t>(next - now, 0, 1000));
    int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0 && errno != EINTR) {
      return;
    }
    if (ready <= 0) {
      continue;
    }
    if (fds[0].revents != 0) {
      return;  // Stop()
    }
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = *connections[i];
      short revents = fds[i + 2].revents;
      if (revents == 0) {
        continue;
      }
      if (c.phase == Phase::kWrite) {
        on_writable(c);
      } else {
        on_readable(c);
        if (c.phase == Phase::kWrite) {
          on_writable(c);  // usually fits in the socket buffer at once
        }
      }
      if ((revents & (POLLERR | POLLNVAL)) != 0 && c.phase != Phase::kDone &&
          c.phase != Phase::kWrite) {
        c.phase = Phase::kDone;
      }
    }
    if (fds[1].revents != 0) {
      for (size_t accepted = 0; accepted < limits_.max_connections; ++accepted) {  // bounded
        bool full = connections.size() >= limits_.max_connections;
        if (full && oldest_unfinished() == nullptr) {
          break;  // every slot is answering: the rest wait in the backlog
        }
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) {
            continue;
          }
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = NowMs() + kAcceptPauseMs;
          }
          break;
        }
        if (full) {
          (*oldest_unfinished())->phase = Phase::kDone;  // closed without an answer
          std::erase_if(connections, [](const auto& c) { return c->phase == Phase::kDone; });
        }
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        c->local_address = LocalAddress(fd);
        c->deadline_ms = NowMs() + limits_.request_timeout_ms;
        connections.push_back(std::move(c));
      }
    }
  }
}

std::string_view HttpReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 421:
      return "Misdirected Request";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace kwd
