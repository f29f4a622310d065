#include "dataplane/cli/proxy_cli.h"

int main(int argc, char** argv) {
  return kwd::cli::ProxyMain(argc, argv);
}
