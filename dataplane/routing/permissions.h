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

  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    v1::PermissionAction action;
    std::string text;  // lowercase, without the stars
    bool any_start;    // pattern began with "*"
    bool any_end;      // pattern ended with "*"
  };
  static bool Matches(const Entry& entry, std::string_view path);

  std::vector<Entry> entries_;
};

}  // namespace kwd::routing
