#include <ostream>

#include "dataplane/cli/proxy_cli.h"
#include "dataplane/proxy/serve.h"

namespace kwd::cli {

int ServeMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  return proxy::RunServe(argc, argv, out, err);
}

}  // namespace kwd::cli
