#include "controller/pipeline/dir_watcher.h"

#include <condition_variable>
#include <mutex>

#include "common/log.h"

namespace kwd::pipeline {

namespace fs = std::filesystem;

DirWatcher::DirWatcher(fs::path dir, Pipeline& pipeline, std::chrono::milliseconds poll_interval)
    : dir_(std::move(dir)),
      pipeline_(pipeline),
      poll_interval_(poll_interval),
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

bool DirWatcher::PollOnce() {
  Signature signature = Scan();
  if (loaded_once_ && signature == signature_) {
    return false;
  }
  signature_ = std::move(signature);
  source::LoadResult loaded = source::LoadDirectory(dir_);
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
  std::mutex mu;
  std::condition_variable_any wake;
  while (!stop.stop_requested()) {
    PollOnce();
    std::unique_lock lock(mu);
    wake.wait_for(lock, stop, poll_interval_, [] { return false; });
  }
}

}  // namespace kwd::pipeline
