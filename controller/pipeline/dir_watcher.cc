#include "controller/pipeline/dir_watcher.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "common/log.h"
#include "controller/kube/clock.h"

namespace kwd::pipeline {

namespace fs = std::filesystem;

DirWatcher::DirWatcher(fs::path dir, Pipeline& pipeline, std::chrono::milliseconds poll_interval,
                       std::chrono::milliseconds settle)
    : dir_(std::move(dir)),
      pipeline_(pipeline),
      poll_interval_(poll_interval),
      settle_(settle),
      source_(pipeline.AddSource("dir " + dir_.string())) {}

DirWatcher::Signature DirWatcher::Scan() const {
  Signature signature;
  std::error_code error;
  fs::recursive_directory_iterator it(dir_, fs::directory_options::follow_directory_symlink, error);
  for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    const fs::path& path = it->path();
    std::string extension = path.extension().string();
    if (extension != ".yaml" && extension != ".yml") {
      continue;
    }
    std::error_code entry_error;
    auto size = fs::file_size(path, entry_error);
    auto mtime = fs::last_write_time(path, entry_error);
    if (entry_error) {
      continue;  // removed while scanning: the next poll sees it
    }
    signature[path.string()] = {
        std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count(),
        size};
  }
  return signature;
}

DirWatcher::Signature DirWatcher::ScanSettled(Signature signature) const {
  using std::chrono::nanoseconds;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < give_up) {
    std::int64_t newest = std::numeric_limits<std::int64_t>::min();
    for (const auto& [path, stamp] : signature) {
      newest = std::max(newest, stamp.first);
    }
    std::int64_t now = std::chrono::duration_cast<nanoseconds>(
                           fs::file_time_type::clock::now().time_since_epoch())
                           .count();
    std::int64_t age = now - newest;
    // A modification time in the future (clock skew, `touch -d`) cannot
    // tell anything: it counts as settled.
    if (signature.empty() || age < 0 || age >= nanoseconds(settle_).count()) {
      break;
    }
    std::this_thread::sleep_for(nanoseconds(nanoseconds(settle_).count() - age));
    signature = Scan();
  }
  return signature;
}

bool DirWatcher::PollOnce() {
  Signature signature = Scan();
  if (loaded_once_ && signature == signature_) {
    return false;
  }
  signature = ScanSettled(std::move(signature));
  source::LoadResult loaded = source::LoadDirectory(dir_);
  if (Scan() != signature) {
    // A file changed while it was read: the next poll reads it again.
    Log(LogLevel::kDebug, "dir", "files changed while loading; reading again at the next poll",
        {{"dir", dir_.string()}});
    return false;
  }
  signature_ = std::move(signature);
  for (const source::LoadProblem& problem : loaded.problems) {
    Log(problem.is_error() ? LogLevel::kError : LogLevel::kDebug, "dir", "load problem",
        {{"problem", problem.ToString()}});
  }
  if (loaded.has_errors() && loaded_once_) {
    ++failed_reloads_;
    Log(LogLevel::kError, "dir", "reload failed; keeping the last good objects",
        {{"dir", dir_.string()}});
    return false;
  }
  // The first load serves what it could read, so the controller becomes
  // ready even when one file is broken.
  std::vector<ObservedObject> objects;
  const model::ObjectSet& set = loaded.objects;
  for (const auto& [name, object] : set.logon_groups()) {
    objects.push_back({object, nullptr});
  }
  for (const auto& [name, object] : set.url_mappings()) {
    objects.push_back({object, nullptr});
  }
  for (const auto& [name, object] : set.endpoint_slices()) {
    objects.push_back({object, nullptr});
  }
  for (const auto& [name, object] : set.pods()) {
    objects.push_back({object, nullptr});
  }
  Log(LogLevel::kInfo, "dir", loaded_once_ ? "directory reloaded" : "directory loaded",
      {{"dir", dir_.string()}, {"objects", std::to_string(objects.size())}});
  loaded_once_ = true;
  ++reloads_;
  pipeline_.ReplaceAll(source_, std::move(objects));
  return true;
}

void DirWatcher::Run(std::stop_token stop) {
  kube::RealSleeper sleeper;
  do {
    PollOnce();
  } while (sleeper.SleepFor(poll_interval_, stop));
}

}  // namespace kwd::pipeline
