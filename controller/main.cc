#include "controller/cli/cli.h"

int main(int argc, char** argv) {
  return kwd::cli::ControllerMain(argc, argv);
}
