#pragma once

// The SAP profile file (sapwebdisp.pfl, instance and DEFAULT profiles): a
// pure parser of untrusted text, and the `$(NAME)` substitution of values.
//
// Grammar (SAP's, with the choices made where SAP does not say):
// - one `name = value` per line; spaces around the name and value are
//   dropped; the value may be empty;
// - `#` at the start of a line, or after a space or TAB, starts a comment
//   that runs to the end of the line (so `PORT=80 # main` is `PORT=80`, and
//   a `#` inside a word such as `a#b` stays);
// - blank lines are ignored; CRLF and LF both end a line; a UTF-8 byte order
//   mark at the start is dropped; a line without `=` is reported and skipped;
// - a name defined twice: the later definition wins (as SAP reads the file
//   top to bottom), the earlier one is reported as left out.

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::importer {

// A profile larger than this is refused (SAP profiles are a few KiB).
inline constexpr std::size_t kMaxProfileBytes = 1024 * 1024;
// A value expanded beyond this (nested `$(...)`) is cut and reported.
inline constexpr std::size_t kMaxExpandedBytes = 64 * 1024;
// Nesting depth of `$(...)` references.
inline constexpr int kMaxExpansionDepth = 16;

struct ProfileEntry {
  int line = 0;           // 1-based
  std::string name;       // as written (SAP names are case-sensitive in files)
  std::string raw_value;  // before `$(...)` substitution
};

struct ProfileProblem {
  int line = 0;
  std::string message;  // control characters escaped
};

struct ParsedProfile {
  std::vector<ProfileEntry> entries;  // file order, every definition
  std::vector<ProfileProblem> problems;
};

ParsedProfile ParseProfile(std::string_view text);

// Substitutes every `$(NAME)` in `value` from `variables`, recursively
// (a variable's value may name others). An unknown name, a cycle, an
// unclosed `$(`, too deep a nesting or a result over kMaxExpandedBytes is
// added to `unresolved` (once per name) and the reference becomes "".
std::string ExpandValue(std::string_view value, const std::map<std::string, std::string>& variables,
                        std::vector<std::string>* unresolved);

// A vector parameter `<base>_<xx>`: "icm/server_port_3" gives base
// "icm/server_port" and index 3. False when the name has no numeric suffix
// (or one too long to be an index). `leading_zero` is set for "_01".
bool SplitIndexed(std::string_view name, std::string* base, int* index, bool* leading_zero);

// The comma-separated `KEY=VALUE` options of a parameter value such as
// `PROT=HTTP, PORT=80, TIMEOUT=60`: keys upper-cased, values trimmed; a key
// given twice keeps the first value and is listed in `duplicates`; an item
// without `=` is listed in `malformed`.
struct OptionList {
  std::vector<std::pair<std::string, std::string>> options;  // in order
  std::vector<std::string> duplicates;
  std::vector<std::string> malformed;

  const std::string* Find(std::string_view key) const;
};
OptionList ParseOptions(std::string_view value);

}  // namespace kwd::importer
