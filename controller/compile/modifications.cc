// The modification rules processor: UrlMapping.spec.modifications[] (SAP's
// icm/HTTP/mod_<xx> action files), each as SAP's text or structured actions.
// Both become the rule language's text (one parser: common/modification),
// which is parsed and whose patterns are compiled here to validate it; the
// proxy compiles the same text again when it applies the snapshot.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/modification/program.h"
#include "common/modification/rules.h"
#include "controller/compile/internal.h"

namespace kwd::compile::internal {

bool CompileModifications(const UrlMapping& um, const std::string& source,
                          std::vector<v1::Modification>* out, Findings& findings,
                          ModificationCache* cache, std::int64_t* cluster_left) {
  bool all_valid = true;
  std::int64_t mapping_left = kMaxMappingRegexInstructions;
  std::int64_t cluster_alone = kMaxClusterRegexInstructions;  // without a compile around it
  if (cluster_left == nullptr) {
    cluster_left = &cluster_alone;
  }
  const auto& modifications = um.spec.modifications;
  for (std::size_t i = 0; i < modifications.size(); ++i) {
    const model::Modification& in = modifications[i];
    std::string field = "spec.modifications[" + std::to_string(i) + "]";
    auto reject = [&](const std::string& message) {
      findings.Reject(kReasonInvalidRule, message);
      all_valid = false;
    };
    std::string prefix = AsciiLower(in.prefix.value_or("/"));
    if (prefix.empty() || prefix.front() != '/' || !IsPathText(prefix)) {
      reject(field + ".prefix: " + Quote(in.prefix.value_or("")) +
             " must start with / and hold only RFC 3986 path characters");
      continue;
    }
    if (in.rules.has_value() == in.actions.has_value()) {
      reject(field + ": exactly one of rules (SAP's rule text) or actions must be set");
      continue;
    }
    std::string text;
    // Where a parse error's line points: the text itself, or actions[line-1].
    bool structured = in.actions.has_value();
    if (structured) {
      bool rendered = true;
      for (std::size_t j = 0; j < in.actions->size(); ++j) {
        const model::ModificationAction& action = (*in.actions)[j];
        std::string action_field = field + ".actions[" + std::to_string(j) + "]";
        if (action.value && action.replacement) {
          reject(action_field + ": value (header commands) and replacement (URL commands) " +
                 "are exclusive");
          rendered = false;
          break;
        }
        modification::StructuredAction structured_action;
        structured_action.op = action.op;
        structured_action.header = action.header.value_or("");
        structured_action.pattern = action.pattern.value_or("");
        structured_action.value = action.value ? *action.value : action.replacement.value_or("");
        structured_action.options = action.options;
        std::string line;
        std::string error;
        if (!modification::RenderAction(structured_action, &line, &error)) {
          reject(action_field + "." + error);
          rendered = false;
          break;
        }
        text += line;
        text += "\n";
      }
      if (!rendered) {
        continue;
      }
    } else {
      text = *in.rules;
    }
    // Nothing left to check it with: refused without compiling (what the
    // files before it cost decides, not what the cache holds).
    if (mapping_left <= 0 || *cluster_left <= 0) {
      reject(field + ": not checked: " +
             (mapping_left <= 0
                  ? "the rule files before it in this UrlMapping use up its " +
                        std::to_string(kMaxMappingRegexInstructions) + " regex instructions"
                  : "the UrlMappings compiled before it (oldest first) use up the " +
                        std::to_string(kMaxClusterRegexInstructions) +
                        " regex instructions all rule files may take together"));
      continue;
    }
    ModificationCache::Verdict verdict;
    const Sha256Digest key = Sha256(text);
    auto known = cache != nullptr ? cache->verdicts.find(key) : decltype(cache->verdicts)::iterator{};
    if (cache != nullptr && known != cache->verdicts.end()) {
      verdict = known->second;
    } else {
      modification::ParseError error;
      auto program = modification::Program::CompileText(text, &error);
      verdict.ok = program != nullptr;
      verdict.instructions = program != nullptr ? program->regex_instructions() : 0;
      verdict.line = error.line;
      verdict.column = error.column;
      verdict.message = error.message;
      if (cache != nullptr) {
        while (cache->verdicts.size() >= ModificationCache::kMaxEntries) {
          cache->verdicts.erase(cache->order.front());
          cache->order.pop_front();
        }
        cache->verdicts.emplace(key, verdict);
        cache->order.push_back(key);
      }
    }
    // A file that failed counts what it may have cost, the per-file bound.
    const std::int64_t cost =
        verdict.ok ? verdict.instructions : modification::kMaxProgramInstructions;
    mapping_left -= cost;
    *cluster_left -= cost;
    if (verdict.ok && (mapping_left < 0 || *cluster_left < 0)) {
      reject(field + ".rules: its patterns (" + std::to_string(verdict.instructions) +
             " regex instructions) go past what " +
             (mapping_left < 0 ? "one UrlMapping's rule files may take together (" +
                                     std::to_string(kMaxMappingRegexInstructions) + ")"
                               : "all UrlMappings' rule files may take together (" +
                                     std::to_string(kMaxClusterRegexInstructions) +
                                     ", oldest mappings first)"));
      continue;
    }
    if (!verdict.ok) {
      modification::ParseError error{verdict.line, verdict.column, verdict.message};
      if (structured && error.line > 0) {
        reject(field + ".actions[" + std::to_string(error.line - 1) + "]: " + error.message);
      } else {
        reject(field + ".rules: " + error.ToString());
      }
      continue;
    }
    v1::Modification modification;
    modification.set_prefix(prefix);
    modification.set_rules(std::move(text));
    modification.set_source(source);
    modification.set_index(static_cast<std::int32_t>(i));
    out->push_back(std::move(modification));
  }
  return all_valid;
}

}  // namespace kwd::compile::internal
