#include "controller/importer/files_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/file.h"

namespace kwd::importer {
namespace {

namespace fs = std::filesystem;

// Whether canonical `path` is inside canonical `dir`.
bool Inside(const fs::path& path, const fs::path& dir) {
  fs::path relative = path.lexically_relative(dir);
  return !relative.empty() && *relative.begin() != ".." && relative.is_relative();
}

// A file descriptor closed when it goes.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `relative` for reading beneath the directory `dir_fd`, resolved by
// the kernel in one step (openat2 RESOLVE_BENEATH): no "..", absolute link or
// link that leads out of the directory, no /proc magic link. Non-blocking,
// so that a FIFO does not wait for a writer. -1 with errno: EXDEV it leads
// out; ELOOP a loop or magic link; ENOSYS no openat2 (a kernel before 5.6)
// and EPERM a seccomp profile that refuses it (container runtimes from
// before it existed).
int OpenBeneath(int dir_fd, const fs::path& relative) {
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  // EAGAIN: a rename or mount raced the lookup (the kernel could not prove
  // it stayed beneath); asked again a few times.
  for (int attempt = 0; attempt < 16; ++attempt) {
    long fd = syscall(SYS_openat2, dir_fd, relative.c_str(), &how, sizeof(how));
    if (fd >= 0 || (errno != EAGAIN && errno != EINTR)) {
      return static_cast<int>(fd);
    }
  }
  return -1;
}

// Reads the regular file open as `fd` (at most `limit` bytes; one more is
// an error).
bool ReadOpenFile(int fd, std::size_t limit, std::string* text, std::string* error,
                  const std::string& name) {
  text->clear();
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      *error = "cannot read " + name + ": " + std::strerror(errno);
      return false;
    }
    if (n == 0) {
      return true;
    }
    text->append(buffer, static_cast<std::size_t>(n));
    if (text->size() > limit) {
      *error = name + " is larger than " + std::to_string(limit) + " bytes";
      return false;
    }
  }
}

// What no candidate gave: refused (`refused` says why) or not there.
ReadStatus NotRead(const fs::path& dir, const std::vector<fs::path>& candidates,
                   const std::string& refused, std::string* error) {
  if (!refused.empty()) {
    *error = refused;
    return ReadStatus::kRefused;
  }
  *error = "no such file in " + dir.string() + " (looked for " +
           candidates.back().filename().string() + "; copy the file there or pass --files DIR)";
  return ReadStatus::kUnreadable;
}

// Without openat2 (kernels before 5.6, or a seccomp profile that answers
// ENOSYS): each candidate resolved, checked, then opened by its resolved
// path. A link swapped in between those steps is not seen.
ReadStatus ReadChecked(const fs::path& dir, const std::vector<fs::path>& candidates,
                       std::string* text, std::string* shown, std::string* error) {
  std::string refused;
  for (const fs::path& relative : candidates) {
    const fs::path candidate = dir / relative;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(candidate, ec))) {
      continue;
    }
    fs::path real = fs::canonical(candidate, ec);
    if (ec) {
      refused = candidate.string() + " cannot be resolved (" + ec.message() + "); not read";
      continue;
    }
    if (!Inside(real, dir)) {
      refused = candidate.string() + " is a link to " + real.string() + ", outside " +
                dir.string() + " (the --files directory); not read";
      continue;
    }
    if (!fs::is_regular_file(real, ec)) {
      refused = candidate.string() + " is not a regular file; not read";
      continue;
    }
    *shown = candidate.string();
    auto size = fs::file_size(real, ec);
    if (!ec && size > kMaxReferencedFileBytes) {
      *error = candidate.string() + " is larger than " + std::to_string(kMaxReferencedFileBytes) +
               " bytes";
      return ReadStatus::kUnreadable;
    }
    return ReadWholeFile(real.string(), text, error) ? ReadStatus::kRead
                                                     : ReadStatus::kUnreadable;
  }
  return NotRead(dir, candidates, refused, error);
}

}  // namespace

ReadStatus ReadFromDir(const fs::path& dir, const std::string& reference, std::string* text,
                       std::string* shown, std::string* error) {
  fs::path written(reference);
  std::vector<fs::path> candidates;  // relative to `dir`
  bool escapes = false;
  for (const auto& part : written) {
    escapes = escapes || part == "..";
  }
  if (written.is_relative() && !escapes && !reference.empty()) {
    candidates.push_back(written);
  }
  if (written.has_filename() && written.filename() != ".." && written.filename() != ".") {
    candidates.push_back(written.filename());
  }
  if (candidates.empty()) {
    *error = "not a file name";
    return ReadStatus::kUnreadable;
  }
  std::string refused;
  Fd dir_fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) {
    *error = "cannot open " + dir.string() + ": " + std::strerror(errno);
    return ReadStatus::kUnreadable;
  }
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const fs::path shown_path = dir / candidates[i];
    Fd fd(OpenBeneath(dir_fd.get(), candidates[i]));
    if (fd.get() < 0) {
      const int open_error = errno;
      if (open_error == ENOSYS || open_error == EPERM) {
        return ReadChecked(dir, candidates, text, shown, error);
      }
      if (open_error == ENOENT || open_error == ENOTDIR) {
        continue;  // not there: the next candidate
      }
      if (open_error == EXDEV) {
        // Where it leads, for the message only (nothing is read from there).
        std::error_code ec;
        fs::path real = fs::weakly_canonical(shown_path, ec);
        if (!ec && Inside(real, dir)) {
          refused = shown_path.string() + " is an absolute link to " + real.string() +
                    " (or goes through one): only relative links are followed inside " +
                    dir.string() + " (the --files directory); not read";
        } else {
          refused = shown_path.string() +
                    (ec ? std::string(" leads") : " is a link to " + real.string() + ",") +
                    " outside " + dir.string() + " (the --files directory); not read";
        }
      } else if (open_error == ELOOP) {
        refused = shown_path.string() +
                  " cannot be resolved (a loop of symbolic links, or a /proc link); not read";
      } else if (open_error == EAGAIN) {
        refused = shown_path.string() +
                  " kept changing while it was looked up (renamed or mounted over); not read";
      } else {
        *error = "cannot read " + shown_path.string() + ": " + std::strerror(open_error);
        return ReadStatus::kUnreadable;
      }
      continue;
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) {
      *error = "cannot read " + shown_path.string() + ": " + std::strerror(errno);
      return ReadStatus::kUnreadable;
    }
    if (!S_ISREG(st.st_mode)) {
      refused = shown_path.string() + " is not a regular file; not read";
      continue;
    }
    *shown = shown_path.string();
    if (static_cast<std::uintmax_t>(st.st_size) > kMaxReferencedFileBytes) {
      *error = shown_path.string() + " is larger than " + std::to_string(kMaxReferencedFileBytes) +
               " bytes";
      return ReadStatus::kUnreadable;
    }
    return ReadOpenFile(fd.get(), kMaxReferencedFileBytes, text, error, shown_path.string())
               ? ReadStatus::kRead
               : ReadStatus::kUnreadable;
  }
  return NotRead(dir, candidates, refused, error);
}

}  // namespace kwd::importer
