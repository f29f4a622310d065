#include "controller/pipeline/dir_watcher.h"

#include <algorithm>
#include <limits>
#include <set>
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
  std::set<std::string> bad_files;
  for (const source::LoadProblem& problem : loaded.problems) {
    Log(problem.is_error() ? LogLevel::kError : LogLevel::kDebug, "dir", "load problem",
        {{"problem", problem.ToString()}});
    if (problem.is_error()) {
      bad_files.insert(problem.file);
    }
  }
  if (bad_files.contains(dir_.string())) {
    // The directory itself could not be listed: nothing new is known.
    ++failed_reloads_;
    Log(LogLevel::kError, "dir", "reload failed; keeping the last good objects",
        {{"dir", dir_.string()}});
    return false;
  }
  // Each file is a unit: a file that loads replaces its objects; a file
  // with an error keeps the objects of its last good load (the first load
  // takes what it could read, so the controller becomes ready even when a
  // file is broken). The compile then keeps each object's last accepted
  // version on top of that.
  std::map<std::string, std::vector<model::Object>> files;
  std::set<model::ObjectKey> loaded_keys;
  auto add = [&](const model::Object& object) {
    model::ObjectKey key = model::KeyOf(object);
    auto origin = loaded.origins.find(key);
    std::string file = origin == loaded.origins.end()
                           ? std::string()
                           : origin->second.substr(0, origin->second.rfind(':'));
    if (bad_files.contains(file) && files_.contains(file)) {
      return;
    }
    loaded_keys.insert(key);
    files[file].push_back(object);
  };
  const model::ObjectSet& set = loaded.objects;
  for (const auto& [name, object] : set.logon_groups()) {
    add(object);
  }
  for (const auto& [name, object] : set.url_mappings()) {
    add(object);
  }
  for (const auto& [name, object] : set.endpoint_slices()) {
    add(object);
  }
  for (const auto& [name, object] : set.pods()) {
    add(object);
  }
  for (const auto& [name, object] : set.sap_systems()) {
    add(object);
  }
  // The pipeline keeps only those a UrlMapping's spec.tls names.
  for (const auto& [name, object] : set.secrets()) {
    add(object);
  }
  for (const std::string& file : bad_files) {
    auto kept = files_.find(file);
    if (kept == files_.end()) {
      continue;
    }
    for (const model::Object& object : kept->second) {
      // An object moved to a file that loads comes from there.
      if (!loaded_keys.contains(model::KeyOf(object))) {
        files[file].push_back(object);
      }
    }
  }
  files_ = std::move(files);
  std::vector<ObservedObject> objects;
  for (const auto& [file, of_file] : files_) {
    for (const model::Object& object : of_file) {
      objects.push_back({object, nullptr});
    }
  }
  if (!bad_files.empty() && loaded_once_) {
    ++failed_reloads_;
    Log(LogLevel::kError, "dir", "files with errors keep their last good objects",
        {{"dir", dir_.string()}, {"files", std::to_string(bad_files.size())}});
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
