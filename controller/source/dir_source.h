#pragma once

// Loads controller input objects from YAML files: the `--source=dir:DIR`
// mode. Loading is a plain function of the directory's contents so that a
// file-watching `serve` mode can call it again on every change.

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "controller/model/model.h"

namespace kwd::source {

struct LoadProblem {
  enum class Severity { kNote, kError };
  Severity severity = Severity::kError;
  std::string file;  // as given (relative paths stay relative)
  int line = 0;      // 1-based; 0 when no line applies
  std::string message;

  bool is_error() const { return severity == Severity::kError; }
  // "file:line: message" (or "file: message").
  std::string ToString() const;
};

struct LoadResult {
  model::ObjectSet objects;
  std::vector<LoadProblem> problems;                // in file order
  std::map<model::ObjectKey, std::string> origins;  // "file:line" of each object

  bool has_errors() const;
};

// Decodes every document of `yaml_text` (named `file` in messages) into
// `result`. Unknown kinds are skipped with a note; YAML syntax errors and
// malformed objects are errors naming file and line. A second object with
// the same kind/namespace/name is an error and does not replace the first.
void LoadYamlText(std::string_view yaml_text, const std::string& file, LoadResult* result);

// Every *.yaml / *.yml file under `dir`, recursively, in sorted path order.
LoadResult LoadDirectory(const std::filesystem::path& dir);

}  // namespace kwd::source
