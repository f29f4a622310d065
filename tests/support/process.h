#pragma once

// Test support: start the project's binaries (or system programs) as real
// processes on loopback, read the address they bound, signal and stop them.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kwd::testing {

// KWD_BINARY_DIR "/" name.
std::string BinaryPath(const std::string& name);

class Process {
 public:
  // Starts `argv` (argv[0] is the program path). stdout is read line by line
  // until a line starting with "listening " (the project's binaries print
  // "listening HOST:PORT") or `wait_for_listening` is false; stderr goes to
  // `log_path` (or /dev/null when empty).
  Process(std::vector<std::string> argv, std::string log_path = {},
          bool wait_for_listening = true,
          std::chrono::milliseconds timeout = std::chrono::seconds(20));
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  bool started() const { return port_ != 0 || (pid_ > 0 && !wait_for_listening_); }
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& first_line() const { return first_line_; }
  void Signal(int sig) const;
  // SIGTERM, then SIGKILL after `grace`; returns the exit status (waitpid form).
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // SIGKILL and reap.
  void Kill();
  bool Alive() const;  // reaps the process when it has exited
  // Resident set size in KiB from /proc/PID/status (VmRSS / VmHWM).
  long RssKiB() const;
  long PeakRssKiB() const;
  // Whole stderr log so far.
  std::string Log() const;

 private:
  mutable pid_t pid_ = -1;  // -1 once reaped
  uint16_t port_ = 0;
  bool wait_for_listening_;
  std::string log_path_;
  std::string first_line_;
  int stdout_fd_ = -1;
};

// Polls `condition` every 10 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

// A port that was free a moment ago, below the kernel's ephemeral range (see
// process.cc): for programs that cannot report the port they bound.
uint16_t ReserveFreePort();

}  // namespace kwd::testing
