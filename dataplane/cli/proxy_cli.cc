#include "dataplane/cli/proxy_cli.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "common/file.h"
#include "common/build_info.h"

namespace kwd::cli {
namespace {

// A secret file's contents without surrounding whitespace (a trailing newline
// from an editor or `echo` is not part of the secret).
bool ReadTrimmedFile(const std::string& path, std::string* out, std::string* error) {
  std::string contents;
  if (!ReadWholeFile(path, &contents, error)) {
    return false;
  }
  size_t begin = contents.find_first_not_of(" \t\r\n");
  size_t end = contents.find_last_not_of(" \t\r\n");
  *out = begin == std::string::npos ? std::string() : contents.substr(begin, end - begin + 1);
  return true;
}

}  // namespace

bool LoadAffinityKey(const std::string& key_file, std::string* key, bool* development,
                     std::string* error) {
  *development = false;
  if (!key_file.empty()) {
    if (!ReadTrimmedFile(key_file, key, error)) {
      *error = "cannot read affinity key file: " + *error;
      return false;
    }
    if (key->empty()) {
      *error = "affinity key file " + key_file + " is empty";
      return false;
    }
    return true;
  }
  if (const char* env = std::getenv("KWD_AFFINITY_KEY"); env != nullptr && *env != '\0') {
    *key = env;
    return true;
  }
  *key = kDevelopmentAffinityKey;
  *development = true;
  return true;
}

bool LoadAdminToken(const std::string& path, std::string* token, std::string* error) {
  if (!ReadTrimmedFile(path, token, error)) {
    *error = "--admin-token-file: " + *error;
    return false;
  }
  if (token->empty()) {
    *error = "--admin-token-file: " + path + " is empty";
    return false;
  }
  for (char c : *token) {
    if (c < 0x21 || c > 0x7e) {
      *error = "--admin-token-file: the token in " + path +
               " may hold only visible ASCII characters (no spaces or control bytes)";
      return false;
    }
  }
  return true;
}

namespace {

constexpr const char kUsage[] =
    "usage: kwd-proxy <command> [flags]\n"
    "\n"
    "commands:\n"
    "  serve     run the proxy (--snapshot FILE | --controller HOST:PORT)\n"
    "  explain   show how the proxy would route a request (--snapshot FILE --url URL)\n"
    "  version   print the version and git revision (also --version)\n"
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
  if (command == "version" || command == "--version") {
    std::cout << VersionLine("kwd-proxy") << "\n";
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
