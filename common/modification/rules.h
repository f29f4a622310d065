#pragma once

// SAP Web Dispatcher modification rules (icm/HTTP/mod_<xx> action files):
// the parser, shared by the controller (to validate a UrlMapping's
// spec.modifications and report the line and column of a mistake) and the
// proxy (which parses the same text from the snapshot and compiles it once
// per snapshot, program.h). The structured YAML form (spec.modifications[].
// actions) is rendered to the same text (RenderAction) so both forms go
// through this one parser.
//
// The grammar (one rule per line; blank lines and lines starting with # are
// ignored; keywords, operation and option names are case-insensitive):
//
//   <op> <args...> [<option>,...]          a command (see Op)
//   if <string> [!]<compop> <pattern> [[and]|[or]]
//                                           a condition; a chain of them
//                                           (joined by [and]/[or], evaluated
//                                           strictly left to right) guards
//                                           the next statement
//   if ... <op> <args...> [options]         a condition and its command on one line
//   if ... begin  ...  end                  a guarded block
//   else <statement> | else begin ... end   what runs when the guard is false
//
// Arguments are separated by spaces; an argument holding spaces is written
// in double quotes ("a b", with \" and \\ inside). Strings may hold
// variables %{NAME}; replacements may hold back references $0..$9.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::modification {

// Limits on one rule file (hostile input stays bounded).
inline constexpr size_t kMaxRuleFileBytes = 1024 * 1024;
inline constexpr size_t kMaxStatements = 20000;
inline constexpr size_t kMaxPatternBytes = 4096;
inline constexpr int kMaxNesting = 32;
// `restart` starts again at the first rule at most this many times per
// request; one more answers 500 (a rule file that loops).
inline constexpr int kMaxRestarts = 16;

enum class Op : uint8_t {
  kNop,
  // Request headers.
  kRemoveHeader,
  kSetHeader,
  kSetHeaderIfEmpty,
  kAppendHeader,
  kRegRewriteHeader,  // icase: RegIRewriteHeader
  // Response headers (applied to the backend's response).
  kRemoveResponseHeader,
  kSetResponseHeader,
  kSetResponseHeaderIfEmpty,
  kAppendResponseHeader,
  kRegRewriteResponseHeader,
  // URL.
  kRewriteUrl,     // Reg[I]RewriteUrl: the decoded path
  kRewriteRawUrl,  // Reg[I]RewriteRawUrl: the path as received (percent-encoded)
  kRedirectUrl,    // Reg[I]RedirectUrl: answer 3xx, stop
  kForbiddenUrl,   // Reg[I]ForbiddenUrl: answer 403, stop
  kGoneUrl,        // Reg[I]GoneUrl: answer 410, stop
};
// The SAP name ("SetHeader", "RegRewriteUrl", ...), without the I variant.
std::string_view OpName(Op op);

// A piece of a string argument: literal text, a variable or a back reference.
struct Segment {
  enum class Kind : uint8_t { kLiteral, kVariable, kBackReference };
  enum class Variable : uint8_t {
    kNone,
    kHeader,  // HEADER:<name> and the HTTP_* names; `text` holds the header name (lowercase)
    kRequestMethod,
    kServerProtocol,  // "http" | "https"
    kPath,            // decoded path (PATH and PATH_TRANSLATED)
    kQueryString,
    kFormField,  // a query-string parameter; `text` holds its name
    kServerPort,
    kServerAddr,
    kRemoteAddr,  // REMOTE_ADDR and REMOTE_HOST
    kRemotePort,
    kRequestUri,  // path?query as it stands
  };
  Kind kind = Kind::kLiteral;
  Variable variable = Variable::kNone;
  int reference = 0;                 // $n
  bool case_sensitive_name = false;  // FormField: (vs FORMFIELD:)
  std::string text;

  bool operator==(const Segment&) const = default;
};

// A string argument as written, split into segments.
struct Text {
  std::string source;  // as written (unquoted), for messages and explain
  std::vector<Segment> segments;
  bool Constant() const {
    return segments.empty() ||
           (segments.size() == 1 && segments[0].kind == Segment::Kind::kLiteral);
  }
  bool operator==(const Text&) const = default;
};

struct Options {
  bool break_ = false;
  bool restart = false;
  bool noescape = false;
  bool qsappend = false;
  bool qsreplace = false;
  int code = 0;  // redirect status; 0: 302
  bool operator==(const Options&) const = default;
};

struct Action {
  Op op = Op::kNop;
  bool icase = false;      // the Reg I variants
  bool negate = false;     // the pattern was written !<pattern>
  std::string header;      // header operations: the name (lowercase)
  std::string pattern;     // regex operations
  Text value;              // header value / replacement / destination ("-": none)
  bool has_value = false;  // a destination other than "-"
  Options options;
  int line = 0;
  int column = 0;  // of the pattern (for a regex error), else of the operation
  int pattern_column = 0;
  bool operator==(const Action&) const = default;
};

enum class CompOp : uint8_t {
  kEqual,  // = (numeric when both sides are integers, else lexical)
  kNotEqual,
  kLess,
  kGreater,
  kLessEqual,
  kGreaterEqual,
  kRegMatch,
  kRegIMatch,
  kStrCmp,
  kStrICmp,
  kIpMatch,  // the subject is an IP address inside the CIDR (a.b.c.d/n, v6/n) or equal to it
};

enum class Join : uint8_t { kNone, kAnd, kOr };

struct Condition {
  Text subject;
  CompOp op = CompOp::kEqual;
  bool negate = false;      // !<compop>
  Text operand;             // the pattern (regmatch: its source is the regex)
  Join join = Join::kNone;  // joins this condition with the next one
  int line = 0;
  int pattern_column = 0;
  bool operator==(const Condition&) const = default;
};

struct Statement {
  std::vector<Condition> guard;  // empty: unconditional
  bool is_block = false;
  Action action;                     // !is_block
  std::vector<Statement> body;       // is_block
  std::vector<Statement> otherwise;  // else: one statement or a block's body
  bool has_else = false;
  int line = 0;
  bool operator==(const Statement&) const = default;
};

struct RuleFile {
  std::vector<Statement> statements;
  size_t action_count = 0;  // commands, all nesting levels
  bool operator==(const RuleFile&) const = default;
};

struct ParseError {
  int line = 0;    // 1-based; 0: the whole file
  int column = 0;  // 1-based
  std::string message;
  // "line 3, column 17: ..." (or the message alone for line 0).
  std::string ToString() const;
};

// Parses a rule file. Returns false with `error` set at the first mistake.
bool Parse(std::string_view text, RuleFile* out, ParseError* error);

// ASCII case-insensitive equality (names, keywords, header names).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// Header names the rules may not touch: framing and hop-by-hop headers,
// which the proxy owns (content-length, transfer-encoding, connection, ...).
bool IsProtectedHeader(std::string_view lowercase_name);

// The structured form of one command (UrlMapping.spec.modifications[].
// actions[]), rendered as one line of the rule language; Parse reads it back.
struct StructuredAction {
  std::string op;  // as in the rule language, e.g. "RegIRewriteUrl"
  std::string header;
  std::string pattern;
  std::string value;  // header value, replacement or destination
  std::vector<std::string> options;
};
// Returns false with `error` set when a field holds what no line of the
// language can (a line break, an unknown command or option text).
bool RenderAction(const StructuredAction& action, std::string* line, std::string* error);

}  // namespace kwd::modification
