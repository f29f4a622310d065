#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kwd {

bool ReadWholeFile(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error != nullptr) {
      *error = "cannot read " + path + ": " + std::strerror(errno);
    }
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

bool WriteFileAtomically(const std::string& path, std::string_view content, std::string* error,
                         mode_t mode) {
  // Unique per process: two writers of one path never share a half-written file.
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  auto fail = [&](const char* step, int fd) {
    const int saved = errno;
    if (fd >= 0) {
      close(fd);
    }
    unlink(temporary.c_str());
    *error = "cannot write " + path + ": " + step + ": " + std::strerror(saved);
    return false;
  };
  // Created afresh, never through what is already there: a symbolic link
  // planted at the temporary name (it is predictable) would otherwise have
  // the content written to its target. A leftover (a crash, or a plant) is
  // removed first; unlink removes a link, not its target.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = open(temporary.c_str(), kFlags, mode);
  if (fd < 0 && errno == EEXIST && unlink(temporary.c_str()) == 0) {
    fd = open(temporary.c_str(), kFlags, mode);
  }
  if (fd < 0) {
    return fail("open", -1);
  }
  // The mode asked for, not narrowed by the umask (0644 files) nor widened
  // by a temporary file left from before.
  if (fchmod(fd, mode) != 0) {
    return fail("fchmod", fd);
  }
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return fail("write", fd);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    return fail("fsync", fd);
  }
  if (close(fd) != 0) {
    return fail("close", -1);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return fail("rename", -1);
  }
  return true;
}

}  // namespace kwd
