#include "controller/importer/profile.h"

#include <algorithm>
#include <cctype>
#include <set>

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

struct Expander {
  const std::map<std::string, std::string>& variables;
  std::vector<std::string>* unresolved;
  std::set<std::string> reported;
  std::vector<std::string> stack;  // names being expanded, for cycles

  void Report(const std::string& what) {
    if (reported.insert(what).second) {
      unresolved->push_back(what);
    }
  }

  // Appends the expansion of `value` to `out`; false once the size bound is hit.
  bool Expand(std::string_view value, std::string* out, int depth) {
    std::size_t i = 0;
    while (i < value.size()) {
      if (out->size() > kMaxExpandedBytes) {
        Report("value longer than " + std::to_string(kMaxExpandedBytes) + " bytes once expanded");
        return false;
      }
      if (value[i] != '$' || i + 1 >= value.size() || value[i + 1] != '(') {
        out->push_back(value[i]);
        ++i;
        continue;
      }
      std::size_t close = value.find(')', i + 2);
      if (close == std::string_view::npos) {
        Report("unclosed $(");
        out->append(value.substr(i));
        return true;
      }
      std::string name(Trim(value.substr(i + 2, close - i - 2)));
      i = close + 1;
      if (depth >= kMaxExpansionDepth) {
        Report("$(" + EscapeControlCharacters(name) + ") nested too deeply");
        continue;
      }
      if (std::find(stack.begin(), stack.end(), name) != stack.end()) {
        Report("$(" + EscapeControlCharacters(name) + ") refers to itself");
        continue;
      }
      auto it = variables.find(name);
      if (it == variables.end()) {
        Report("$(" + EscapeControlCharacters(name) + ")");
        continue;
      }
      stack.push_back(name);
      bool ok = Expand(it->second, out, depth + 1);
      stack.pop_back();
      if (!ok) {
        return false;
      }
    }
    return true;
  }
};

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

std::string ExpandValue(std::string_view value, const std::map<std::string, std::string>& variables,
                        std::vector<std::string>* unresolved) {
  Expander expander{variables, unresolved, {}, {}};
  std::string out;
  if (!expander.Expand(value, &out, 0)) {
    out.resize(std::min(out.size(), kMaxExpandedBytes));
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
