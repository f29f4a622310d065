#pragma once

// Feeds the pipeline from a directory (--source=dir:DIR): loads every YAML
// file, then polls the files' names, sizes and modification times and
// reloads the whole directory when any of them changes. The store diffs the
// reload, so only real changes rebuild. A file with errors (a YAML syntax
// error mid-edit, an unknown field) keeps the objects of its last good load
// while the other files' changes go through; each error is logged with
// file:line.
//
// Editors and scripts that rewrite a file in place truncate it first, so a
// poll can see it empty or half written. A change is therefore read only
// once no file has been modified for `settle` (waiting at most a second for
// a file that keeps changing), and a load during which a file changed is
// thrown away and read again. Writing to a temporary file and renaming it
// into place (what a Kubernetes ConfigMap volume does) needs none of this.

#include <chrono>
#include <filesystem>
#include <map>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "controller/pipeline/pipeline.h"
#include "controller/source/dir_source.h"

namespace kwd::pipeline {

class DirWatcher {
 public:
  DirWatcher(std::filesystem::path dir, Pipeline& pipeline,
             std::chrono::milliseconds poll_interval = std::chrono::seconds(1),
             std::chrono::milliseconds settle = std::chrono::milliseconds(50));

  // Loads once, then polls until `stop`.
  void Run(std::stop_token stop);
  // One poll step; returns whether the directory was (re)loaded into the pipeline.
  bool PollOnce();

  std::uint64_t reloads() const { return reloads_; }
  // Reloads in which some file (or the directory) had errors.
  std::uint64_t failed_reloads() const { return failed_reloads_; }

 private:
  using Signature = std::map<std::string, std::pair<std::int64_t, std::uintmax_t>>;
  Signature Scan() const;
  // Rescans until no file was modified within `settle_` (bounded).
  Signature ScanSettled(Signature signature) const;

  const std::filesystem::path dir_;
  Pipeline& pipeline_;
  const std::chrono::milliseconds poll_interval_;
  const std::chrono::milliseconds settle_;
  const int source_;
  bool loaded_once_ = false;
  Signature signature_;
  // The objects each file gave at its last good load ("" for none).
  std::map<std::string, std::vector<model::Object>> files_;
  std::uint64_t reloads_ = 0;
  std::uint64_t failed_reloads_ = 0;
};

}  // namespace kwd::pipeline
