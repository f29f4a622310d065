#include "dataplane/routing/permissions.h"

#include "common/string_hash.h"
#include "dataplane/routing/path.h"

namespace kwd::routing {

PermissionTable::PermissionTable(
    const google::protobuf::RepeatedPtrField<v1::Permission>& permissions) {
  for (const v1::Permission& permission : permissions) {
    std::string_view pattern = permission.pattern();
    Entry entry{permission.action(), permission.pattern(), {}, false, false,
                permission.action() == v1::PERMISSION_ACTION_SECURE &&
                    permission.redirect_to_https()};
    if (!pattern.empty() && pattern.front() == '*') {
      entry.any_start = true;
      pattern.remove_prefix(1);
    }
    if (!pattern.empty() && pattern.back() == '*') {
      entry.any_end = true;
      pattern.remove_suffix(1);
    }
    entry.text.resize(pattern.size());
    AsciiLowerInto(pattern, entry.text.data());
    entries_.push_back(std::move(entry));
  }
}

namespace {

bool StartsWith(std::string_view path, std::string_view text) {
  return path.size() >= text.size() && BytesEqual(path.data(), text.data(), text.size());
}

bool EndsWith(std::string_view path, std::string_view text) {
  return path.size() >= text.size() &&
         BytesEqual(path.data() + path.size() - text.size(), text.data(), text.size());
}

// Whether `text` occurs in `path`. Patterns and paths are short: a byte loop
// that checks the first and last byte before comparing the rest beats
// string_view::find, which calls memchr and memcmp for every candidate.
bool Contains(std::string_view path, std::string_view text) {
  const size_t n = path.size();
  const size_t m = text.size();
  if (m == 0) {
    return true;
  }
  if (m > n) {
    return false;
  }
  const char first = text.front();
  const char last = text.back();
  const char* p = path.data();
  for (size_t i = 0; i + m <= n; ++i) {
    if (p[i] == first && p[i + m - 1] == last && BytesEqual(p + i, text.data(), m)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool PermissionTable::Matches(const Entry& entry, std::string_view path) {
  std::string_view text = entry.text;
  if (entry.any_start && entry.any_end) {
    return Contains(path, text);
  }
  if (entry.any_start) {
    return EndsWith(path, text);
  }
  if (entry.any_end) {
    return StartsWith(path, text);
  }
  return path.size() == text.size() && BytesEqual(path.data(), text.data(), text.size());
}

v1::PermissionAction PermissionTable::Evaluate(std::string_view lowercase_path) const {
  for (const Entry& entry : entries_) {
    if (Matches(entry, lowercase_path)) {
      return entry.action;
    }
  }
  return v1::PERMISSION_ACTION_PERMIT;
}

int PermissionTable::Match(std::string_view lowercase_path) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (Matches(entries_[i], lowercase_path)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace kwd::routing
