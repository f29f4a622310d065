#pragma once

// The kwd-controller command line: `serve`, `compile` and `validate`.

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::cli {

// What `--source=` names.
struct SourceSpec {
  enum class Type { kDir, kKube };
  Type type = Type::kDir;
  std::string dir;  // for kDir
};

// Parses "dir:DIR" or "kube". On failure returns nullopt and sets `error`.
std::optional<SourceSpec> ParseSource(std::string_view value, std::string* error);

// Runs the command line `args` (without the program name) and returns the
// process exit code: 0 success, 1 problems found or input unreadable, 2 usage.
int RunController(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

int ControllerMain(int argc, char** argv);

// One flag of a command line: "--name value" or "--name=value" ("-h" and
// "--help" come as name "--help" without a value).
struct FlagValue {
  std::string name;
  std::string value;
};
// Splits `args` into flags that all take a value (the ensure-* commands');
// false with `error` ("--x needs a value") when the last one has none.
bool SplitFlags(const std::vector<std::string>& args, std::vector<FlagValue>* out,
                std::string* error);

// "-h" or "--help", for every subcommand.
bool IsHelp(std::string_view arg);

// `kwd-controller ensure-affinity-key` (args without the command name).
int RunEnsureAffinityKey(const std::vector<std::string>& args, std::ostream& out,
                         std::ostream& err);

// `kwd-controller ensure-grpc-certs` (args without the command name).
int RunEnsureGrpcCerts(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kwd::cli
