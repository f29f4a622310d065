#include "controller/cli/serve.h"

namespace kwd::cli {

int RunServe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  err << "kwd-controller: serve is not implemented yet\n";
  return 2;
}

}  // namespace kwd::cli
