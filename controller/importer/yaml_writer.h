#pragma once

// JSON values written as block YAML that `kubectl apply` and kwd's own
// loader read back to the same value: deterministic (object keys in the
// order nlohmann::ordered_json keeps them), strings plain only when YAML
// cannot read them as anything else, multi-line text as a literal block
// (`|`, `|-` or `|+`, so a rule file comes back byte for byte).

#include <nlohmann/json.hpp>
#include <string>

namespace kwd::importer {

// One YAML document (without the `---` separator), ending in a newline.
std::string ToYaml(const nlohmann::ordered_json& value);

}  // namespace kwd::importer
