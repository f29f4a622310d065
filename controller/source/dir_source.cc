#include "controller/source/dir_source.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <variant>

#include "common/metrics.h"
#include "controller/schema/schema.h"

namespace kwd::source {
namespace {

using nlohmann::json;

bool IsYamlFile(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

size_t DigitsAt(std::string_view text, size_t i) {
  size_t n = 0;
  while (i + n < text.size() && text[i + n] >= '0' && text[i + n] <= '9') {
    ++n;
  }
  return n;
}

enum class NumberForm { kNone, kInt, kFloat };

// The YAML 1.2 core schema's int "[-+]?[0-9]+" and float
// "[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", by one scan:
// std::regex's matcher recurses once per character (a long number
// overflowed the stack).
NumberForm FormOf(std::string_view text) {
  size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  const size_t int_digits = DigitsAt(text, i);
  i += int_digits;
  if (i == text.size()) {
    return int_digits > 0 ? NumberForm::kInt : NumberForm::kNone;
  }
  size_t fraction_digits = 0;
  if (text[i] == '.') {
    fraction_digits = DigitsAt(text, ++i);
    i += fraction_digits;
  }
  if (int_digits == 0 && fraction_digits == 0) {
    return NumberForm::kNone;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
      ++i;
    }
    const size_t exponent_digits = DigitsAt(text, i);
    if (exponent_digits == 0) {
      return NumberForm::kNone;
    }
    i += exponent_digits;
  }
  return i == text.size() ? NumberForm::kFloat : NumberForm::kNone;
}

// A plain (unquoted) scalar typed by the YAML 1.2 core schema. A number out
// of range stays a string (the decoder then names the field).
json PlainScalar(const std::string& text) {
  if (text == "true" || text == "True" || text == "TRUE") {
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return false;
  }
  const NumberForm form = FormOf(text);
  if (form == NumberForm::kNone) {
    return text;
  }
  const char* begin = text.data() + (text.front() == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  if (form == NumberForm::kInt) {
    std::int64_t value = 0;
    if (auto [ptr, ec] = std::from_chars(begin, end, value); ec == std::errc() && ptr == end) {
      return value;
    }
    std::uint64_t unsigned_value = 0;
    if (auto [ptr, ec] = std::from_chars(begin, end, unsigned_value);
        ec == std::errc() && ptr == end) {
      return unsigned_value;
    }
    return text;
  }
  double value = 0;
  if (auto [ptr, ec] = std::from_chars(begin, end, value); ec == std::errc() && ptr == end) {
    return value;
  }
  return text;
}

std::string JoinPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// A YAML problem at a line; ends the file's parse.
struct YamlError {
  int line = 0;
  std::string message;
  int column = 0;
};

// yaml-cpp drops a NUL byte from a scalar ("di\0ag" reads as "dig") and
// passes other control bytes and invalid UTF-8 on, so the file's bytes are
// checked before parsing: UTF-8 without C0 control characters but TAB, LF
// and CR. The first bad byte is an error at its line.
std::optional<YamlError> CheckBytes(std::string_view text) {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const int column = static_cast<int>(i - line_start) + 1;
    if (byte == '\n') {
      ++line;
      line_start = i + 1;
    } else if (byte < 0x20 && byte != '\t' && byte != '\r') {
      static constexpr char kHex[] = "0123456789abcdef";
      return YamlError{line,
                       std::string("control character 0x") + kHex[byte >> 4] + kHex[byte & 0xf] +
                           " (only TAB, LF and CR are allowed)",
                       column};
    } else if (byte >= 0x80) {
      const size_t length = Utf8SequenceLength(text.substr(i));
      if (length == 0) {
        return YamlError{line, "invalid UTF-8", column};
      }
      i += length;
      continue;
    }
    ++i;
  }
  return std::nullopt;
}

// "!!str" for the core schema's "tag:yaml.org,2002:str", else the tag.
std::string ShortTag(const std::string& tag) {
  constexpr std::string_view kCore = "tag:yaml.org,2002:";
  return tag.starts_with(kCore) ? "!!" + tag.substr(kCore.size()) : tag;
}

int LineOf(const YAML::Mark& mark) {
  return mark.is_null() ? 0 : mark.line + 1;
}

int ColumnOf(const YAML::Mark& mark) {
  return mark.is_null() ? 0 : mark.column + 1;
}

Position PositionOf(const YAML::Mark& mark) {
  return {LineOf(mark), ColumnOf(mark)};
}

// One YAML document as JSON, with the line of every field and list item by
// its path as the model writes paths ("spec.rules[0].prefix").
struct Document {
  json value;
  Position position;
  std::map<std::string, Position> positions;
  std::vector<LoadProblem> problems;  // duplicate keys and the like
};

// Builds JSON straight from yaml-cpp's parse events instead of its node
// tree: an alias in a node tree is a shared node that converting expands
// (a few hundred bytes of nested aliases become gigabytes), and the tree
// keeps only one of two equal keys. Here anchors and aliases are refused,
// a duplicate key is a problem at its own line, and each value's line is
// kept for messages. yaml-cpp's parser bounds the nesting depth itself.
class JsonBuilder final : public YAML::EventHandler {
 public:
  explicit JsonBuilder(std::string file) : file_(std::move(file)) {}

  std::vector<Document>& documents() { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    // yaml-cpp 0.7 can report document after document without reading on
    // (a fuzzed file of 400 bytes made it allocate gigabytes): a document
    // starts past where the last one did, and a file holds a bounded number.
    if (!documents_.empty() && mark.pos <= last_document_pos_) {
      throw YamlError{LineOf(mark), "YAML syntax error: the parser makes no progress here", ColumnOf(mark)};
    }
    if (documents_.size() >= kMaxDocuments) {
      throw YamlError{LineOf(mark),
                      "more than " + std::to_string(kMaxDocuments) + " YAML documents in one file",
                      ColumnOf(mark)};
    }
    last_document_pos_ = mark.pos;
    documents_.emplace_back();
    documents_.back().position = PositionOf(mark);
    stack_.clear();
    root_seen_ = false;
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Refuse(mark, anchor);
    Value(mark, nullptr);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw YamlError{LineOf(mark), "YAML aliases (*name) are not supported", ColumnOf(mark)};
  }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override {
    throw YamlError{LineOf(mark), "YAML anchors (&name) are not supported", ColumnOf(mark)};
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    Refuse(mark, anchor);
    if (!stack_.empty() && stack_.back().value.is_object() && !stack_.back().key) {
      RefuseTag(mark, tag, JoinPath(stack_.back().path, value));
      Key(mark, value);
      return;
    }
    RefuseTag(mark, tag, stack_.empty() ? "" : NextPathOf(mark));
    // "?" marks a plain scalar; a quoted one ("!") stays a string.
    Value(mark, tag == "?" ? PlainScalar(value) : json(value));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    RefuseTag(mark, tag, stack_.empty() ? "" : NextPathOf(mark));
    Open(mark, anchor, json::array());
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    RefuseTag(mark, tag, stack_.empty() ? "" : NextPathOf(mark));
    Open(mark, anchor, json::object());
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    json value;
    std::string path;
    std::optional<std::string> key;  // a map's key awaiting its value
    bool skip_value = false;         // the key was a duplicate: drop its value
  };

  static void Refuse(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) {
      throw YamlError{LineOf(mark), "YAML anchors (&name) are not supported", ColumnOf(mark)};
    }
  }

  // yaml-cpp gives an untagged node the non-specific tag "?" (plain) or "!"
  // (quoted); any other tag ("!!binary", "!custom") is explicit, and no
  // object needs one.
  static void RefuseTag(const YAML::Mark& mark, const std::string& tag, const std::string& path) {
    if (tag != "?" && tag != "!") {
      throw YamlError{
          LineOf(mark),
          (path.empty() ? "" : path + ": ") + "YAML tags (" + ShortTag(tag) + ") are not supported",
          ColumnOf(mark)};
    }
  }

  // The path NextPath would give a new value in the innermost container,
  // without recording it.
  std::string NextPathOf(const YAML::Mark& mark) const {
    const Frame& parent = stack_.back();
    if (parent.value.is_object()) {
      return parent.key ? JoinPath(parent.path, *parent.key) : parent.path;
    }
    return parent.path + "[" + std::to_string(parent.value.size()) + "]";
  }

  Document& document() { return documents_.back(); }

  void Key(const YAML::Mark& mark, const std::string& key) {
    Frame& map = stack_.back();
    std::string path = JoinPath(map.path, key);
    auto [it, inserted] = document().positions.emplace(path, PositionOf(mark));
    map.skip_value = map.value.contains(key);
    if (map.skip_value) {
      LoadProblem problem;
      problem.file = file_;
      problem.line = LineOf(mark);
      problem.column = ColumnOf(mark);
      problem.message =
          path + ": duplicate key (first at line " + std::to_string(it->second.line) + ")";
      document().problems.push_back(std::move(problem));
    }
    map.key = key;
  }

  // The path a new value in the innermost container gets; records its line.
  std::string NextPath(const YAML::Mark& mark) {
    if (stack_.empty()) {
      return "";
    }
    Frame& parent = stack_.back();
    if (parent.value.is_object()) {
      if (!parent.key) {
        throw YamlError{LineOf(mark), "a mapping key must be a plain string", ColumnOf(mark)};
      }
      return JoinPath(parent.path, *parent.key);
    }
    std::string path = parent.path + "[" + std::to_string(parent.value.size()) + "]";
    document().positions.emplace(path, PositionOf(mark));
    return path;
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, json empty) {
    Refuse(mark, anchor);
    if (stack_.empty()) {
      root_seen_ = true;
      document().position = PositionOf(mark);
    }
    std::string path = NextPath(mark);
    stack_.push_back({std::move(empty), std::move(path), std::nullopt, false});
  }

  void Close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    Place(std::move(frame.value));
  }

  void Value(const YAML::Mark& mark, json value) {
    if (stack_.empty()) {
      root_seen_ = true;
      document().position = PositionOf(mark);
    } else {
      NextPath(mark);
    }
    Place(std::move(value));
  }

  void Place(json value) {
    if (stack_.empty()) {
      document().value = std::move(value);
      return;
    }
    Frame& parent = stack_.back();
    if (parent.value.is_object()) {
      if (!parent.skip_value) {
        parent.value[*parent.key] = std::move(value);
      }
      parent.key.reset();
      parent.skip_value = false;
    } else {
      parent.value.push_back(std::move(value));
    }
  }

  const std::string file_;
  static constexpr std::size_t kMaxDocuments = 100000;
  std::vector<Document> documents_;
  int last_document_pos_ = -1;
  std::vector<Frame> stack_;
  bool root_seen_ = false;
};

// The position of `path` in `positions`, else of its closest parent, else
// `fallback`.
Position PositionOfPath(const std::map<std::string, Position>& positions, std::string path,
                        Position fallback) {
  while (!path.empty()) {
    if (auto it = positions.find(path); it != positions.end()) {
      return it->second;
    }
    std::size_t cut = path.find_last_of(".[");
    path = path.substr(0, cut == std::string::npos ? 0 : cut);
  }
  return fallback;
}

Position PositionOfPath(const Document& document, const std::string& path) {
  return PositionOfPath(document.positions, path, document.position);
}

// Clears what the decoder kept of unknown fields: `validate` reported them
// already and loads the rest, as the API server would prune them.
void DropFieldErrors(model::Object* object) {
  std::visit(
      [](auto& typed) {
        if constexpr (requires { typed.field_errors; }) {
          typed.field_errors.clear();
        }
      },
      *object);
}

std::string Describe(const json& object) {
  std::string kind = object.contains("kind") && object["kind"].is_string()
                         ? object["kind"].get<std::string>()
                         : "object";
  const json* metadata = object.contains("metadata") ? &object["metadata"] : nullptr;
  if (metadata != nullptr && metadata->is_object() && metadata->contains("name") &&
      (*metadata)["name"].is_string()) {
    std::string ns = metadata->contains("namespace") && (*metadata)["namespace"].is_string()
                         ? (*metadata)["namespace"].get<std::string>()
                         : "default";
    return kind + " " + ns + "/" + (*metadata)["name"].get<std::string>();
  }
  return kind;
}

// The key Describe names, before decoding; nullopt without a string name.
std::optional<model::ObjectKey> KeyOfJson(const json& object) {
  const json* metadata = object.contains("metadata") ? &object["metadata"] : nullptr;
  if (metadata == nullptr || !metadata->is_object() || !metadata->contains("name") ||
      !(*metadata)["name"].is_string() || !object["kind"].is_string()) {
    return std::nullopt;
  }
  std::string ns = metadata->contains("namespace") && (*metadata)["namespace"].is_string()
                       ? (*metadata)["namespace"].get<std::string>()
                       : "default";
  return model::ObjectKey{object["kind"].get<std::string>(), std::move(ns),
                          (*metadata)["name"].get<std::string>()};
}

}  // namespace

std::string LoadProblem::ToString() const {
  std::string out = file;
  if (line > 0) {
    out += ":" + std::to_string(line);
    if (column > 0) {
      out += ":" + std::to_string(column);
    }
  }
  out += ": " + message;
  if (!hint.empty()) {
    out += ", did you mean \"" + hint + "\"?";
  }
  return out;
}

Position Located::Of(std::string path) const {
  return PositionOfPath(fields, std::move(path), object);
}

bool LoadResult::has_errors() const {
  return std::any_of(problems.begin(), problems.end(),
                     [](const LoadProblem& problem) { return problem.is_error(); });
}

void LoadYamlText(std::string_view yaml_text, const std::string& file, LoadResult* result,
                  const LoadOptions& options) {
  auto add_at = [&](LoadProblem::Severity severity, Position at, std::string message,
                    std::string hint = "") -> LoadProblem& {
    LoadProblem problem;
    problem.severity = severity;
    problem.file = file;
    problem.line = at.line;
    problem.column = at.column;
    problem.message = std::move(message);
    problem.hint = std::move(hint);
    result->problems.push_back(std::move(problem));
    return result->problems.back();
  };
  if (std::optional<YamlError> error = CheckBytes(yaml_text)) {
    add_at(LoadProblem::Severity::kError, {error->line, error->column}, error->message);
    return;
  }
  JsonBuilder builder(file);
  try {
    std::istringstream in{std::string(yaml_text)};
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
    }
  } catch (const YAML::Exception& e) {
    add_at(LoadProblem::Severity::kError, PositionOf(e.mark), "YAML syntax error: " + e.msg);
    return;
  } catch (const YamlError& e) {
    add_at(LoadProblem::Severity::kError, {e.line, e.column}, e.message);
    return;
  }
  for (Document& document : builder.documents()) {
    const int line = document.position.line;
    if (document.value.is_null()) {
      continue;  // an empty document, e.g. after a trailing "---"
    }
    if (!document.value.is_object()) {
      add_at(LoadProblem::Severity::kError, document.position,
             "a document must be a mapping (an object)");
      continue;
    }
    const json& object = document.value;
    if (!document.problems.empty()) {
      for (LoadProblem& problem : document.problems) {
        problem.message = Describe(object) + ": " + problem.message;
        result->problems.push_back(std::move(problem));
      }
      continue;
    }
    // Every schema problem of the object at once (validate only).
    const schema::Node* root = nullptr;
    std::set<std::string> schema_paths;
    if (options.schemas != nullptr && object.contains("apiVersion") &&
        object["apiVersion"].is_string() && object.contains("kind") && object["kind"].is_string()) {
      root = options.schemas->Find(object["apiVersion"].get<std::string>(),
                                   object["kind"].get<std::string>());
    }
    if (root != nullptr) {
      const std::optional<model::ObjectKey> key = KeyOfJson(object);
      for (schema::Problem& problem : schema::Check(*root, object)) {
        LoadProblem& added =
            add_at(LoadProblem::Severity::kError, PositionOfPath(document, problem.path),
                   Describe(object) + ": " + problem.path + ": " + problem.message,
                   std::move(problem.hint));
        added.object = key;
        added.path = problem.path;
        schema_paths.insert(problem.path);
      }
    }
    model::DecodeResult decoded = model::DecodeObject(object);
    if (decoded.unsupported_kind) {
      add_at(LoadProblem::Severity::kNote, document.position,
             "skipping " + Describe(object) + ": " + decoded.error +
                 " (kwd reads LogonGroup, UrlMapping, SapSystem, EndpointSlice, Pod, Secret)")
          .skipped_kind = object.contains("kind") && object["kind"].is_string()
                              ? object["kind"].get<std::string>()
                              : "object";
      continue;
    }
    if (!decoded.ok()) {
      // The schema named this field already, and every other one.
      if (!schema_paths.contains(decoded.error_path)) {
        add_at(LoadProblem::Severity::kError, PositionOfPath(document, decoded.error_path),
               Describe(object) + ": " + decoded.error);
      }
      continue;
    }
    if (!decoded.unknown_fields.empty()) {
      if (root == nullptr) {
        for (const std::string& path : decoded.unknown_fields) {
          add_at(LoadProblem::Severity::kError, PositionOfPath(document, path),
                 Describe(object) + ": " + path + ": unknown field");
        }
        continue;
      }
      // Reported by the schema check (with "did you mean"); the rest of the
      // object is compiled so that its other problems show in this run.
      DropFieldErrors(&*decoded.object);
    }
    model::ObjectKey key = model::KeyOf(*decoded.object);
    std::string origin = file + ":" + std::to_string(line);
    auto [it, inserted] = result->origins.emplace(key, origin);
    if (!inserted) {
      add_at(LoadProblem::Severity::kError, document.position,
             key.ToString() + " is defined twice (first at " + it->second + ")");
      continue;
    }
    if (options.locate) {
      result->located.emplace(key, Located{file, document.position, std::move(document.positions)});
    }
    result->objects.Upsert(std::move(*decoded.object));
  }
}

LoadResult LoadDirectory(const std::filesystem::path& dir, const LoadOptions& options) {
  LoadResult result;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    result.problems.push_back(
        {LoadProblem::Severity::kError, dir.string(), 0, "not a readable directory"});
    return result;
  }
  std::vector<std::filesystem::path> files;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::follow_directory_symlink, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && IsYamlFile(it->path())) {
      files.push_back(it->path());
    }
  }
  if (ec) {
    result.problems.push_back(
        {LoadProblem::Severity::kError, dir.string(), 0, "cannot list directory: " + ec.message()});
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      result.problems.push_back(
          {LoadProblem::Severity::kError, path.string(), 0, "cannot read file"});
      continue;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    LoadYamlText(buffer.str(), path.string(), &result, options);
  }
  return result;
}

}  // namespace kwd::source
