#include "controller/source/dir_source.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <regex>
#include <sstream>
#include <system_error>

namespace kwd::source {
namespace {

using nlohmann::json;

bool IsYamlFile(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

// A plain (unquoted) scalar typed by the YAML 1.2 core schema.
json PlainScalar(const std::string& text) {
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (text == "true" || text == "True" || text == "TRUE") {
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return false;
  }
  if (std::regex_match(text, kInt)) {
    const char* begin = text.data() + (text.front() == '+' ? 1 : 0);
    const char* end = text.data() + text.size();
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
  if (std::regex_match(text, kFloat)) {
    return std::stod(text);
  }
  return text;
}

json ToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      // "?" marks a plain scalar; quoted ("!") or explicitly tagged scalars
      // stay strings.
      if (node.Tag() == "?") {
        return PlainScalar(node.Scalar());
      }
      return node.Scalar();
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        out.push_back(ToJson(item));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) {
        out[entry.first.as<std::string>()] = ToJson(entry.second);
      }
      return out;
    }
  }
  return nullptr;
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

}  // namespace

std::string LoadProblem::ToString() const {
  std::string out = file;
  if (line > 0) {
    out += ":" + std::to_string(line);
  }
  return out + ": " + message;
}

bool LoadResult::has_errors() const {
  return std::any_of(problems.begin(), problems.end(),
                     [](const LoadProblem& problem) { return problem.is_error(); });
}

void LoadYamlText(std::string_view yaml_text, const std::string& file, LoadResult* result) {
  auto add = [&](LoadProblem::Severity severity, int line, std::string message) {
    result->problems.push_back({severity, file, line, std::move(message)});
  };
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    add(LoadProblem::Severity::kError, e.mark.is_null() ? 0 : e.mark.line + 1,
        "YAML syntax error: " + e.msg);
    return;
  }
  for (const auto& document : documents) {
    if (document.IsNull()) {
      continue;  // an empty document, e.g. after a trailing "---"
    }
    int line = document.Mark().is_null() ? 0 : document.Mark().line + 1;
    if (!document.IsMap()) {
      add(LoadProblem::Severity::kError, line, "a document must be a mapping (an object)");
      continue;
    }
    json object;
    try {
      object = ToJson(document);
    } catch (const YAML::Exception& e) {
      add(LoadProblem::Severity::kError, e.mark.is_null() ? line : e.mark.line + 1, e.msg);
      continue;
    }
    model::DecodeResult decoded = model::DecodeObject(object);
    if (decoded.unsupported_kind) {
      add(LoadProblem::Severity::kNote, line,
          "skipping " + Describe(object) + ": " + decoded.error +
              " (kwd reads LogonGroup, UrlMapping, EndpointSlice, Pod)");
      continue;
    }
    if (!decoded.ok()) {
      add(LoadProblem::Severity::kError, line, Describe(object) + ": " + decoded.error);
      continue;
    }
    model::ObjectKey key = model::KeyOf(*decoded.object);
    std::string origin = file + ":" + std::to_string(line);
    auto [it, inserted] = result->origins.emplace(key, origin);
    if (!inserted) {
      add(LoadProblem::Severity::kError, line,
          key.ToString() + " is defined twice (first at " + it->second + ")");
      continue;
    }
    result->objects.Upsert(std::move(*decoded.object));
  }
}

LoadResult LoadDirectory(const std::filesystem::path& dir) {
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
    LoadYamlText(buffer.str(), path.string(), &result);
  }
  return result;
}

}  // namespace kwd::source
