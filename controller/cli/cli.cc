#include "controller/cli/cli.h"

#include <iostream>
#include <sstream>

#include "common/build_info.h"
#include "common/file.h"
#include "common/snapshot_io.h"
#include "controller/cli/import.h"
#include "controller/cli/serve.h"
#include "controller/compile/compile.h"
#include "controller/source/dir_source.h"

namespace kwd::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: kwd-controller <command> [flags]\n"
    "\n"
    "commands:\n"
    "  serve     --source=dir:DIR | --source=kube   serve snapshots to proxies\n"
    "  compile   --source=dir:DIR | -f FILE         print the snapshot as JSON on stdout\n"
    "  validate  --source=dir:DIR | -f FILE|-       print problems per object; exit 1 if any\n"
    "  import    --profile FILE [--files DIR] [-o DIR]\n"
    "                                               translate an SAP Web Dispatcher profile\n"
    "  version                                      print the version and git revision\n"
    "  ensure-affinity-key --namespace NS --secret NAME\n"
    "                                               create the proxies' key Secret once\n"
    "\n"
    "Run 'kwd-controller <command> --help' for the flags of a command.\n";

constexpr std::string_view kCompileUsage =
    "usage: kwd-controller compile --source=dir:DIR | -f FILE [-f FILE...]\n"
    "\n"
    "Reads every *.yaml/*.yml under DIR (LogonGroup, UrlMapping, EndpointSlice, Pod),\n"
    "or the files given with -f (\"-f -\" reads standard input),\n"
    "compiles them and prints the routing snapshot as JSON on stdout. Invalid objects\n"
    "are reported on stderr and left out. Exit 0 on success, 1 when a file cannot be\n"
    "loaded (e.g. a YAML syntax error), 2 on a usage error.\n";

constexpr std::string_view kValidateUsage =
    "usage: kwd-controller validate --source=dir:DIR | -f FILE [-f FILE...]\n"
    "\n"
    "Reads every *.yaml/*.yml under DIR, or the files given with -f (\"-f -\" reads\n"
    "standard input, e.g. `helm template ... | kwd-controller validate -f -`), and\n"
    "prints one line per problem per object,\n"
    "or \"ok: N objects\" when there is none. Strict: an unknown field, a duplicate\n"
    "key, a YAML anchor or alias and a misspelt dispatch.kwd.io kind are problems,\n"
    "each naming file:line of the field and its path. Exit 0 when clean, 1 on\n"
    "problems, 2 on a usage error.\n";

struct DirCommandFlags {
  std::string dir;
  std::vector<std::string> files;  // -f FILE; "-" is standard input
};

// Parses the flags of `compile`/`validate`. Returns an exit code to stop
// with (help or usage error), or nullopt to go on.
std::optional<int> ParseDirCommandFlags(std::string_view command, std::string_view usage,
                                        const std::vector<std::string>& args, std::ostream& out,
                                        std::ostream& err, DirCommandFlags* flags) {
  std::optional<std::string> source;
  auto usage_error = [&](const std::string& message) {
    err << "kwd-controller " << command << ": " << message << "\n"
        << "Run 'kwd-controller " << command << " --help' for usage.\n";
    return 2;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (IsHelp(arg)) {
      out << usage;
      return 0;
    }
    if (arg.substr(0, 9) == "--source=") {
      source = std::string(arg.substr(9));
    } else if (arg == "--source") {
      if (i + 1 >= args.size()) {
        return usage_error("--source needs a value (dir:DIR)");
      }
      source = args[++i];
    } else if (arg == "-f" || arg == "--filename") {
      if (i + 1 >= args.size()) {
        return usage_error(std::string(arg) + " needs a file name (or - for standard input)");
      }
      flags->files.push_back(args[++i]);
    } else if (arg.substr(0, 11) == "--filename=") {
      flags->files.push_back(std::string(arg.substr(11)));
    } else if (arg.substr(0, 1) == "-") {
      return usage_error("unknown flag " + std::string(arg));
    } else {
      return usage_error("unexpected argument " + std::string(arg));
    }
  }
  if (source && !flags->files.empty()) {
    return usage_error("give either --source=dir:DIR or -f FILE, not both");
  }
  if (!flags->files.empty()) {
    return std::nullopt;
  }
  if (!source) {
    return usage_error("missing --source=dir:DIR or -f FILE");
  }
  std::string error;
  auto spec = ParseSource(*source, &error);
  if (!spec) {
    return usage_error(error);
  }
  if (spec->type != SourceSpec::Type::kDir) {
    return usage_error("only --source=dir:DIR is supported here");
  }
  flags->dir = spec->dir;
  return std::nullopt;
}

std::string ConditionLine(const compile::ObjectStatus& status,
                          const compile::Condition& condition) {
  return status.kind + " " + status.namespace_ + "/" + status.name + ": " + condition.type + "=" +
         condition.status + " " + condition.reason + ": " + condition.message;
}

// Loads and reports load problems: notes go to `notes`, errors to `errors`
// (prefixed when `error_prefix` is set). Returns whether loading succeeded.
bool Load(const DirCommandFlags& flags, source::LoadResult* result, std::ostream& errors,
          std::string_view error_prefix, std::ostream& notes) {
  if (flags.files.empty()) {
    *result = source::LoadDirectory(flags.dir);
  }
  for (const std::string& file : flags.files) {
    std::string text;
    std::string read_error;
    if (file == "-") {
      std::ostringstream in;
      in << std::cin.rdbuf();
      source::LoadYamlText(in.str(), "<stdin>", result);
      continue;
    }
    if (!ReadWholeFile(file, &text, &read_error)) {
      result->problems.push_back(
          {source::LoadProblem::Severity::kError, file, 0, "cannot read: " + read_error});
      continue;
    }
    source::LoadYamlText(text, file, result);
  }
  for (const auto& problem : result->problems) {
    if (problem.is_error()) {
      errors << error_prefix << problem.ToString() << "\n";
    } else {
      notes << "note: " << problem.ToString() << "\n";
    }
  }
  return !result->has_errors();
}

// A compiled snapshot that breaks its own invariants is a compiler bug: stop
// rather than hand a proxy something it will reject.
bool CheckCompiled(const compile::CompileResult& compiled, std::ostream& err) {
  auto problems = CheckSnapshot(compiled.snapshot);
  for (const auto& problem : problems) {
    err << "internal error: compiled snapshot is inconsistent: " << problem << "\n";
  }
  return problems.empty();
}

int RunCompile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  DirCommandFlags flags;
  if (auto code = ParseDirCommandFlags("compile", kCompileUsage, args, out, err, &flags)) {
    return *code;
  }
  source::LoadResult loaded;
  if (!Load(flags, &loaded, err, "error: ", err)) {
    return 1;
  }
  compile::CompileResult compiled = compile::Compile(loaded.objects);
  for (const auto& status : compiled.statuses) {
    for (const auto& condition : status.conditions) {
      if (condition.status != "True") {
        err << "warning: " << ConditionLine(status, condition) << "\n";
      }
    }
  }
  if (!CheckCompiled(compiled, err)) {
    return 1;
  }
  out << SnapshotToJson(compiled.snapshot) << "\n";
  return 0;
}

int RunValidate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  DirCommandFlags flags;
  if (auto code = ParseDirCommandFlags("validate", kValidateUsage, args, out, err, &flags)) {
    return *code;
  }
  source::LoadResult loaded;
  bool clean = Load(flags, &loaded, out, "", err);
  compile::CompileResult compiled = compile::Compile(loaded.objects);
  for (const auto& status : compiled.statuses) {
    for (const auto& condition : status.conditions) {
      if (condition.status != "True") {
        out << ConditionLine(status, condition) << "\n";
        clean = false;
      }
    }
  }
  if (!CheckCompiled(compiled, err)) {
    return 1;
  }
  if (!clean) {
    return 1;
  }
  out << "ok: " << loaded.objects.size() << " objects\n";
  return 0;
}

}  // namespace

bool IsHelp(std::string_view arg) {
  return arg == "-h" || arg == "--help";
}

std::optional<SourceSpec> ParseSource(std::string_view value, std::string* error) {
  if (value == "kube") {
    return SourceSpec{SourceSpec::Type::kKube, ""};
  }
  if (value.substr(0, 4) == "dir:") {
    std::string_view dir = value.substr(4);
    if (dir.empty()) {
      *error = "--source=dir: needs a directory (dir:DIR)";
      return std::nullopt;
    }
    return SourceSpec{SourceSpec::Type::kDir, std::string(dir)};
  }
  *error = "--source must be dir:DIR or kube, got \"" + std::string(value) + "\"";
  return std::nullopt;
}

int RunController(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << kUsage;
    return 2;
  }
  const std::string& command = args.front();
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (IsHelp(command)) {
    out << kUsage;
    return 0;
  }
  if (command == "version" || command == "--version") {
    out << VersionLine("kwd-controller") << "\n";
    return 0;
  }
  if (command == "ensure-affinity-key") {
    return RunEnsureAffinityKey(rest, out, err);
  }
  if (command == "compile") {
    return RunCompile(rest, out, err);
  }
  if (command == "validate") {
    return RunValidate(rest, out, err);
  }
  if (command == "import") {
    return RunImport(rest, out, err);
  }
  if (command == "serve") {
    return RunServe(rest, out, err);
  }
  // DESIGN.md's standalone form `kwd-controller --source=dir:DIR` means serve.
  if (command.rfind("--source", 0) == 0) {
    return RunServe(args, out, err);
  }
  err << "kwd-controller: unknown command \"" << command << "\"\n\n" << kUsage;
  return 2;
}

int ControllerMain(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int code = RunController(args, std::cout, std::cerr);
  std::cout.flush();
  return code;
}

}  // namespace kwd::cli
