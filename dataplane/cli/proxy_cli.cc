#include "dataplane/cli/proxy_cli.h"

#include <iostream>
#include <string_view>

namespace kwd::cli {
namespace {

constexpr const char kUsage[] =
    "usage: kwd-proxy <command> [flags]\n"
    "\n"
    "commands:\n"
    "  serve     run the proxy (--snapshot FILE | --controller HOST:PORT)\n"
    "  explain   show how the proxy would route a request (--snapshot FILE --url URL)\n"
    "\n"
    "Run 'kwd-proxy <command> --help' for a command's flags.\n";

}  // namespace

int ProxyMain(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string_view command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "explain") {
    return ExplainMain(argc - 1, argv + 1, std::cout, std::cerr);
  }
  if (command == "serve") {
    return ServeMain(argc - 1, argv + 1, std::cout, std::cerr);
  }
  std::cerr << "kwd-proxy: unknown command \"" << command << "\"\n\n" << kUsage;
  return 2;
}

}  // namespace kwd::cli
