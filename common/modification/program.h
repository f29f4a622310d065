#pragma once

// A rule file compiled for evaluation: every regular expression compiled
// once (RE2: linear time, no backtracking) when the program is built, from
// the snapshot in the proxy and for validation in the controller. The
// request path only walks the compiled form; a State is reused per worker so
// that steady-state evaluation allocates nothing a previous request did not.
//
// Semantics (the choices where SAP's documentation is silent are marked
// "choice"; docs/modification-rules.md says the same to users):
// - Statements run top to bottom. A redirect, forbidden or gone that fires
//   stops processing; so does [break] on a command that fired. Rewrites and
//   header edits do not stop (SAP's catch-all trap: a later
//   RegForbiddenUrl /(.*) still fires unless the rewrite has [break]).
// - [restart] starts again at the first statement with the changes kept, at
//   most kMaxRestarts times (one more: Outcome::kError, answered 500).
// - Patterns are RE2 regular expressions over bytes (Latin-1 mode), matched
//   anywhere in the subject (a search: anchor with ^ and $) (choice). URL
//   commands match the decoded path; the Raw forms the path as received.
// - A rewrite's or redirect's destination with "?query" replaces the
//   request's query; without one the request's query stays; qsappend keeps
//   both (destination's first), qsreplace drops the request's always
//   (choice). A rewrite's result is a decoded path, percent-encoded for
//   forwarding; with noescape it is taken as already encoded (choice).
// - RegRewriteHeader replaces the matched part of the value (choice);
//   AppendHeader adds ", value" to an existing header (choice).
// - Conditions join with [and]/[or] strictly left to right, no precedence.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/modification/rules.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace kwd::modification {

using HeaderView = std::pair<std::string_view, std::string_view>;
using Header = std::pair<std::string, std::string>;

// Variables that cost the proxy a system call to know: asked only when a
// rule reads them (RequestView::lazy), each at most once per request.
class LazyVariables {
 public:
  virtual std::string_view ServerAddr() const = 0;  // %{SERVER_ADDR}
  virtual std::string_view RemotePort() const = 0;  // %{REMOTE_PORT}

 protected:
  ~LazyVariables() = default;
};

// The request as the rules see it: views valid during Evaluate.
struct RequestView {
  std::string_view method;
  std::string_view path;      // decoded (what PATH and the URL commands see)
  std::string_view raw_path;  // as received, percent-encoded
  std::string_view query;     // after '?', without it
  bool has_query = false;
  bool https = false;
  std::string_view server_port;
  std::string_view server_addr;
  std::string_view remote_addr;
  std::string_view remote_port;
  // When set, SERVER_ADDR and REMOTE_PORT come from it instead.
  const LazyVariables* lazy = nullptr;
  std::span<const HeaderView> headers;
};

enum class Outcome : uint8_t {
  kContinue,   // forward (with the changes)
  kRedirect,   // answer `status` with Location: `location`
  kForbidden,  // answer 403
  kGone,       // answer 410
  kError,      // answer 500: restart loop or a rewrite that made no valid path
};

// A response header command, with its value expanded at request time.
struct ResponseEdit {
  Op op = Op::kNop;
  std::string name;  // lowercase
  std::string value;
  const re2::RE2* regex = nullptr;  // kRegRewriteResponseHeader
};

struct TraceStep {
  int line = 0;
  std::string command;          // the command's SAP name and its arguments as written
  std::string url;              // path?query after it
  std::vector<Header> headers;  // request headers after it (when the rules changed any)
};

// What one evaluation produced. Reused across requests (Reset keeps capacity).
struct State {
  Outcome outcome = Outcome::kContinue;
  int status = 0;        // redirect status
  std::string location;  // redirect target
  std::string error;     // kError: why
  bool url_changed = false;
  std::string path;      // decoded
  std::string raw_path;  // percent-encoded, what is forwarded
  std::string query;
  bool has_query = false;
  // The request headers after the rules, when any rule changed them
  // (headers_changed); else the request's own apply.
  bool headers_changed = false;
  std::vector<Header> headers;
  std::vector<ResponseEdit> response_edits;
  // x-sap-webdisp-target-sid / ~webdisp_target_sid set by a rule ("" none).
  std::string target_sid;
  int fired = 0;  // commands that fired
  // Explaining: every command that fired, with the URL and headers after it.
  bool tracing = false;
  std::vector<TraceStep> trace;

  // The origin-form target to forward: raw_path plus "?query".
  std::string Target() const;
};

// The regular expressions of one rule file together: at most this many RE2
// program instructions (RE2's ProgramSize). Compiling costs about a
// microsecond per instruction, so this bounds what one file costs to check
// (a third of a second); 10,000 usual rules take about a tenth of it.
inline constexpr int64_t kMaxProgramInstructions = 250000;
// The controller's bounds on checking many files (controller/compile): one
// UrlMapping's rule files together, and all UrlMappings' of one compile
// together. Here so that `kwd-controller import` writes within them too.
inline constexpr int64_t kMaxMappingInstructions = 250000;
inline constexpr int64_t kMaxClusterInstructions = 1000000;

class Program {
 public:
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Compiles a parsed file. Returns null with `error` (line and column of
  // the pattern) when a regular expression does not compile or a back
  // reference names a group the pattern does not have.
  static std::unique_ptr<const Program> Compile(const RuleFile& file, ParseError* error);
  // Parse + Compile.
  static std::unique_ptr<const Program> CompileText(std::string_view text, ParseError* error);

  // Runs the rules on `request`. `state` is reset first.
  void Evaluate(const RequestView& request, State* state) const;

  size_t command_count() const { return command_count_; }
  // RE2 program instructions of all its patterns (at most
  // kMaxProgramInstructions).
  int64_t regex_instructions() const { return regex_instructions_; }

  struct Compiled;  // program.cc

 private:
  Program();
  std::unique_ptr<Compiled> compiled_;
  size_t command_count_ = 0;
  int64_t regex_instructions_ = 0;
};

// Applies a State's response edits to response headers (names as received;
// matched case-insensitively).
void ApplyResponseEdits(std::span<const ResponseEdit> edits, std::vector<Header>* headers);

}  // namespace kwd::modification
