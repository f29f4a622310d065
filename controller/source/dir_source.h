#pragma once

// Loads controller input objects from YAML files: the `--source=dir:DIR`
// mode. Loading is a plain function of the directory's contents so that a
// file-watching `serve` mode can call it again on every change.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/model/model.h"

namespace kwd::schema {
class Schemas;
}

namespace kwd::source {

struct LoadProblem {
  enum class Severity { kNote, kError };

  LoadProblem() = default;
  LoadProblem(Severity severity_, std::string file_, int line_, std::string message_)
      : severity(severity_), file(std::move(file_)), line(line_), message(std::move(message_)) {}

  Severity severity = Severity::kError;
  std::string file;  // as given (relative paths stay relative)
  int line = 0;      // 1-based; 0 when no line applies
  std::string message;
  int column = 0;    // 1-based; 0 when unknown
  std::string hint;  // a close allowed name or value: "did you mean"
  // Set on the note about an object of a kind kwd does not read ("Service").
  std::string skipped_kind;
  // A schema problem's object and field path (validate merges the
  // compiler's word on the same field into it).
  std::optional<model::ObjectKey> object;
  std::string path;

  bool is_error() const { return severity == Severity::kError; }
  // "file:line:column: message[, did you mean "hint"?]" (or "file: message").
  std::string ToString() const;
};

// Where a field starts in its file (1-based; 0 when unknown).
struct Position {
  int line = 0;
  int column = 0;
};

// An object's file and the position of each field by its path
// ("spec.rules[0].prefix"), kept by LoadOptions::locate.
struct Located {
  std::string file;
  Position object;
  std::map<std::string, Position> fields;

  // The position of `path`, else of its closest parent, else of the object.
  Position Of(std::string path) const;
};

struct LoadResult {
  model::ObjectSet objects;
  std::vector<LoadProblem> problems;                // in file order
  std::map<model::ObjectKey, std::string> origins;  // "file:line" of each object
  std::map<model::ObjectKey, Located> located;      // with LoadOptions::locate

  bool has_errors() const;
};

// What `kwd-controller validate` asks of the loader beyond compile/serve.
struct LoadOptions {
  // Check dispatch.kwd.io objects against their CRD schema and report every
  // problem (unknown fields with the closest name, types, enums, ranges);
  // the decoder's own complaints about the same fields are then left out.
  // Objects whose only problem is an unknown field are still loaded
  // (without it, as the API server prunes), so that the compile reports
  // the rest of their problems in the same run.
  const schema::Schemas* schemas = nullptr;
  bool locate = false;  // fill LoadResult::located
};

// Decodes every document of `yaml_text` (named `file` in messages) into
// `result`. Unknown kinds are skipped with a note; YAML syntax errors and
// malformed objects are errors naming file and line. A second object with
// the same kind/namespace/name is an error and does not replace the first.
void LoadYamlText(std::string_view yaml_text, const std::string& file, LoadResult* result,
                  const LoadOptions& options = {});

// Every *.yaml / *.yml file under `dir`, recursively, in sorted path order.
LoadResult LoadDirectory(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace kwd::source
