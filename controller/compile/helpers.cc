// Small helpers the compile's processors share (declared in internal.h).

#include <string>
#include <string_view>
#include <vector>

#include "controller/compile/internal.h"

namespace kwd::compile::internal {

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

std::string Quote(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

std::string GroupKey(std::string_view ns, std::string_view name) {
  return std::string(ns) + "/" + std::string(name);
}

std::string JoinStrings(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      out += separator;
    }
    out += parts[i];
  }
  return out;
}

std::optional<v1::Kind> ParseKind(std::string_view text, bool accept_j2ee) {
  if (text == "abap") {
    return v1::KIND_ABAP;
  }
  if (text == "java" || (accept_j2ee && text == "j2ee")) {
    return v1::KIND_JAVA;
  }
  return std::nullopt;
}

std::string_view KindName(v1::Kind kind) {
  return kind == v1::KIND_ABAP ? "abap" : "java";
}

bool ValidPrefixShape(std::string_view prefix) {
  return prefix.size() >= 2 && prefix.front() == '/' && prefix.back() == '/';
}

std::vector<Condition> Findings::Conditions(const std::string& accepted_summary,
                                            const std::string& resolved_summary) const {
  return {Build(kAccepted, kReasonAccepted, accepted_summary, rejections_, notes_),
          Build(kResolvedRefs, kReasonResolvedRefs, resolved_summary, unresolved_, {})};
}

Condition Findings::Build(std::string_view type, std::string_view ok_reason,
                          const std::string& summary, const std::vector<Problem>& problems,
                          const std::vector<std::string>& notes) {
  Condition condition;
  condition.type = std::string(type);
  std::vector<std::string> messages;
  if (problems.empty()) {
    condition.status = "True";
    condition.reason = std::string(ok_reason);
    messages.push_back(summary);
  } else {
    condition.status = "False";
    condition.reason = problems.front().reason;
    for (const auto& problem : problems) {
      messages.push_back(problem.message);
      condition.problems.push_back({problem.reason, problem.message});
    }
  }
  messages.insert(messages.end(), notes.begin(), notes.end());
  condition.message = JoinStrings(messages, "; ");
  return condition;
}

std::uint32_t CheckedNumber(const std::optional<std::int64_t>& value, std::int64_t fallback,
                            std::int64_t min, std::int64_t max, std::string_view field,
                            Findings& findings) {
  std::int64_t number = value.value_or(fallback);
  if (number < min || number > max) {
    findings.Reject(kReasonInvalidField, std::string(field) + ": must be an integer from " +
                                             std::to_string(min) + " to " + std::to_string(max) +
                                             ", got " + std::to_string(number));
    return static_cast<std::uint32_t>(fallback);
  }
  return static_cast<std::uint32_t>(number);
}

void CheckObjectName(const model::ObjectMeta& meta, Findings& findings) {
  if (!IsNamespaceName(meta.namespace_)) {
    findings.Reject(kReasonInvalidField,
                    "metadata.namespace: " + Quote(meta.namespace_) +
                        " is not a valid namespace (lowercase letters, digits and -, at most 63)");
  }
  if (!IsObjectName(meta.name)) {
    findings.Reject(kReasonInvalidField, "metadata.name: " + Quote(meta.name) +
                                             " is not a valid object name (lowercase letters, "
                                             "digits, - and ., at most 253)");
  }
}

bool HasValidName(const model::ObjectMeta& meta) {
  return IsNamespaceName(meta.namespace_) && IsObjectName(meta.name);
}

void MarkServingLastGood(std::int64_t generation, ObjectStatus* status) {
  status->serving_last_good = true;
  status->last_good_generation = generation;
  for (Condition& condition : status->conditions) {
    if (condition.type == kAccepted) {
      condition.message += "; serving the last accepted version";
      if (generation > 0) {
        condition.message += " (generation " + std::to_string(generation) + ")";
      }
    }
  }
}

}  // namespace kwd::compile::internal
