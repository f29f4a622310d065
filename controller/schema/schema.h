#pragma once

// The openAPIV3Schema of kwd's CustomResourceDefinitions (crds/*.yaml,
// embedded at build time), and a check of an object against it that reports
// every problem at once: unknown fields (with the closest known name), wrong
// types, enum values (with the closest allowed one), ranges, lengths, item
// counts and required fields. `kwd-controller validate` runs it before the
// compile so that a misspelt field does not hide the problems behind it.
//
// Not checked here: `pattern` and `x-kubernetes-validations` (CEL); the
// compiler checks the same rules and names the field.

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::schema {

struct EmbeddedFile {
  std::string_view name;  // "dispatch.kwd.io_logongroups.yaml"
  std::string_view text;
};

// crds/*.yaml as built in (controller/schema/embed_crds.cmake).
std::span<const EmbeddedFile> EmbeddedCrds();

struct Node {
  std::string type;  // object, array, string, integer, number, boolean; "" any
  std::map<std::string, Node> properties;
  std::unique_ptr<Node> items;                  // array
  std::unique_ptr<Node> additional_properties;  // object used as a map
  bool preserve_unknown_fields = false;
  bool int_or_string = false;
  std::vector<nlohmann::json> enum_values;
  std::optional<double> minimum;
  std::optional<double> maximum;
  std::optional<std::int64_t> min_length;
  std::optional<std::int64_t> max_length;
  std::optional<std::int64_t> min_items;
  std::optional<std::int64_t> max_items;
  std::vector<std::string> required;
};

struct Problem {
  std::string path;     // "spec.backend.staticServers[0].capacity"
  std::string message;  // "0 is below the minimum 1"
  std::string hint;     // the closest allowed name or value; "" when none is close
};

// The schemas by group/version and kind ("dispatch.kwd.io/v1alpha1",
// "LogonGroup"), parsed once from the embedded files.
class Schemas {
 public:
  // The embedded CRDs. A CRD the parser cannot read is a build defect: it
  // aborts with the file's name (a test loads them all).
  static const Schemas& Builtin();
  // From CRD texts (tests); false with `error` on a text that is no CRD.
  static std::optional<Schemas> Parse(std::span<const EmbeddedFile> files, std::string* error);

  // Null when `kind` of `api_version` has no schema here.
  const Node* Find(std::string_view api_version, std::string_view kind) const;
  std::vector<std::string> Kinds() const;  // "dispatch.kwd.io/v1alpha1 LogonGroup", sorted

 private:
  std::map<std::pair<std::string, std::string>, Node> roots_;
};

// Every problem of `object` against `root`, in document order of the paths.
std::vector<Problem> Check(const Node& root, const nlohmann::json& object);

// The candidate closest to `word` by edit distance when it is close enough
// to be a typo (at most 2 edits, and fewer than half of the word), else "".
// Case differences cost nothing extra beyond one edit each.
std::string Closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace kwd::schema
