#include "controller/cli/import.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include "common/file.h"
#include "common/snapshot_io.h"
#include "controller/cli/cli.h"
#include "controller/importer/files_dir.h"
#include "controller/importer/importer.h"
#include "controller/importer/profile.h"
#include "controller/importer/yaml_writer.h"

namespace kwd::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kImportUsage =
    "usage: kwd-controller import --profile FILE [--files DIR] [-o DIR] [flags]\n"
    "\n"
    "Translates an SAP Web Dispatcher profile (sapwebdisp.pfl) and the files it names\n"
    "(permission table, URL map, group info, server info, icm/HTTP/mod_<xx> rule files)\n"
    "into kwd's SapSystem, LogonGroup and UrlMapping objects, the kwd-proxy serve flags\n"
    "and the Helm chart values for listeners, TLS, timeouts and sizes.\n"
    "\n"
    "Every parameter kwd cannot express is reported on stderr as\n"
    "  WARN file:line parameter: why\n"
    "and parameters translated with a difference (or not needed in kwd) as NOTE lines.\n"
    "\n"
    "flags:\n"
    "  --profile FILE         the profile to translate (required)\n"
    "  --files DIR            where the files the profile names are: a name is looked up\n"
    "                         as DIR/<path as written> (relative paths), then as\n"
    "                         DIR/<file name> (default: the profile's directory); a\n"
    "                         name that resolves outside DIR (a link out of it, or any\n"
    "                         absolute link) or is not a regular file is not read (WARN)\n"
    "  -o, --output DIR       write DIR/resources/{sapsystems,logongroups,urlmappings}.yaml,\n"
    "                         DIR/values.yaml (chart values) and DIR/proxy-flags.txt\n"
    "                         (default: the objects on stdout, flags and values as\n"
    "                         comments above them)\n"
    "  --namespace NS         namespace of the objects (default default)\n"
    "  --var NAME=VALUE       a value for $(NAME) that the profile does not define, e.g.\n"
    "                         --var DIR_INSTANCE=/usr/sap/W01/W00 (repeatable)\n"
    "  --system-name NAME     SapSystem name of a single-system profile (rdisp/mshost,\n"
    "                         which has no SID; default sap)\n"
    "  --tls-secret NAME      Secret of the HTTPS listener's certificate in the chart\n"
    "                         values (default kwd-tls)\n"
    "\n"
    "Exit 0 when every parameter was translated, 3 when something was left out (the\n"
    "WARN lines say what), 1 when the profile or a file it names cannot be read, or\n"
    "the objects would pass the size bounds (nothing is written) or -o DIR cannot be\n"
    "written, 2 on a usage error.\n";

struct ImportFlags {
  std::string profile;
  std::string files_dir;
  std::string output_dir;
  importer::ImportOptions options;
};

std::string FlagLine(const std::vector<std::string>& flags) {
  std::string line;
  for (const auto& flag : flags) {
    line += (line.empty() ? "" : " ") + flag;
  }
  return line;
}

std::string Commented(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    out += "#   " + text.substr(start, end - start) + "\n";
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

bool WriteFile(const fs::path& path, const std::string& text, std::ostream& err) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) {
    err << "kwd-controller import: cannot write " << path.string() << "\n";
    return false;
  }
  return true;
}

}  // namespace

int RunImport(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ImportFlags flags;
  auto usage_error = [&](const std::string& message) {
    err << "kwd-controller import: " << message << "\n"
        << "Run 'kwd-controller import --help' for usage.\n";
    return 2;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (IsHelp(arg)) {
      out << kImportUsage;
      return 0;
    }
    std::string value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_inline = true;
    }
    auto take = [&](std::string* target) {
      if (has_inline) {
        *target = value;
        return true;
      }
      if (i + 1 >= args.size()) {
        return false;
      }
      *target = args[++i];
      return true;
    };
    std::string* target = nullptr;
    std::string var;
    if (arg == "--profile") {
      target = &flags.profile;
    } else if (arg == "--files") {
      target = &flags.files_dir;
    } else if (arg == "-o" || arg == "--output") {
      target = &flags.output_dir;
    } else if (arg == "--namespace") {
      target = &flags.options.namespace_;
    } else if (arg == "--system-name") {
      target = &flags.options.system_name;
    } else if (arg == "--tls-secret") {
      target = &flags.options.tls_secret;
    } else if (arg == "--var") {
      target = &var;
    } else {
      return usage_error((arg.rfind("-", 0) == 0 ? "unknown flag " : "unexpected argument ") + arg);
    }
    if (!take(target) || target->empty()) {
      return usage_error(arg + " needs a value");
    }
    if (target == &var) {
      std::size_t equals = var.find('=');
      if (equals == std::string::npos || equals == 0) {
        return usage_error("--var needs NAME=VALUE, got \"" + var + "\"");
      }
      flags.options.variables[var.substr(0, equals)] = var.substr(equals + 1);
    }
  }
  if (flags.profile.empty()) {
    return usage_error("missing --profile FILE");
  }
  if (!IsObjectName(flags.options.namespace_)) {
    return usage_error("--namespace \"" + flags.options.namespace_ + "\" is not a namespace name");
  }
  if (importer::KubernetesName(flags.options.system_name) != flags.options.system_name) {
    return usage_error("--system-name \"" + flags.options.system_name +
                       "\" is not a lower-case name (a-z, 0-9, -)");
  }
  if (!IsObjectName(flags.options.tls_secret)) {
    return usage_error("--tls-secret \"" + flags.options.tls_secret + "\" is not a Secret name");
  }

  std::string profile_text;
  std::string error;
  std::error_code ec;
  if (fs::exists(flags.profile, ec) && !fs::is_regular_file(flags.profile, ec)) {
    err << "ERROR " << flags.profile << ": not a regular file\n";
    return 1;
  }
  if (fs::is_regular_file(flags.profile, ec) &&
      fs::file_size(flags.profile, ec) > importer::kMaxProfileBytes) {
    err << "ERROR " << flags.profile << ": larger than " << importer::kMaxProfileBytes
        << " bytes: not an SAP profile\n";
    return 1;
  }
  if (!ReadWholeFile(flags.profile, &profile_text, &error)) {
    err << "ERROR " << flags.profile << ": " << error << "\n";
    return 1;
  }
  fs::path files_dir =
      flags.files_dir.empty() ? fs::path(flags.profile).parent_path() : fs::path(flags.files_dir);
  if (files_dir.empty()) {
    files_dir = ".";
  }
  // Named files must resolve inside this directory (links included).
  if (fs::path canonical = fs::canonical(files_dir, ec); !ec) {
    files_dir = canonical;
  }
  importer::FileReader reader = [&](const std::string& reference, std::string* text,
                                    std::string* shown, std::string* read_error) {
    return importer::ReadFromDir(files_dir, reference, text, shown, read_error);
  };
  importer::ImportResult result =
      importer::Import(profile_text, flags.profile, reader, flags.options);
  int warnings = 0;
  int notes = 0;
  for (const auto& diagnostic : result.diagnostics) {
    err << diagnostic.ToString() << "\n";
    warnings += diagnostic.level == importer::Diagnostic::Level::kWarn ? 1 : 0;
    notes += diagnostic.level == importer::Diagnostic::Level::kNote ? 1 : 0;
  }
  int code = result.ExitCode();
  if (code == 1) {
    err << "import: nothing written (ERROR lines above)\n";
    return 1;
  }

  std::map<std::string, std::string> by_kind;  // kind -> YAML documents
  for (const auto& object : result.objects) {
    std::string& text = by_kind[object["kind"].get<std::string>()];
    text += (text.empty() ? "" : "---\n") + importer::ToYaml(object);
  }
  std::string flag_line = FlagLine(result.proxy_flags);
  std::string values =
      result.chart_values.empty() ? std::string("{}\n") : importer::ToYaml(result.chart_values);
  std::string summary = std::to_string(result.parameters) +
                        " parameters: " + std::to_string(result.translated) + " translated (" +
                        std::to_string(notes) + " NOTE lines), " +
                        std::to_string(result.parameters - result.translated) +
                        " with WARN lines; " + std::to_string(result.objects.size()) + " objects";
  if (!flags.output_dir.empty()) {
    fs::path dir(flags.output_dir);
    fs::create_directories(dir / "resources", ec);
    if (ec) {
      err << "kwd-controller import: cannot create " << (dir / "resources").string() << ": "
          << ec.message() << "\n";
      return 1;
    }
    static const std::pair<const char*, const char*> kFiles[] = {
        {"SapSystem", "sapsystems.yaml"},
        {"LogonGroup", "logongroups.yaml"},
        {"UrlMapping", "urlmappings.yaml"}};
    for (const auto& [kind, file] : kFiles) {
      fs::remove(dir / "resources" / file, ec);
      auto it = by_kind.find(kind);
      if (it != by_kind.end() && !WriteFile(dir / "resources" / file, it->second, err)) {
        return 1;
      }
    }
    if (!WriteFile(dir / "values.yaml",
                   "# Helm values for the kwd chart, from " + flags.profile + "\n" + values, err) ||
        !WriteFile(dir / "proxy-flags.txt", flag_line + "\n", err)) {
      return 1;
    }
    err << "import: " << summary << "; written to " << dir.string() << "\n";
  } else {
    out << "# kwd-controller import --profile " << flags.profile << "\n";
    out << "# kwd-proxy serve flags:\n#   " << (flag_line.empty() ? "(none)" : flag_line) << "\n";
    out << "# Helm chart values (-o DIR writes them to DIR/values.yaml):\n" << Commented(values);
    bool first = true;
    for (const char* kind : {"SapSystem", "LogonGroup", "UrlMapping"}) {
      auto it = by_kind.find(kind);
      if (it == by_kind.end()) {
        continue;
      }
      out << (first ? "" : "---\n") << it->second;
      first = false;
    }
    err << "import: " << summary << "\n";
  }
  return code;
}

}  // namespace kwd::cli
