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
#include <utility>
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

// For a whole profile: `$(NAME)` references resolved (each one counts, also
// one served from the memo), and bytes produced by expansion. Beyond either
// the expander stops: a profile of a few hundred bytes can otherwise name
// 10^8 references whose expansion is empty, so that no byte bound trips.
inline constexpr std::size_t kMaxExpansionSteps = 1000 * 1000;
inline constexpr std::size_t kMaxExpandedTotalBytes = 16 * 1024 * 1024;

// Substitutes every `$(NAME)` from `variables`, recursively (a variable's
// value may name others). An unknown name, a cycle, an unclosed `$(`, too
// deep a nesting or a result over kMaxExpandedBytes is added to
// `unresolved` (once per name per value) and the reference becomes "".
// Each name's expansion is memoised for the expander's life (unless it met
// a cycle, the depth bound or the size bound, which depend on where it was
// referenced from), so one profile costs one expansion per name. Once the
// budget (kMaxExpansionSteps, kMaxExpandedTotalBytes) is spent, `exhausted()`
// is true and every later value expands to what was produced so far, or "".
class ValueExpander {
 public:
  explicit ValueExpander(std::map<std::string, std::string> variables)
      : variables_(std::move(variables)) {}

  std::string Expand(std::string_view value, std::vector<std::string>* unresolved);

  bool exhausted() const { return exhausted_; }
  std::size_t steps() const { return steps_; }  // references resolved so far
  std::size_t bytes() const { return bytes_; }  // bytes produced so far

 private:
  struct Memo {
    std::string value;
    std::vector<std::string> problems;  // unknown names, unclosed `$(`
  };
  bool ExpandInto(std::string_view value, std::string* out, int depth);
  void Report(const std::string& what, bool depends_on_context);
  bool Spend(std::size_t steps, std::size_t bytes);

  std::map<std::string, std::string> variables_;
  std::map<std::string, Memo> memo_;
  std::vector<std::string> stack_;     // names being expanded, for cycles
  std::vector<std::string> trail_;     // every problem met, in order
  std::size_t context_problems_ = 0;   // cycles, depth and size bounds met
  std::vector<std::string>* unresolved_ = nullptr;
  std::size_t steps_ = 0;
  std::size_t bytes_ = 0;
  bool exhausted_ = false;
};

// One value with a fresh ValueExpander; a spent budget is added to
// `unresolved`.
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
