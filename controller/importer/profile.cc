#include "controller/importer/profile.h"

#include <algorithm>
#include <cctype>

#include "common/log.h"

namespace kwd::importer {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

// The line without its comment: `#` at the start or after a blank.
std::string_view StripComment(std::string_view line) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return line.substr(0, i);
    }
  }
  return line;
}

}  // namespace

ParsedProfile ParseProfile(std::string_view text) {
  ParsedProfile out;
  // A UTF-8 byte order mark, as Windows editors write it, is not part of
  // the first name.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") {
    text.remove_prefix(3);
  }
  int number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    std::string_view line =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    ++number;
    if (end == std::string_view::npos && line.empty()) {
      break;
    }
    start = end == std::string_view::npos ? text.size() + 1 : end + 1;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    std::string_view content = Trim(StripComment(line));
    if (content.empty()) {
      continue;
    }
    std::size_t equals = content.find('=');
    if (equals == std::string_view::npos) {
      out.problems.push_back({number, "not a \"name = value\" line: \"" +
                                          EscapeControlCharacters(content.substr(0, 80)) + "\"" +
                                          (content.size() > 80 ? "..." : "")});
      continue;
    }
    std::string_view name = Trim(content.substr(0, equals));
    if (name.empty()) {
      out.problems.push_back({number, "a value without a parameter name"});
      continue;
    }
    out.entries.push_back(
        {number, std::string(name), std::string(Trim(content.substr(equals + 1)))});
  }
  return out;
}

void ValueExpander::Report(const std::string& what, bool depends_on_context) {
  if (depends_on_context) {
    ++context_problems_;
  } else {
    trail_.push_back(what);
  }
  if (std::find(unresolved_->begin(), unresolved_->end(), what) == unresolved_->end()) {
    unresolved_->push_back(what);
  }
}

bool ValueExpander::Spend(std::size_t steps, std::size_t bytes) {
  steps_ += steps;
  bytes_ += bytes;
  if (steps_ > kMaxExpansionSteps || bytes_ > kMaxExpandedTotalBytes) {
    exhausted_ = true;
  }
  return !exhausted_;
}

// Appends the expansion of `value` to `out`; false once a bound is hit.
// Bytes are charged to the budget before they are appended.
bool ValueExpander::ExpandInto(std::string_view value, std::string* out, int depth) {
  std::size_t i = 0;
  while (i < value.size()) {
    if (exhausted_) {
      return false;
    }
    if (out->size() > kMaxExpandedBytes) {
      Report("value longer than " + std::to_string(kMaxExpandedBytes) + " bytes once expanded",
             true);
      return false;
    }
    if (value[i] != '$' || i + 1 >= value.size() || value[i + 1] != '(') {
      std::size_t next = value.find("$(", i + 1);
      std::size_t end = std::min(next == std::string_view::npos ? value.size() : next,
                                 i + kMaxExpandedBytes + 1 - std::min(out->size(), kMaxExpandedBytes));
      if (!Spend(0, end - i)) {
        return false;
      }
      out->append(value.substr(i, end - i));
      i = end;
      continue;
    }
    std::size_t close = value.find(')', i + 2);
    if (close == std::string_view::npos) {
      Report("unclosed $(", false);
      if (!Spend(0, value.size() - i)) {
        return false;
      }
      out->append(value.substr(i));
      return true;
    }
    std::string name(Trim(value.substr(i + 2, close - i - 2)));
    i = close + 1;
    if (!Spend(1, 0)) {
      return false;
    }
    if (auto memo = memo_.find(name); memo != memo_.end()) {
      std::size_t room = kMaxExpandedBytes + 1 - std::min(out->size(), kMaxExpandedBytes);
      std::size_t take = std::min(room, memo->second.value.size());
      if (!Spend(0, take)) {
        return false;
      }
      out->append(memo->second.value, 0, take);
      for (const std::string& problem : memo->second.problems) {
        Report(problem, false);
      }
      if (take < memo->second.value.size()) {
        Report("value longer than " + std::to_string(kMaxExpandedBytes) + " bytes once expanded",
               true);
        return false;
      }
      continue;
    }
    if (depth >= kMaxExpansionDepth) {
      Report("$(" + EscapeControlCharacters(name) + ") nested too deeply", true);
      continue;
    }
    if (std::find(stack_.begin(), stack_.end(), name) != stack_.end()) {
      Report("$(" + EscapeControlCharacters(name) + ") refers to itself", true);
      continue;
    }
    auto it = variables_.find(name);
    if (it == variables_.end()) {
      Report("$(" + EscapeControlCharacters(name) + ")", false);
      continue;
    }
    std::size_t start = out->size();
    std::size_t trail_start = trail_.size();
    std::size_t context_before = context_problems_;
    stack_.push_back(name);
    bool ok = ExpandInto(it->second, out, depth + 1);
    stack_.pop_back();
    if (!ok) {
      return false;
    }
    if (context_problems_ == context_before) {
      Memo memo{out->substr(start), {}};
      for (std::size_t t = trail_start; t < trail_.size(); ++t) {
        if (std::find(memo.problems.begin(), memo.problems.end(), trail_[t]) ==
            memo.problems.end()) {
          memo.problems.push_back(trail_[t]);
        }
      }
      memo_.emplace(name, std::move(memo));
    }
  }
  return true;
}

std::string ValueExpander::Expand(std::string_view value, std::vector<std::string>* unresolved) {
  unresolved_ = unresolved;
  std::string out;
  if (!ExpandInto(value, &out, 0)) {
    out.resize(std::min(out.size(), kMaxExpandedBytes));
  }
  trail_.clear();
  stack_.clear();
  return out;
}

std::string ExpandValue(std::string_view value, const std::map<std::string, std::string>& variables,
                        std::vector<std::string>* unresolved) {
  ValueExpander expander(variables);
  std::string out = expander.Expand(value, unresolved);
  if (expander.exhausted()) {
    unresolved->push_back("more than " + std::to_string(kMaxExpansionSteps) +
                          " $(...) references or " + std::to_string(kMaxExpandedTotalBytes) +
                          " bytes to expand");
  }
  return out;
}

bool SplitIndexed(std::string_view name, std::string* base, int* index, bool* leading_zero) {
  std::size_t underscore = name.rfind('_');
  if (underscore == std::string_view::npos || underscore == 0 || underscore + 1 >= name.size()) {
    return false;
  }
  std::string_view digits = name.substr(underscore + 1);
  if (digits.size() > 4 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *base = std::string(name.substr(0, underscore));
  *index = std::stoi(std::string(digits));
  *leading_zero = digits.size() > 1 && digits[0] == '0';
  return true;
}

const std::string* OptionList::Find(std::string_view key) const {
  for (const auto& [k, v] : options) {
    if (k == key) {
      return &v;
    }
  }
  return nullptr;
}

OptionList ParseOptions(std::string_view value) {
  OptionList out;
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t comma = value.find(',', start);
    std::string_view item = Trim(value.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    start = comma == std::string_view::npos ? value.size() + 1 : comma + 1;
    if (item.empty()) {
      continue;
    }
    std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      out.malformed.push_back(EscapeControlCharacters(item.substr(0, 80)));
      continue;
    }
    std::string key(Trim(item.substr(0, equals)));
    for (char& c : key) {
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    std::string option_value(Trim(item.substr(equals + 1)));
    if (out.Find(key) != nullptr) {
      out.duplicates.push_back(key);
      continue;
    }
    out.options.emplace_back(std::move(key), std::move(option_value));
  }
  return out;
}

}  // namespace kwd::importer
