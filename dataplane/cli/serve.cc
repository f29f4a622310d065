#include <ostream>
#include <string_view>

#include "dataplane/cli/proxy_cli.h"

namespace kwd::cli {

int ServeMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out << "usage: kwd-proxy serve --snapshot FILE | --controller HOST:PORT\n"
             "                      [--listen 0.0.0.0:8080] [--admin-listen 0.0.0.0:9901]\n"
             "                      [--workers N] [--node-id ID]\n"
             "(not implemented yet)\n";
      return 0;
    }
  }
  err << "kwd-proxy serve: not implemented yet (try 'kwd-proxy explain')\n";
  return 2;
}

}  // namespace kwd::cli
