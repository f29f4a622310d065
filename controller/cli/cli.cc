#include "controller/cli/cli.h"

#include <algorithm>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include "common/build_info.h"
#include "common/file.h"
#include "common/snapshot_io.h"
#include "controller/cli/import.h"
#include "controller/cli/serve.h"
#include "controller/compile/compile.h"
#include "controller/schema/schema.h"
#include "controller/source/dir_source.h"

namespace kwd::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: kwd-controller <command> [flags]\n"
    "\n"
    "commands:\n"
    "  serve     --source=dir:DIR | --source=kube   serve snapshots to proxies\n"
    "  compile   --source=dir:DIR | -f FILE         print the snapshot as JSON on stdout\n"
    "  validate  --source=dir:DIR | -f FILE|-       print every problem, one line each; exit 1\n"
    "            [--live] [--quiet]                 if any\n"
    "  import    --profile FILE [--files DIR] [-o DIR]\n"
    "                                               translate an SAP Web Dispatcher profile\n"
    "  version                                      print the version and git revision\n"
    "  ensure-affinity-key --namespace NS --secret NAME\n"
    "                                               create the proxies' key Secret once\n"
    "  ensure-grpc-certs --namespace NS --ca-secret NAME --controller-secret NAME\n"
    "                    --proxy-secret NAME --dns-name NAME...\n"
    "                                               make or renew the gRPC mTLS certificates\n"
    "\n"
    "Run 'kwd-controller <command> --help' for the flags of a command.\n";

constexpr std::string_view kCompileUsage =
    "usage: kwd-controller compile --source=dir:DIR | -f FILE [-f FILE...]\n"
    "\n"
    "Reads every *.yaml/*.yml under DIR (LogonGroup, UrlMapping, EndpointSlice, Pod, Secret),\n"
    "or the files given with -f (\"-f -\" reads standard input),\n"
    "compiles them and prints the routing snapshot as JSON on stdout. Invalid objects\n"
    "are reported on stderr and left out. Exit 0 on success, 1 when a file cannot be\n"
    "loaded (e.g. a YAML syntax error), 2 on a usage error.\n";

constexpr std::string_view kValidateUsage =
    "usage: kwd-controller validate --source=dir:DIR | -f FILE [-f FILE...] [--live] [--quiet]\n"
    "\n"
    "Reads every *.yaml/*.yml under DIR, or the files given with -f (\"-f -\" reads\n"
    "standard input, e.g. `helm template ... | kwd-controller validate -f -`), and\n"
    "prints every problem of every object in one run, one line each, on stdout:\n"
    "\n"
    "  FILE:LINE:COLUMN: Kind namespace/name: field.path: message[, did you mean \"x\"?]\n"
    "\n"
    "or \"ok: N objects\" when there is none. Objects are checked against the CRD\n"
    "schemas built into this binary (unknown fields, types, enum values, ranges,\n"
    "required fields) and by the compiler (everything the controller would refuse,\n"
    "with the condition reason in brackets). Also problems: a duplicate key, a YAML\n"
    "anchor or alias, a misspelt dispatch.kwd.io kind.\n"
    "\n"
    "flags:\n"
    "  --live    also report what depends on the cluster's live state and is only\n"
    "            noted otherwise: NoEndpoints (no EndpointSlice for a Service),\n"
    "            NoServerList, NoUrlMap (a SapSystem not polled yet), SecretNotFound\n"
    "            (a UrlMapping's spec.tls Secret, usually made in the cluster)\n"
    "  --quiet   print no notes on stderr (objects of other kinds are counted in one\n"
    "            note otherwise, e.g. the Deployments of `helm template`)\n"
    "\n"
    "Exit 0 when clean, 1 on problems, 2 on a usage error.\n";

struct DirCommandFlags {
  std::string dir;
  std::vector<std::string> files;  // -f FILE; "-" is standard input
  bool live = false;               // validate --live
  bool quiet = false;              // validate --quiet
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
    } else if (command == "validate" && arg == "--live") {
      flags->live = true;
    } else if (command == "validate" && (arg == "--quiet" || arg == "-q")) {
      flags->quiet = true;
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
          std::string_view error_prefix, std::ostream& notes,
          const source::LoadOptions& options = {}) {
  if (flags.files.empty()) {
    *result = source::LoadDirectory(flags.dir, options);
  }
  for (const std::string& file : flags.files) {
    std::string text;
    std::string read_error;
    if (file == "-") {
      std::ostringstream in;
      in << std::cin.rdbuf();
      source::LoadYamlText(in.str(), "<stdin>", result, options);
      continue;
    }
    if (!ReadWholeFile(file, &text, &read_error)) {
      result->problems.push_back(
          {source::LoadProblem::Severity::kError, file, 0, "cannot read: " + read_error});
      continue;
    }
    source::LoadYamlText(text, file, result, options);
  }
  if (options.schemas != nullptr) {
    return !result->has_errors();  // validate prints them itself
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
  // Certificates (UrlMapping.spec.tls Secrets) are judged valid or expired now.
  loaded.objects.set_now_unix_seconds(static_cast<std::int64_t>(std::time(nullptr)));
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

// Reasons that depend on the cluster's live state, which a file cannot
// show: notes unless `validate --live`.
bool IsLiveStateReason(std::string_view reason) {
  return reason == compile::kReasonNoEndpoints || reason == compile::kReasonNoServerList ||
         reason == compile::kReasonNoUrlMap || reason == compile::kReasonSecretNotFound;
}

// "spec.rules[0].prefix" when `message` starts with a field path and ": ".
std::string LeadingPath(std::string_view message) {
  if (!message.starts_with("spec") && !message.starts_with("metadata") &&
      !message.starts_with("status")) {
    return "";
  }
  size_t end = 0;
  while (end < message.size() && message[end] != ':' && message[end] != ' ') {
    ++end;
  }
  if (message.substr(end, 2) != ": ") {
    return "";
  }
  return std::string(message.substr(0, end));
}

// The field a condition without a leading path is about, so that its line
// points there: the references the compiler could not resolve.
std::string ReasonPath(std::string_view kind, std::string_view reason) {
  if (kind == model::kLogonGroupKind) {
    if (reason == compile::kReasonNoEndpoints || reason == compile::kReasonPortNotFound) {
      return "spec.backend.service";
    }
    if (reason == compile::kReasonNoServerList || reason == compile::kReasonSapSystemNotFound) {
      return "spec.backend.sapSystem";
    }
  }
  if (kind == model::kUrlMappingKind &&
      (reason == compile::kReasonNoUrlMap || reason == compile::kReasonSapSystemNotFound)) {
    return "spec.fromSapSystem";
  }
  return "";
}

// One line of validate's report, sortable by where it points.
struct ReportLine {
  std::string file;  // "" when the object's file is unknown
  source::Position at;
  std::string text;  // without the "file:line:column: " prefix
  bool error = true;
  size_t order = 0;  // insertion order, the tie-break
};

std::string Prefixed(const ReportLine& line) {
  if (line.file.empty()) {
    return line.text;
  }
  std::string out = line.file;
  if (line.at.line > 0) {
    out += ":" + std::to_string(line.at.line);
    if (line.at.column > 0) {
      out += ":" + std::to_string(line.at.column);
    }
  }
  return out + ": " + line.text;
}

int RunValidate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  DirCommandFlags flags;
  if (auto code = ParseDirCommandFlags("validate", kValidateUsage, args, out, err, &flags)) {
    return *code;
  }
  source::LoadOptions options;
  options.schemas = &schema::Schemas::Builtin();
  options.locate = true;
  source::LoadResult loaded;
  Load(flags, &loaded, out, "", err, options);
  // Certificates (UrlMapping.spec.tls Secrets) are judged valid or expired now.
  loaded.objects.set_now_unix_seconds(static_cast<std::int64_t>(std::time(nullptr)));
  compile::CompileResult compiled = compile::Compile(loaded.objects);

  // Files in the order they were read; lines sort by file, line, column.
  std::map<std::string, size_t> file_order;
  auto order_of = [&](const std::string& file) {
    return file_order.emplace(file, file_order.size()).first->second;
  };
  std::vector<ReportLine> lines;
  auto add = [&](std::string file, source::Position at, std::string text, bool error) {
    order_of(file);
    lines.push_back({std::move(file), at, std::move(text), error, lines.size()});
  };

  // Schema problems by object and field: the compiler's word on the same
  // field replaces them (it names the reason), keeping their hint.
  std::map<std::pair<model::ObjectKey, std::string>, size_t> schema_problems;
  for (size_t i = 0; i < loaded.problems.size(); ++i) {
    const source::LoadProblem& problem = loaded.problems[i];
    if (problem.object && !problem.path.empty()) {
      schema_problems.emplace(std::make_pair(*problem.object, problem.path), i);
    }
  }
  std::vector<bool> replaced(loaded.problems.size(), false);
  size_t live_notes = 0;
  for (const auto& status : compiled.statuses) {
    const model::ObjectKey key{status.kind, status.namespace_, status.name};
    auto located = loaded.located.find(key);
    for (const auto& condition : status.conditions) {
      if (condition.status == "True") {
        continue;
      }
      std::vector<compile::ConditionProblem> problems = condition.problems;
      if (problems.empty()) {
        problems.push_back({condition.reason, condition.message});
      }
      for (const auto& problem : problems) {
        std::string path = LeadingPath(problem.message);
        std::string message = problem.message;
        if (path.empty()) {
          path = ReasonPath(status.kind, problem.reason);
          if (!path.empty()) {
            message = path + ": " + message;
          }
        }
        std::string hint;
        if (auto it = schema_problems.find({key, path}); !path.empty() && it != schema_problems.end()) {
          replaced[it->second] = true;
          hint = loaded.problems[it->second].hint;
        }
        std::string text = key.ToString() + ": " + message;
        if (!hint.empty()) {
          text += ", did you mean \"" + hint + "\"?";
        }
        text += " [" + problem.reason + "]";
        const bool live = IsLiveStateReason(problem.reason);
        if (live && !flags.live) {
          ++live_notes;
        }
        if (located == loaded.located.end()) {
          add("", {}, std::move(text), !live || flags.live);
        } else {
          add(located->second.file, located->second.Of(path), std::move(text),
              !live || flags.live);
        }
      }
    }
  }
  std::map<std::string, size_t> skipped;  // kind -> objects kwd does not read
  for (size_t i = 0; i < loaded.problems.size(); ++i) {
    const source::LoadProblem& problem = loaded.problems[i];
    if (replaced[i]) {
      continue;
    }
    if (!problem.skipped_kind.empty()) {
      ++skipped[problem.skipped_kind];
      continue;
    }
    std::string text = problem.message;
    if (!problem.hint.empty()) {
      text += ", did you mean \"" + problem.hint + "\"?";
    }
    add(problem.file, {problem.line, problem.column}, std::move(text), problem.is_error());
  }
  std::stable_sort(lines.begin(), lines.end(), [&](const ReportLine& a, const ReportLine& b) {
    return std::tuple(file_order[a.file], a.at.line, a.at.column, a.order) <
           std::tuple(file_order[b.file], b.at.line, b.at.column, b.order);
  });
  size_t problems = 0;
  for (const ReportLine& line : lines) {
    if (line.error) {
      out << Prefixed(line) << "\n";
      ++problems;
    } else if (!flags.quiet) {
      err << "note: " << Prefixed(line) << "\n";
    }
  }
  if (!skipped.empty() && !flags.quiet) {
    size_t total = 0;
    std::string kinds;
    for (const auto& [kind, count] : skipped) {
      total += count;
      kinds += (kinds.empty() ? "" : ", ") + kind + " " + std::to_string(count);
    }
    err << "note: skipped " << total << " object" << (total == 1 ? "" : "s")
        << " of kinds kwd does not read (" << kinds << ")\n";
  }
  if (live_notes > 0 && !flags.quiet) {
    err << "note: " << live_notes << " of the notes above depend on the cluster's live state; "
        << "--live reports them as problems\n";
  }
  if (!CheckCompiled(compiled, err)) {
    return 1;
  }
  if (problems > 0) {
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
  if (command == "ensure-grpc-certs") {
    return RunEnsureGrpcCerts(rest, out, err);
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
  // The short standalone form `kwd-controller --source=dir:DIR` means serve.
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

bool SplitFlags(const std::vector<std::string>& args, std::vector<FlagValue>* out,
                std::string* error) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      out->push_back({"--help", ""});
      continue;
    }
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      out->push_back({arg.substr(0, eq), arg.substr(eq + 1)});
    } else if (i + 1 < args.size()) {
      out->push_back({arg, args[i + 1]});
      ++i;
    } else {
      *error = arg + " needs a value";
      return false;
    }
  }
  return true;
}

}  // namespace kwd::cli
