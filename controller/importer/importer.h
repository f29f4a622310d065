#pragma once

// `kwd-controller import`: translates an SAP Web Dispatcher profile, and the
// files it names (permission table, URL map, group info, server info, rule
// files), into kwd's objects (SapSystem, LogonGroup, UrlMapping), the
// kwd-proxy flags and the Helm chart values for listeners, TLS, timeouts and
// sizes. Pure: text in, objects and diagnostics out; files are read through
// the `FileReader` the caller passes (the CLI looks them up in --files DIR).
//
// Every profile parameter ends with exactly one fate: translated (silently),
// translated with a NOTE (a semantic difference, or not needed in kwd), or
// left out with a WARN saying why. ERROR is for input that cannot be read.
// The full table of what becomes what is in docs/migrating-from-sap-web-dispatcher.md.

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::importer {

// A file named by the profile larger than this is refused.
inline constexpr std::size_t kMaxReferencedFileBytes = 4 * 1024 * 1024;
// All files named by the profile together (a file named twice is read once).
inline constexpr std::size_t kMaxReferencedTotalBytes = 64 * 1024 * 1024;
// All objects together, as compact JSON: charged as each object is built, so
// that a profile whose rule files and permission table are copied into
// every SRCVHOST system's UrlMapping (systems x rules) is refused before it
// takes the memory, not after.
inline constexpr std::size_t kMaxOutputBytes = 16 * 1024 * 1024;

struct Diagnostic {
  enum class Level { kNote, kWarn, kError };
  Level level = Level::kWarn;
  std::string file;       // the file the line is in (profile or a named file)
  int line = 0;           // 1-based; 0: the file as a whole
  int column = 0;         // 1-based; 0: the line as a whole
  std::string parameter;  // the profile parameter concerned ("" for none)
  std::string message;

  // "WARN file:line[:column] parameter: message" (control characters escaped).
  std::string ToString() const;
};

// Reads the file a profile value names (`reference` as written after
// `$(...)` substitution, e.g. "$(DIR_INSTANCE)/sec/permtab.txt" becomes
// "/usr/sap/W01/sec/permtab.txt", or "file://urlinfo.txt" without the
// scheme). Returns false with `error` set when it cannot; `shown_name` is
// how diagnostics name the file.
//   kRead:       `text` holds the file;
//   kUnreadable: it cannot be read (missing, too large): an ERROR, nothing
//                is written;
//   kRefused:    the reader will not read it (a link out of the files
//                directory, not a regular file): a WARN, the parameter is
//                left out and the rest is translated.
enum class ReadStatus { kRead, kUnreadable, kRefused };
using FileReader = std::function<ReadStatus(const std::string& reference, std::string* text,
                                            std::string* shown_name, std::string* error)>;

struct ImportOptions {
  std::string namespace_ = "default";
  // Values for `$(NAME)` that the profile does not define (DIR_INSTANCE, ...).
  std::map<std::string, std::string> variables;
  // Name of the SapSystem of a single-system profile (rdisp/mshost), which
  // carries no SID.
  std::string system_name = "sap";
  // Secret holding the certificate of the HTTPS listener (chart values).
  std::string tls_secret = "kwd-tls";
};

struct ImportResult {
  // In output order: SapSystems, LogonGroups, UrlMappings, each by name.
  std::vector<nlohmann::ordered_json> objects;
  // kwd-proxy serve flags, e.g. {"--listen", "0.0.0.0:8000", ...}.
  std::vector<std::string> proxy_flags;
  // Helm chart values (the `proxy:` subtree and what it needs).
  nlohmann::ordered_json chart_values = nlohmann::ordered_json::object();
  std::vector<Diagnostic> diagnostics;  // profile order, then named files
  int parameters = 0;                   // profile parameters read
  int translated = 0;                   // of which translated (with or without NOTE)
  // Bytes of the objects built (compact JSON); past kMaxOutputBytes the
  // import stops with an ERROR and `objects` is empty.
  std::size_t output_bytes = 0;

  bool HasErrors() const;
  bool HasWarnings() const;
  // 1 on unreadable input or output over the bounds, 3 when something was
  // left out, else 0.
  int ExitCode() const;
};

ImportResult Import(std::string_view profile_text, const std::string& profile_name,
                    const FileReader& read_file, const ImportOptions& options);

// Lower-case DNS-1123 label from an SAP name ("Z_FIORI" -> "z-fiori"); ""
// when nothing usable is left.
std::string KubernetesName(std::string_view sap_name);

}  // namespace kwd::importer
