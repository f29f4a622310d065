#include "tests/support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace kwd::testing {

std::string BinaryPath(const std::string& name) { return std::string(KWD_BINARY_DIR) + "/" + name; }

Process::Process(std::vector<std::string> argv, std::string log_path, bool wait_for_listening,
                 std::chrono::milliseconds timeout)
    : wait_for_listening_(wait_for_listening), log_path_(std::move(log_path)) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return;
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    int err = ::open(log_path_.empty() ? "/dev/null" : log_path_.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) {
      ::dup2(err, STDERR_FILENO);
    }
    // Start with a clean signal state: tests may block signals.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (auto& a : argv) {
      args.push_back(a.data());
    }
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::_Exit(127);
  }
  ::close(out[1]);
  stdout_fd_ = out[0];
  if (!wait_for_listening_) {
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) {
      continue;
    }
    char c;
    ssize_t n = ::read(stdout_fd_, &c, 1);
    if (n <= 0) {
      break;
    }
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    if (line.rfind("listening ", 0) == 0) {
      first_line_ = line;
      auto colon = line.rfind(':');
      port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
      break;
    }
    line.clear();
  }
}

Process::~Process() {
  if (pid_ > 0) {
    Stop(std::chrono::seconds(3));
  }
  if (stdout_fd_ >= 0) {
    ::close(stdout_fd_);
  }
}

void Process::Signal(int sig) const {
  if (pid_ > 0) {
    ::kill(pid_, sig);
  }
}

int Process::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) {
    return -1;
  }
  ::kill(pid_, SIGTERM);
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

void Process::Kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

bool Process::Alive() const {
  if (pid_ <= 0) {
    return false;
  }
  if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

namespace {
long StatusField(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stol(line.substr(field.size() + 1));
    }
  }
  return -1;
}
}  // namespace

long Process::RssKiB() const { return StatusField(pid_, "VmRSS"); }
long Process::PeakRssKiB() const { return StatusField(pid_, "VmHWM"); }

std::string Process::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

namespace {

// The first port of the kernel's ephemeral range (32768 if unknown).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return (in >> low) && low > 0 ? low : 32768;
}

// 0 when `port` (0: any) cannot be bound on 127.0.0.1 now, else the port bound.
uint16_t BindAndRelease(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return 0;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  uint16_t bound = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    bound = ntohs(a.sin_port);
  }
  ::close(fd);
  return bound;
}

}  // namespace

uint16_t ReserveFreePort() {
  // Below the ephemeral range, at random: a port from that range (what
  // binding port 0 gives) may become some process's local port of an
  // outgoing connection before the program under test binds it, and a
  // parallel test may be given the same one (kwd's listeners use
  // SO_REUSEPORT). tests/support/ports.py does the same for Python tests;
  // fixed ports (bench.proxies_smoke's PORT_BASE) stay below kLowest.
  constexpr int kLowest = 20000;
  const int highest = EphemeralLow() - 1;
  if (highest - kLowest >= 1000) {
    std::random_device seed;
    std::mt19937 pick(seed());
    std::uniform_int_distribution<int> ports(kLowest, highest);
    for (int attempt = 0; attempt < 200; ++attempt) {  // bounded
      if (uint16_t port = BindAndRelease(static_cast<uint16_t>(ports(pick))); port != 0) {
        return port;
      }
    }
  }
  return BindAndRelease(0);
}

}  // namespace kwd::testing
