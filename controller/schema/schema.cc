#include "controller/schema/schema.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "controller/model/model.h"

namespace kwd::schema {
namespace {

using nlohmann::json;

std::string JoinPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// The enum value or bound as the schema's type reads it.
json ScalarOf(const YAML::Node& node, const std::string& type) {
  const std::string text = node.Scalar();
  if (type == "integer") {
    return node.as<std::int64_t>();
  }
  if (type == "number") {
    return node.as<double>();
  }
  if (type == "boolean") {
    return node.as<bool>();
  }
  return text;
}

Node ParseNode(const YAML::Node& y) {
  Node node;
  if (!y.IsMap()) {
    return node;
  }
  if (y["type"]) {
    node.type = y["type"].as<std::string>();
  }
  if (const YAML::Node properties = y["properties"]; properties && properties.IsMap()) {
    for (const auto& entry : properties) {
      node.properties.emplace(entry.first.as<std::string>(), ParseNode(entry.second));
    }
  }
  if (y["items"]) {
    node.items = std::make_unique<Node>(ParseNode(y["items"]));
  }
  if (const YAML::Node additional = y["additionalProperties"]; additional) {
    if (additional.IsMap()) {
      node.additional_properties = std::make_unique<Node>(ParseNode(additional));
    } else if (additional.as<bool>()) {
      node.additional_properties = std::make_unique<Node>();
    }
  }
  node.preserve_unknown_fields = y["x-kubernetes-preserve-unknown-fields"] &&
                                 y["x-kubernetes-preserve-unknown-fields"].as<bool>();
  node.int_or_string =
      y["x-kubernetes-int-or-string"] && y["x-kubernetes-int-or-string"].as<bool>();
  if (const YAML::Node values = y["enum"]; values && values.IsSequence()) {
    for (const auto& value : values) {
      node.enum_values.push_back(ScalarOf(value, node.type));
    }
  }
  auto number = [&](const char* key, std::optional<double>* out) {
    if (y[key]) {
      *out = y[key].as<double>();
    }
  };
  auto count = [&](const char* key, std::optional<std::int64_t>* out) {
    if (y[key]) {
      *out = y[key].as<std::int64_t>();
    }
  };
  number("minimum", &node.minimum);
  number("maximum", &node.maximum);
  count("minLength", &node.min_length);
  count("maxLength", &node.max_length);
  count("minItems", &node.min_items);
  count("maxItems", &node.max_items);
  if (const YAML::Node required = y["required"]; required && required.IsSequence()) {
    for (const auto& name : required) {
      node.required.push_back(name.as<std::string>());
    }
  }
  return node;
}

std::string_view ExpectedName(const Node& node) {
  if (node.int_or_string) {
    return "an integer or a string";
  }
  if (node.type == "object") {
    return "an object";
  }
  if (node.type == "array") {
    return "a list";
  }
  if (node.type == "string") {
    return "a string";
  }
  if (node.type == "integer") {
    return "an integer";
  }
  if (node.type == "number") {
    return "a number";
  }
  if (node.type == "boolean") {
    return "a boolean";
  }
  return "";
}

bool HasType(const Node& node, const json& value) {
  if (node.int_or_string) {
    return value.is_number_integer() || value.is_string();
  }
  if (node.type.empty()) {
    return true;
  }
  if (node.type == "object") {
    return value.is_object();
  }
  if (node.type == "array") {
    return value.is_array();
  }
  if (node.type == "string") {
    return value.is_string();
  }
  if (node.type == "integer") {
    return value.is_number_integer();
  }
  if (node.type == "number") {
    return value.is_number();
  }
  if (node.type == "boolean") {
    return value.is_boolean();
  }
  return true;
}

// Characters, as Kubernetes counts a string's length (UTF-8 code points).
std::int64_t CodePoints(const std::string& text) {
  std::int64_t n = 0;
  for (unsigned char c : text) {
    n += (c & 0xC0) != 0x80 ? 1 : 0;
  }
  return n;
}

std::string Number(double value) {
  char buffer[32];
  if (value == static_cast<double>(static_cast<std::int64_t>(value))) {
    std::snprintf(buffer, sizeof buffer, "%lld", static_cast<long long>(value));
  } else {
    std::snprintf(buffer, sizeof buffer, "%g", value);
  }
  return buffer;
}

std::string Shown(const json& value) {
  return value.is_string() ? json(value.get<std::string>()).dump() : value.dump();
}

class Checker {
 public:
  explicit Checker(std::vector<Problem>* problems) : problems_(problems) {}

  void Check(const Node& node, const json& value, const std::string& path) {
    if (value.is_null()) {
      return;  // absent, as the decoder reads null
    }
    if (!HasType(node, value)) {
      Add(path, "expected " + std::string(ExpectedName(node)) + ", got " +
                    std::string(model::JsonTypeName(value)));
      return;
    }
    if (!node.enum_values.empty() && std::find(node.enum_values.begin(), node.enum_values.end(),
                                               value) == node.enum_values.end()) {
      std::vector<std::string> names;
      std::string allowed;
      for (size_t i = 0; i < node.enum_values.size(); ++i) {
        const json& candidate = node.enum_values[i];
        if (candidate.is_string()) {
          names.push_back(candidate.get<std::string>());
        }
        if (i < 8) {
          allowed += (i == 0 ? "" : ", ") +
                     (candidate.is_string() ? candidate.get<std::string>() : candidate.dump());
        }
      }
      if (node.enum_values.size() > 8) {
        allowed += ", ... (" + std::to_string(node.enum_values.size()) + " values)";
      }
      Add(path, Shown(value) + " is not one of " + allowed,
          value.is_string() ? Closest(value.get<std::string>(), names) : "");
    }
    if (value.is_number()) {
      const double number = value.get<double>();
      if (node.minimum && number < *node.minimum) {
        Add(path, value.dump() + " is less than the minimum " + Number(*node.minimum));
      }
      if (node.maximum && number > *node.maximum) {
        Add(path, value.dump() + " is more than the maximum " + Number(*node.maximum));
      }
    }
    if (value.is_string()) {
      const std::int64_t length = CodePoints(value.get<std::string>());
      if (node.min_length && length < *node.min_length) {
        Add(path, *node.min_length == 1
                      ? "must not be empty"
                      : "shorter than " + std::to_string(*node.min_length) + " characters");
      }
      if (node.max_length && length > *node.max_length) {
        Add(path, "longer than " + std::to_string(*node.max_length) + " characters (" +
                      std::to_string(length) + ")");
      }
    }
    if (value.is_array()) {
      const auto size = static_cast<std::int64_t>(value.size());
      if (node.min_items && size < *node.min_items) {
        Add(path, "needs at least " + std::to_string(*node.min_items) + " items, has " +
                      std::to_string(size));
      }
      if (node.max_items && size > *node.max_items) {
        Add(path, "takes at most " + std::to_string(*node.max_items) + " items, has " +
                      std::to_string(size));
      }
      if (node.items) {
        for (size_t i = 0; i < value.size(); ++i) {
          Check(*node.items, value[i], path + "[" + std::to_string(i) + "]");
        }
      }
    }
    if (value.is_object()) {
      CheckObject(node, value, path);
    }
  }

 private:
  void CheckObject(const Node& node, const json& value, const std::string& path) {
    std::vector<std::string> known;
    for (const auto& [name, child] : node.properties) {
      known.push_back(name);
    }
    for (const auto& [key, child] : value.items()) {
      const std::string child_path = JoinPath(path, key);
      if (auto it = node.properties.find(key); it != node.properties.end()) {
        Check(it->second, child, child_path);
      } else if (node.additional_properties) {
        Check(*node.additional_properties, child, child_path);
      } else if (!node.preserve_unknown_fields && !node.properties.empty()) {
        Add(child_path, "unknown field", Closest(key, known));
      }
    }
    for (const std::string& name : node.required) {
      if (!value.contains(name) || value[name].is_null()) {
        Add(JoinPath(path, name), "required");
      }
    }
  }

  void Add(const std::string& path, std::string message, std::string hint = "") {
    problems_->push_back({path, std::move(message), std::move(hint)});
  }

  std::vector<Problem>* problems_;
};

char Lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// Levenshtein distance over lower-cased characters, capped: more than
// `limit` returns limit + 1 (names are short; the cap bounds hostile ones).
size_t Distance(std::string_view a, std::string_view b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) {
    return limit + 1;
  }
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    size_t best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diagonal + (Lower(a[i - 1]) == Lower(b[j - 1]) ? 0 : 1)});
      diagonal = up;
      best = std::min(best, row[j]);
    }
    if (best > limit) {
      return limit + 1;
    }
  }
  return std::min(row[b.size()], limit + 1);
}

}  // namespace

std::string Closest(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty() || word.size() > 256) {
    return "";
  }
  const size_t limit = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3));
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    if (candidate == word) {
      continue;
    }
    const size_t distance = Distance(word, candidate, limit);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::optional<Schemas> Schemas::Parse(std::span<const EmbeddedFile> files, std::string* error) {
  Schemas schemas;
  for (const EmbeddedFile& file : files) {
    try {
      const YAML::Node crd = YAML::Load(std::string(file.text));
      const YAML::Node spec = crd["spec"];
      if (!spec || !spec["group"] || !spec["names"] || !spec["versions"]) {
        *error = std::string(file.name) + ": not a CustomResourceDefinition";
        return std::nullopt;
      }
      const std::string group = spec["group"].as<std::string>();
      const std::string kind = spec["names"]["kind"].as<std::string>();
      for (const auto& version : spec["versions"]) {
        const YAML::Node root = version["schema"]["openAPIV3Schema"];
        if (!root) {
          *error = std::string(file.name) + ": version without openAPIV3Schema";
          return std::nullopt;
        }
        schemas.roots_.emplace(
            std::make_pair(group + "/" + version["name"].as<std::string>(), kind), ParseNode(root));
      }
    } catch (const YAML::Exception& e) {
      *error = std::string(file.name) + ": " + e.what();
      return std::nullopt;
    }
  }
  return schemas;
}

const Schemas& Schemas::Builtin() {
  static const Schemas* const kBuiltin = [] {
    std::string error;
    auto parsed = Parse(EmbeddedCrds(), &error);
    if (!parsed) {
      // The files are part of the build; a test parses them.
      std::fprintf(stderr, "kwd: embedded CRD schema unreadable: %s\n", error.c_str());
      std::abort();
    }
    return new Schemas(std::move(*parsed));
  }();
  return *kBuiltin;
}

const Node* Schemas::Find(std::string_view api_version, std::string_view kind) const {
  auto it = roots_.find({std::string(api_version), std::string(kind)});
  return it == roots_.end() ? nullptr : &it->second;
}

std::vector<std::string> Schemas::Kinds() const {
  std::vector<std::string> kinds;
  for (const auto& [key, root] : roots_) {
    kinds.push_back(key.first + " " + key.second);
  }
  return kinds;
}

std::vector<Problem> Check(const Node& root, const nlohmann::json& object) {
  std::vector<Problem> problems;
  Checker(&problems).Check(root, object, "");
  return problems;
}

}  // namespace kwd::schema
