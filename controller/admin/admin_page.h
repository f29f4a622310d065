#pragma once

#include <string_view>

namespace kwd::controller_admin {

// The controller's /admin page: self-contained HTML (no external assets)
// that renders /admin/api/state every few seconds.
extern const std::string_view kControllerAdminPage;

}  // namespace kwd::controller_admin
