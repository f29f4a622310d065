// Fuzzes `kwd-controller import` (controller/importer): the SAP profile
// parser and the translation, with the bytes after the first NUL (if any)
// served as the content of every file the profile names (permission table,
// URL map, group and server info, rule files). Checks that every diagnostic
// is one printable line, that the exit code matches the diagnostics, and
// that every object written is valid YAML text that kwd's decoder reads
// with the right kind (fields of the wave-3 contract it may not know yet
// aside), that yaml-cpp reads the YAML written back, and that the rule files
// of each UrlMapping (when they all compile) stay within what the controller
// compiles for one UrlMapping and for all of them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "common/modification/program.h"
#include "controller/importer/importer.h"
#include "controller/importer/yaml_writer.h"
#include "controller/model/model.h"
#include "tests/fuzz/fuzz_check.h"

using kwd::fuzz::Check;
using kwd::fuzz::HasControl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t nul = input.find('\0');
  std::string_view profile = input.substr(0, nul);
  std::string file =
      nul == std::string_view::npos ? std::string() : std::string(input.substr(nul + 1));
  kwd::importer::FileReader reader = [&](const std::string& reference, std::string* text,
                                         std::string* shown, std::string* error) {
    if (nul == std::string_view::npos) {
      *error = "no such file";
      return kwd::importer::ReadStatus::kUnreadable;
    }
    *text = file;
    *shown = "file.txt";
    return kwd::importer::ReadStatus::kRead;
  };
  kwd::importer::ImportResult result =
      kwd::importer::Import(profile, "fuzz.pfl", reader, kwd::importer::ImportOptions{});
  bool errors = false;
  bool warnings = false;
  for (const auto& diagnostic : result.diagnostics) {
    Check(!HasControl(diagnostic.ToString()));
    errors = errors || diagnostic.level == kwd::importer::Diagnostic::Level::kError;
    warnings = warnings || diagnostic.level == kwd::importer::Diagnostic::Level::kWarn;
  }
  Check(result.ExitCode() == (errors ? 1 : warnings ? 3 : 0));
  Check(result.translated <= result.parameters);
  for (const auto& object : result.objects) {
    std::string yaml = kwd::importer::ToYaml(object);
    Check(!yaml.empty() && yaml.back() == '\n');
    // What is written reads back as YAML with the same kind and name.
    try {
      YAML::Node node = YAML::Load(yaml);
      Check(node["kind"].as<std::string>() == object["kind"].get<std::string>());
      Check(node["metadata"]["name"].as<std::string>() ==
            object["metadata"]["name"].get<std::string>());
    } catch (const YAML::Exception&) {
      Check(false);
    }
    kwd::model::DecodeResult decoded =
        kwd::model::DecodeObject(nlohmann::json::parse(object.dump()));
    if (!decoded.ok()) {
      // Only a field this tree's decoder does not know yet may fail it.
      Check(decoded.error.find("unknown field") != std::string::npos);
    } else {
      Check(kwd::model::KindOf(*decoded.object) == object["kind"].get<std::string>());
    }
  }
  int64_t all_mappings = 0;
  std::map<std::string, int64_t> costs;  // by rule text; -1: does not compile
  for (const auto& object : result.objects) {
    if (object["kind"] != "UrlMapping" || !object["spec"].contains("modifications")) {
      continue;
    }
    int64_t cost = 0;
    bool compiled = true;
    for (const auto& modification : object["spec"]["modifications"]) {
      const std::string text = modification["rules"].get<std::string>();
      auto known = costs.find(text);
      if (known == costs.end()) {
        kwd::modification::ParseError error;
        auto program = kwd::modification::Program::CompileText(text, &error);
        known = costs.emplace(text, program != nullptr ? program->regex_instructions() : -1).first;
      }
      compiled = compiled && known->second >= 0;
      cost += std::max<int64_t>(known->second, 0);
    }
    if (compiled) {
      Check(cost <= kwd::modification::kMaxMappingInstructions);
      all_mappings += cost;
    }
  }
  Check(all_mappings <= kwd::modification::kMaxClusterInstructions);
  for (const auto& flag : result.proxy_flags) {
    Check(!HasControl(flag));
  }
  return 0;
}
