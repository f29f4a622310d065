#pragma once

#include <string_view>

namespace kwd::admin {

// The /admin page: self-contained HTML (no external assets) that renders
// /admin/api/state every two seconds and asks /admin/api/explain on demand.
extern const std::string_view kAdminPage;

}  // namespace kwd::admin
