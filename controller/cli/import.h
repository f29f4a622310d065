#pragma once

// `kwd-controller import`: an SAP Web Dispatcher profile in, kwd objects,
// proxy flags and chart values out (controller/importer does the work).

#include <ostream>
#include <string>
#include <vector>

namespace kwd::cli {

// `args` without the command name. Exit 0: everything translated; 3: some
// parameters left out (WARN lines on `err`); 1: unreadable input (nothing
// written) or an output directory that cannot be written; 2: usage error.
int RunImport(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kwd::cli
