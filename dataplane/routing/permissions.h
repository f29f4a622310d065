#pragma once

// SAP's wdisp/permission_table: first match wins, "*" only at the start or
// the end of a pattern, compared ASCII case-insensitively.

#include <string>
#include <string_view>
#include <vector>

#include "kwd/v1/snapshot.pb.h"

namespace kwd::routing {

class PermissionTable {
 public:
  PermissionTable() = default;
  explicit PermissionTable(const google::protobuf::RepeatedPtrField<v1::Permission>& permissions);

  // The action of the first entry matching `lowercase_path`; PERMIT when none
  // matches (including an empty table).
  v1::PermissionAction Evaluate(std::string_view lowercase_path) const;
  // The index of the first entry matching `lowercase_path`, -1 when none
  // does (explaining, admin pages).
  int Match(std::string_view lowercase_path) const;

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  v1::PermissionAction action(size_t index) const { return entries_[index].action; }
  // A SECURE entry of a mapping with secureAction: redirect (plain http is
  // redirected to https instead of answered 403).
  bool redirect_to_https(size_t index) const { return entries_[index].redirect_to_https; }
  // The pattern as configured.
  const std::string& pattern(size_t index) const { return entries_[index].pattern; }

 private:
  struct Entry {
    v1::PermissionAction action;
    std::string pattern;  // as configured
    std::string text;     // lowercase, without the stars
    bool any_start;       // pattern began with "*"
    bool any_end;         // pattern ended with "*"
    bool redirect_to_https;
    // "*text*": the two bytes of `text` a substring search tests first,
    // chosen when the table is built: not "/" or "." where the text has
    // others (every path is full of those), so that few places of a path
    // pass the test and get compared whole.
    uint32_t anchor_first = 0;
    uint32_t anchor_second = 0;
  };
  static bool Matches(const Entry& entry, std::string_view path);

  std::vector<Entry> entries_;
};

}  // namespace kwd::routing
