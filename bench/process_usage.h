#pragma once

// What a process used so far, read from /proc: the benchmarks that measure
// another process (a controller or subscriber child) or themselves.

#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

namespace kwd::bench {

struct ProcessCpu {
  double cpu_seconds = 0;  // user + system
  double minor_faults = 0;
};

// From /proc/PID/stat; nullopt when unreadable.
inline std::optional<ProcessCpu> ReadProcessCpu(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) {
    return std::nullopt;
  }
  char text[1024] = {};
  size_t length = std::fread(text, 1, sizeof text - 1, file);
  std::fclose(file);
  // Fields 10 (minflt), 14 and 15 (utime, stime) follow the ")" that ends
  // field 2, the command name.
  const char* end = static_cast<const char*>(memrchr(text, ')', length));
  unsigned long minflt = 0;
  unsigned long utime = 0;
  unsigned long stime = 0;
  if (end == nullptr || std::sscanf(end + 1, " %*c %*d %*d %*d %*d %*d %*u %lu %*u %*u %*u %lu %lu",
                                    &minflt, &utime, &stime) != 3) {
    return std::nullopt;
  }
  ProcessCpu usage;
  usage.cpu_seconds =
      static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  usage.minor_faults = static_cast<double>(minflt);
  return usage;
}

}  // namespace kwd::bench
