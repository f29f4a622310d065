// The modification rules processor: UrlMapping.spec.modifications[] (SAP's
// icm/HTTP/mod_<xx> action files), each as SAP's text or structured actions.
// Both become the rule language's text (one parser: common/modification),
// which is parsed and whose patterns are compiled here to validate it; the
// proxy compiles the same text again when it applies the snapshot.

#include <memory>
#include <string>
#include <vector>

#include "common/modification/program.h"
#include "common/modification/rules.h"
#include "controller/compile/internal.h"

namespace kwd::compile::internal {

bool CompileModifications(const UrlMapping& um, const std::string& source,
                          std::vector<v1::Modification>* out, Findings& findings,
                          ModificationCache* cache) {
  bool all_valid = true;
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
    ModificationCache::Verdict verdict;
    auto known =
        cache != nullptr ? cache->verdicts.find(text) : decltype(cache->verdicts)::iterator{};
    if (cache != nullptr && known != cache->verdicts.end()) {
      verdict = known->second;
    } else {
      modification::ParseError error;
      verdict.ok = modification::Program::CompileText(text, &error) != nullptr;
      verdict.line = error.line;
      verdict.column = error.column;
      verdict.message = error.message;
      if (cache != nullptr) {
        if (cache->verdicts.size() >= ModificationCache::kMaxEntries) {
          cache->verdicts.clear();
        }
        cache->verdicts.emplace(text, verdict);
      }
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
