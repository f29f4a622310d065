#include <cstdio>
#include <iostream>
#include <sstream>
#include "common/snapshot_io.h"
int main() {
  std::stringstream ss; ss << std::cin.rdbuf();
  kwd::v1::Snapshot s; std::string err;
  if (!kwd::SnapshotFromJson(ss.str(), &s, &err)) { std::cerr << err << "\n"; return 1; }
  kwd::StampSnapshotVersion(&s);
  std::cout << kwd::SnapshotToJson(s);
}
