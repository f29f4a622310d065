#include <cstdio>
#include <string>

#include "demo/backend.h"

int main(int argc, char** argv) {
  kwd::demo::BackendOptions options;
  std::string error;
  if (!kwd::demo::ParseBackendArgs(argc, argv, &options, &error)) {
    std::fprintf(stderr,
                 "%s\nusage: kwd-demo-backend --listen 127.0.0.1:PORT --instance NAME "
                 "[--kind abap|java]\n",
                 error.c_str());
    return 2;
  }
  return kwd::demo::RunBackend(options);
}
