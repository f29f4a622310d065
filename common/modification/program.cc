#include "common/modification/program.h"

#include <arpa/inet.h>
#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kwd::modification {
namespace {

constexpr size_t kMaxPathBytes = 8192;
// The compiled size of every pattern of one file together (RE2 program
// instructions, about 16 bytes each): 20,000 patterns each near RE2's
// per-pattern memory bound would otherwise take gigabytes.
constexpr int kMaxReferences = 10;  // $0..$9
// The longest header value a rule may make: AppendHeader of a header to
// itself under [restart] would otherwise double it 16 times.
constexpr size_t kMaxHeaderValueBytes = 65536;
constexpr std::string_view kTargetSidHeader = "x-sap-webdisp-target-sid";
constexpr std::string_view kTargetSidPseudoHeader = "~webdisp_target_sid";

// A destination "path?query" split at its first '?'.
struct Destination {
  std::string_view path;
  std::string_view query;
  bool has_query = false;
};

Destination SplitDestination(std::string_view text) {
  Destination out;
  out.path = text;
  if (size_t question = text.find('?'); question != std::string_view::npos) {
    out.query = text.substr(question + 1);
    out.path = text.substr(0, question);
    out.has_query = true;
  }
  return out;
}

bool StartsWith(std::string_view text, std::string_view prefix, bool icase) {
  if (text.size() < prefix.size()) {
    return false;
  }
  return icase ? EqualsIgnoreCase(text.substr(0, prefix.size()), prefix)
               : text.substr(0, prefix.size()) == prefix;
}

// The literal text every match of an anchored pattern starts with ("" when
// the pattern is not anchored or starts with a metacharacter): a cheap
// pre-check before running the regex.
std::string LiteralPrefix(std::string_view pattern) {
  if (pattern.empty() || pattern.front() != '^') {
    return "";
  }
  std::string prefix;
  for (size_t i = 1; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (std::string_view("\\.[]()|*+?{}^$").find(c) != std::string_view::npos) {
      if ((c == '*' || c == '?' || c == '{') && !prefix.empty()) {
        prefix.pop_back();  // the quantifier makes the last character optional
      }
      break;
    }
    prefix.push_back(c);
  }
  // "^a|b": an alternation anywhere voids the prefix.
  if (pattern.find('|') != std::string_view::npos) {
    return "";
  }
  return prefix;
}

struct Regex {
  std::unique_ptr<re2::RE2> re;
  std::string prefix;  // LiteralPrefix
  bool icase = false;
  int groups = 0;
};

bool CompileRegex(std::string_view pattern, bool icase, int line, int column, Regex* out,
                  int64_t* budget, ParseError* error) {
  re2::RE2::Options options;
  options.set_encoding(re2::RE2::Options::EncodingLatin1);
  options.set_case_sensitive(!icase);
  options.set_log_errors(false);
  options.set_max_mem(1 << 20);
  auto re = std::make_unique<re2::RE2>(re2::StringPiece(pattern.data(), pattern.size()), options);
  if (!re->ok()) {
    error->line = line;
    error->column = column;
    std::string hint;
    if (!pattern.empty() && (pattern.front() == '*' || pattern.front() == '+')) {
      hint = " (patterns are regular expressions, not globs: write .* for *)";
    }
    error->message =
        "pattern \"" + std::string(pattern) + "\" does not compile: " + re->error() + hint;
    return false;
  }
  *budget -= re->ProgramSize();
  if (*budget < 0) {
    error->line = line;
    error->column = column;
    error->message = "the patterns of this rule file together are too large to compile (over " +
                     std::to_string(kMaxProgramInstructions) + " regex instructions)";
    return false;
  }
  out->groups = re->NumberOfCapturingGroups();
  out->re = std::move(re);
  out->icase = icase;
  out->prefix = LiteralPrefix(pattern);
  return true;
}

}  // namespace

struct CStatement;

struct CCondition {
  const Condition* source = nullptr;
  Regex regex;  // regmatch / regimatch
};

struct CAction {
  const Action* source = nullptr;
  Regex regex;
  std::string text;  // explain: the line's command as written
};

struct CStatement {
  std::vector<CCondition> guard;
  bool is_block = false;
  CAction action;
  std::vector<CStatement> body;
  std::vector<CStatement> otherwise;
  bool has_else = false;
};

struct Program::Compiled {
  RuleFile file;  // the compiled statements point into it
  std::vector<CStatement> statements;
};

namespace {

bool CheckReferences(const Text& text, int groups, int line, int column, ParseError* error) {
  for (const Segment& segment : text.segments) {
    if (segment.kind == Segment::Kind::kBackReference && segment.reference > groups) {
      error->line = line;
      error->column = column;
      error->message = "$" + std::to_string(segment.reference) + " names a group the pattern " +
                       "does not have (it has " + std::to_string(groups) + ")";
      return false;
    }
  }
  return true;
}

std::string DescribeAction(const Action& action) {
  std::string out(OpName(action.op));
  if (action.icase && out.rfind("Reg", 0) == 0) {
    out.insert(3, "I");
  }
  if (!action.header.empty()) {
    out += " " + action.header;
  }
  if (!action.pattern.empty()) {
    out += std::string(" ") + (action.negate ? "!" : "") + action.pattern;
  }
  if (!action.value.source.empty()) {
    out += " " + action.value.source;
  }
  return out;
}

bool CompileList(const std::vector<Statement>& in, std::vector<CStatement>* out, int64_t* budget,
                 ParseError* error);

bool CompileStatement(const Statement& in, CStatement* out, int64_t* budget, ParseError* error) {
  for (const Condition& condition : in.guard) {
    CCondition compiled;
    compiled.source = &condition;
    if (condition.op == CompOp::kRegMatch || condition.op == CompOp::kRegIMatch) {
      if (!CompileRegex(condition.operand.source, condition.op == CompOp::kRegIMatch,
                        condition.line, condition.pattern_column, &compiled.regex, budget, error)) {
        return false;
      }
    }
    out->guard.push_back(std::move(compiled));
  }
  out->is_block = in.is_block;
  out->has_else = in.has_else;
  if (!in.is_block) {
    const Action& action = in.action;
    out->action.source = &action;
    out->action.text = DescribeAction(action);
    if (!action.pattern.empty()) {
      if (!CompileRegex(action.pattern, action.icase, action.line, action.pattern_column,
                        &out->action.regex, budget, error)) {
        return false;
      }
      if (!CheckReferences(action.value, out->action.regex.groups, action.line,
                           action.pattern_column, error)) {
        return false;
      }
    }
  }
  return CompileList(in.body, &out->body, budget, error) &&
         CompileList(in.otherwise, &out->otherwise, budget, error);
}

bool CompileList(const std::vector<Statement>& in, std::vector<CStatement>* out, int64_t* budget,
                 ParseError* error) {
  out->reserve(in.size());
  for (const Statement& statement : in) {
    out->emplace_back();
    if (!CompileStatement(statement, &out->back(), budget, error)) {
      return false;
    }
  }
  return true;
}

bool IsUnreservedOrPathChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-._~!$&'()*+,;=:@/").find(static_cast<char>(c)) !=
             std::string_view::npos;
}

void AppendEncoded(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (IsUnreservedOrPathChar(c)) {
      out->push_back(ch);
    } else {
      out->push_back('%');
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    }
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;
}

void Decode(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() + 0 && HexValue(text[i + 1]) >= 0 &&
        HexValue(text[i + 2]) >= 0) {
      out->push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else {
      out->push_back(text[i]);
    }
  }
}

// An origin-form path as sent upstream: "/" then path characters and
// complete %XX escapes only.
bool IsValidRawPath(std::string_view path) {
  if (path.empty() || path.front() != '/' || path.size() > kMaxPathBytes) {
    return false;
  }
  for (size_t i = 0; i < path.size(); ++i) {
    auto c = static_cast<unsigned char>(path[i]);
    if (c == '%') {
      if (i + 2 >= path.size() || HexValue(path[i + 1]) < 0 || HexValue(path[i + 2]) < 0) {
        return false;
      }
      i += 2;
    } else if (!IsUnreservedOrPathChar(c)) {
      return false;
    }
  }
  return true;
}

bool IsValidQuery(std::string_view query) {
  for (char ch : query) {
    auto c = static_cast<unsigned char>(ch);
    if (!IsUnreservedOrPathChar(c) && c != '?' && c != '%') {
      return false;
    }
  }
  return query.size() <= kMaxPathBytes;
}

// Numeric when both are integers, else lexical.
int Compare(std::string_view a, std::string_view b) {
  int64_t x = 0;
  int64_t y = 0;
  auto [pa, ea] = std::from_chars(a.data(), a.data() + a.size(), x);
  auto [pb, eb] = std::from_chars(b.data(), b.data() + b.size(), y);
  if (!a.empty() && !b.empty() && ea == std::errc() && eb == std::errc() &&
      pa == a.data() + a.size() && pb == b.data() + b.size()) {
    return x < y ? -1 : x > y ? 1 : 0;
  }
  int c = a.compare(b);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

// `address` inside `cidr` ("10.0.0.0/8", "fd00::/8", or one address).
bool IpMatch(std::string_view address, std::string_view cidr) {
  char buffer[64];
  auto parse = [&](std::string_view text, int* family, unsigned char* out) {
    if (text.size() >= sizeof(buffer)) {
      return false;
    }
    std::memcpy(buffer, text.data(), text.size());
    buffer[text.size()] = '\0';
    if (inet_pton(AF_INET, buffer, out) == 1) {
      *family = AF_INET;
      return true;
    }
    if (inet_pton(AF_INET6, buffer, out) == 1) {
      *family = AF_INET6;
      return true;
    }
    return false;
  };
  std::string_view network = cidr;
  int bits = -1;
  if (size_t slash = cidr.find('/'); slash != std::string_view::npos) {
    network = cidr.substr(0, slash);
    std::string_view count = cidr.substr(slash + 1);
    auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), bits);
    if (ec != std::errc() || end != count.data() + count.size() || bits < 0) {
      return false;
    }
  }
  unsigned char a[16] = {};
  unsigned char n[16] = {};
  int family_a = 0;
  int family_n = 0;
  if (!parse(address, &family_a, a) || !parse(network, &family_n, n) || family_a != family_n) {
    return false;
  }
  int total = family_a == AF_INET ? 32 : 128;
  if (bits < 0) {
    bits = total;
  }
  if (bits > total) {
    return false;
  }
  for (int i = 0; i < bits; ++i) {
    int byte = i / 8;
    int mask = 0x80 >> (i % 8);
    if ((a[byte] & mask) != (n[byte] & mask)) {
      return false;
    }
  }
  return true;
}

enum class Control : uint8_t { kNext, kStop, kRestart };

class Evaluator {
 public:
  Evaluator(const RequestView& request, State* state) : request_(request), state_(*state) {}

  void Run(const std::vector<CStatement>& statements) {
    for (int restarts = 0;; ++restarts) {
      Control control = RunList(statements);
      if (control != Control::kRestart || state_.outcome != Outcome::kContinue) {
        return;
      }
      if (restarts >= kMaxRestarts) {
        Error("[restart] more than " + std::to_string(kMaxRestarts) + " times: the rules loop");
        return;
      }
    }
  }

 private:
  Control RunList(const std::vector<CStatement>& list) {
    for (const CStatement& statement : list) {
      Control control = RunStatement(statement);
      if (control != Control::kNext) {
        return control;
      }
    }
    return Control::kNext;
  }

  Control RunStatement(const CStatement& statement) {
    if (!statement.guard.empty() && !Guard(statement.guard)) {
      return statement.has_else ? RunList(statement.otherwise) : Control::kNext;
    }
    if (statement.is_block) {
      return RunList(statement.body);
    }
    return RunAction(statement.action);
  }

  bool Guard(const std::vector<CCondition>& guard) {
    bool result = Test(guard[0]);
    for (size_t i = 1; i < guard.size(); ++i) {
      if (guard[i - 1].source->join == Join::kAnd) {
        result = result && Test(guard[i]);
      } else {
        result = result || Test(guard[i]);
      }
    }
    return result;
  }

  bool Test(const CCondition& condition) {
    const Condition& c = *condition.source;
    Expand(c.subject, nullptr, false, &subject_);
    bool result = false;
    switch (c.op) {
      case CompOp::kRegMatch:
      case CompOp::kRegIMatch:
        result = Matches(condition.regex, subject_, nullptr);
        break;
      default: {
        Expand(c.operand, nullptr, false, &operand_);
        switch (c.op) {
          case CompOp::kStrCmp:
            result = subject_ == operand_;
            break;
          case CompOp::kStrICmp:
            result = EqualsIgnoreCase(subject_, operand_);
            break;
          case CompOp::kIpMatch:
            result = IpMatch(subject_, operand_);
            break;
          case CompOp::kEqual:
            result = Compare(subject_, operand_) == 0;
            break;
          case CompOp::kNotEqual:
            result = Compare(subject_, operand_) != 0;
            break;
          case CompOp::kLess:
            result = Compare(subject_, operand_) < 0;
            break;
          case CompOp::kGreater:
            result = Compare(subject_, operand_) > 0;
            break;
          case CompOp::kLessEqual:
            result = Compare(subject_, operand_) <= 0;
            break;
          case CompOp::kGreaterEqual:
            result = Compare(subject_, operand_) >= 0;
            break;
          default:
            break;
        }
      }
    }
    return c.negate ? !result : result;
  }

  // Runs the regex; fills captures_ when `captures` (up to $9).
  bool Matches(const Regex& regex, std::string_view subject, int* groups) {
    if (!regex.prefix.empty() && !StartsWith(subject, regex.prefix, regex.icase)) {
      return false;
    }
    int n = std::min(regex.groups + 1, kMaxReferences);
    if (groups == nullptr) {
      return regex.re->Match(re2::StringPiece(subject.data(), subject.size()), 0, subject.size(),
                             re2::RE2::UNANCHORED, nullptr, 0);
    }
    bool matched = regex.re->Match(re2::StringPiece(subject.data(), subject.size()), 0,
                                   subject.size(), re2::RE2::UNANCHORED, captures_.data(), n);
    *groups = matched ? n : 0;
    return matched;
  }

  std::string_view Header(std::string_view name) const {
    if (state_.headers_changed) {
      for (const auto& [key, value] : state_.headers) {
        if (EqualsIgnoreCase(key, name)) {
          return value;
        }
      }
      return {};
    }
    for (const auto& [key, value] : request_.headers) {
      if (EqualsIgnoreCase(key, name)) {
        return value;
      }
    }
    return {};
  }

  std::string_view FormField(const Segment& segment) const {
    std::string_view query = state_.query;
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view pair = query.substr(0, amp);
      size_t eq = pair.find('=');
      std::string_view key = pair.substr(0, eq);
      bool same =
          segment.case_sensitive_name ? key == segment.text : EqualsIgnoreCase(key, segment.text);
      if (same) {
        return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      }
      if (amp == std::string_view::npos) {
        break;
      }
      query.remove_prefix(amp + 1);
    }
    return {};
  }

  std::string_view Variable(const Segment& segment) {
    using V = Segment::Variable;
    switch (segment.variable) {
      case V::kHeader:
        return Header(segment.text);
      case V::kRequestMethod:
        return request_.method;
      case V::kServerProtocol:
        return request_.https ? "https" : "http";
      case V::kPath:
        return state_.path;
      case V::kQueryString:
        return state_.query;
      case V::kFormField:
        return FormField(segment);
      case V::kServerPort:
        return request_.server_port;
      case V::kServerAddr:
        return request_.lazy != nullptr ? request_.lazy->ServerAddr() : request_.server_addr;
      case V::kRemoteAddr:
        return request_.remote_addr;
      case V::kRemotePort:
        return request_.lazy != nullptr ? request_.lazy->RemotePort() : request_.remote_port;
      case V::kRequestUri:
      case V::kNone:
        break;
    }
    return {};
  }

  // `text` with its variables and back references filled in. Back
  // references are percent-encoded when `encode_references`.
  void Expand(const Text& text, const std::string_view* subject_captures, bool encode_references,
              std::string* out) {
    out->clear();
    for (const Segment& segment : text.segments) {
      switch (segment.kind) {
        case Segment::Kind::kLiteral:
          out->append(segment.text);
          break;
        case Segment::Kind::kVariable:
          out->append(Variable(segment));
          break;
        case Segment::Kind::kBackReference: {
          if (subject_captures == nullptr || segment.reference >= capture_count_) {
            break;
          }
          const re2::StringPiece& piece = captures_[static_cast<size_t>(segment.reference)];
          std::string_view value(piece.data() == nullptr ? "" : piece.data(), piece.size());
          if (encode_references) {
            AppendEncoded(value, out);
          } else {
            out->append(value);
          }
          break;
        }
      }
    }
  }

  void MaterializeHeaders() {
    if (state_.headers_changed) {
      return;
    }
    state_.headers_changed = true;
    state_.headers.clear();
    for (const auto& [key, value] : request_.headers) {
      state_.headers.emplace_back(std::string(key), std::string(value));
    }
  }

  void RemoveHeaders(std::string_view name) {
    std::erase_if(state_.headers,
                  [&](const modification::Header& h) { return EqualsIgnoreCase(h.first, name); });
  }

  static void StripControls(std::string* value) {
    std::erase_if(*value, [](char c) {
      return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
    });
  }

  void NoteTargetSid(std::string_view name) {
    if (name == kTargetSidHeader || name == kTargetSidPseudoHeader) {
      std::string_view value = Header(name);
      state_.target_sid.assign(value.data(), value.size());
    }
  }

  // A header the action made longer than kMaxHeaderValueBytes: kError.
  bool TooLong(const Action& action) {
    size_t longest = 0;
    switch (action.op) {
      case Op::kSetHeader:
      case Op::kSetHeaderIfEmpty:
      case Op::kAppendHeader:
      case Op::kRegRewriteHeader:
        longest = Header(action.header).size();
        break;
      case Op::kSetResponseHeader:
      case Op::kSetResponseHeaderIfEmpty:
      case Op::kAppendResponseHeader:
      case Op::kRegRewriteResponseHeader: {
        size_t total = 0;
        for (const ResponseEdit& edit : state_.response_edits) {
          total += edit.value.size();
        }
        longest = total;
        break;
      }
      default:
        return false;
    }
    if (longest <= kMaxHeaderValueBytes) {
      return false;
    }
    Error("line " + std::to_string(action.line) + ": header " + action.header +
          " would be longer than " + std::to_string(kMaxHeaderValueBytes) + " bytes");
    return true;
  }

  void Error(std::string message) {
    state_.outcome = Outcome::kError;
    state_.error = std::move(message);
  }

  void ApplyQuery(std::string_view destination_query, bool has_destination_query,
                  const Options& options) {
    if (options.qsappend) {
      if (has_destination_query && state_.has_query && !state_.query.empty()) {
        scratch_.assign(destination_query.data(), destination_query.size());
        scratch_ += "&";
        scratch_ += state_.query;
        state_.query = scratch_;
      } else if (has_destination_query) {
        state_.query.assign(destination_query.data(), destination_query.size());
        state_.has_query = true;
      }
      return;
    }
    if (has_destination_query) {
      state_.query.assign(destination_query.data(), destination_query.size());
      state_.has_query = true;
    } else if (options.qsreplace) {
      state_.query.clear();
      state_.has_query = false;
    }
  }

  bool Rewrite(const Action& action, bool raw) {
    const Options& options = action.options;
    const Destination split = SplitDestination(result_);
    std::string_view destination = split.path;
    std::string_view destination_query = split.query;
    const bool has_destination_query = split.has_query;
    if (raw || options.noescape) {
      if (!IsValidRawPath(destination)) {
        Error("line " + std::to_string(action.line) + ": the rewrite made \"" +
              std::string(destination.substr(0, 200)) + "\", not a valid path");
        return false;
      }
      state_.raw_path.assign(destination.data(), destination.size());
      Decode(state_.raw_path, &state_.path);
    } else {
      if (destination.empty() || destination.front() != '/' || destination.size() > kMaxPathBytes) {
        Error("line " + std::to_string(action.line) + ": the rewrite made \"" +
              std::string(destination.substr(0, 200)) +
              "\", not a path (it must start with / and be at most 8 KiB)");
        return false;
      }
      state_.path.assign(destination.data(), destination.size());
      state_.raw_path.clear();
      AppendEncoded(state_.path, &state_.raw_path);
    }
    if (has_destination_query && !IsValidQuery(destination_query)) {
      scratch_.clear();
      AppendEncoded(destination_query, &scratch_);
      std::string encoded = scratch_;
      ApplyQuery(encoded, true, options);
    } else {
      ApplyQuery(destination_query, has_destination_query, options);
    }
    state_.url_changed = true;
    return true;
  }

  void Redirect(const Action& action) {
    state_.outcome = Outcome::kRedirect;
    state_.status = action.options.code != 0 ? action.options.code : 302;
    const Destination split = SplitDestination(result_);
    std::string_view destination = split.path;
    std::string_view destination_query = split.query;
    const bool has_destination_query = split.has_query;
    state_.location.clear();
    // Location carries no controls, spaces or non-ASCII bytes.
    auto append_safe = [&](std::string_view text) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      for (char ch : text) {
        auto c = static_cast<unsigned char>(ch);
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '\\' || c == '^' ||
            c == '`' || c == '{' || c == '|' || c == '}') {
          state_.location.push_back('%');
          state_.location.push_back(kHex[c >> 4]);
          state_.location.push_back(kHex[c & 15]);
        } else {
          state_.location.push_back(ch);
        }
      }
    };
    append_safe(destination);
    std::string_view query;
    bool has_query = false;
    if (action.options.qsappend) {
      scratch_.assign(destination_query.data(), destination_query.size());
      if (state_.has_query && !state_.query.empty()) {
        scratch_ += scratch_.empty() ? "" : "&";
        scratch_ += state_.query;
      }
      query = scratch_;
      has_query = has_destination_query || state_.has_query;
    } else if (has_destination_query) {
      query = destination_query;
      has_query = true;
    } else if (!action.options.qsreplace && state_.has_query) {
      query = state_.query;
      has_query = true;
    }
    if (has_query) {
      state_.location.push_back('?');
      append_safe(query);
    }
  }

  Control RunAction(const CAction& compiled) {
    const Action& action = *compiled.source;
    const Options& options = action.options;
    int groups = 0;
    capture_count_ = 0;
    bool fired = true;
    switch (action.op) {
      case Op::kNop:
        break;
      case Op::kRemoveHeader:
        MaterializeHeaders();
        RemoveHeaders(action.header);
        NoteTargetSid(action.header);
        break;
      case Op::kSetHeader:
      case Op::kSetHeaderIfEmpty:
      case Op::kAppendHeader: {
        Expand(action.value, nullptr, false, &result_);
        StripControls(&result_);
        if (action.op == Op::kSetHeaderIfEmpty && !Header(action.header).empty()) {
          fired = false;
          break;
        }
        MaterializeHeaders();
        if (action.op == Op::kAppendHeader) {
          auto it = std::find_if(state_.headers.begin(), state_.headers.end(),
                                 [&](const modification::Header& h) {
                                   return EqualsIgnoreCase(h.first, action.header);
                                 });
          if (it != state_.headers.end()) {
            it->second += it->second.empty() ? "" : ", ";
            it->second += result_;
            NoteTargetSid(action.header);
            break;
          }
        } else {
          RemoveHeaders(action.header);
        }
        state_.headers.emplace_back(action.header, result_);
        NoteTargetSid(action.header);
        break;
      }
      case Op::kRegRewriteHeader: {
        std::string_view value = Header(action.header);
        scratch_.assign(value.data(), value.size());
        if (!Matches(compiled.regex, scratch_, &groups)) {
          fired = false;
          break;
        }
        capture_count_ = groups;
        std::string_view subject = scratch_;
        Expand(action.value, &subject, false, &result_);
        StripControls(&result_);
        size_t begin = static_cast<size_t>(captures_[0].data() - scratch_.data());
        std::string rewritten =
            scratch_.substr(0, begin) + result_ + scratch_.substr(begin + captures_[0].size());
        MaterializeHeaders();
        for (auto& [name, header_value] : state_.headers) {
          if (EqualsIgnoreCase(name, action.header)) {
            header_value = rewritten;
            break;
          }
        }
        NoteTargetSid(action.header);
        break;
      }
      case Op::kRemoveResponseHeader:
      case Op::kSetResponseHeader:
      case Op::kSetResponseHeaderIfEmpty:
      case Op::kAppendResponseHeader:
      case Op::kRegRewriteResponseHeader: {
        ResponseEdit edit;
        edit.op = action.op;
        edit.name = action.header;
        if (action.op == Op::kRegRewriteResponseHeader) {
          edit.regex = compiled.regex.re.get();
          // Variables now; $n per response value (ApplyResponseEdits).
          for (const Segment& segment : action.value.segments) {
            if (segment.kind == Segment::Kind::kLiteral) {
              edit.value += segment.text;
            } else if (segment.kind == Segment::Kind::kVariable) {
              edit.value += Variable(segment);
            } else {
              edit.value += "$" + std::to_string(segment.reference);
            }
          }
        } else {
          Expand(action.value, nullptr, false, &edit.value);
          StripControls(&edit.value);
        }
        state_.response_edits.push_back(std::move(edit));
        break;
      }
      case Op::kRewriteUrl:
      case Op::kRewriteRawUrl:
      case Op::kRedirectUrl:
      case Op::kForbiddenUrl:
      case Op::kGoneUrl: {
        const std::string& subject =
            action.op == Op::kRewriteRawUrl ? state_.raw_path : state_.path;
        bool matched = Matches(compiled.regex, subject, &groups);
        capture_count_ = groups;
        if (matched == action.negate) {
          fired = false;
          break;
        }
        if (action.op == Op::kForbiddenUrl) {
          state_.outcome = Outcome::kForbidden;
          state_.status = 403;
          break;
        }
        if (action.op == Op::kGoneUrl) {
          state_.outcome = Outcome::kGone;
          state_.status = 410;
          break;
        }
        // The captures point into `subject`, which the rewrite replaces.
        subject_.assign(subject);
        if (groups > 0) {
          for (int i = 0; i < groups; ++i) {
            auto& piece = captures_[static_cast<size_t>(i)];
            if (piece.data() != nullptr) {
              piece =
                  re2::StringPiece(subject_.data() + (piece.data() - subject.data()), piece.size());
            }
          }
        }
        std::string_view captured = subject_;
        const bool encode = action.op == Op::kRedirectUrl && !options.noescape;
        Expand(action.value, &captured, encode, &result_);
        if (action.op == Op::kRedirectUrl) {
          Redirect(action);
        } else if (!Rewrite(action, action.op == Op::kRewriteRawUrl)) {
          return Control::kStop;
        }
        break;
      }
    }
    if (!fired) {
      return Control::kNext;
    }
    if (TooLong(action)) {
      return Control::kStop;
    }
    ++state_.fired;
    if (state_.tracing) {
      TraceStep step;
      step.line = action.line;
      step.command = compiled.text;
      step.url = state_.Target();
      if (state_.headers_changed) {
        step.headers = state_.headers;
      }
      state_.trace.push_back(std::move(step));
    }
    if (state_.outcome != Outcome::kContinue) {
      return Control::kStop;
    }
    if (options.break_) {
      return Control::kStop;
    }
    if (options.restart) {
      return Control::kRestart;
    }
    return Control::kNext;
  }

  const RequestView& request_;
  State& state_;
  std::array<re2::StringPiece, kMaxReferences> captures_{};
  int capture_count_ = 0;
  std::string subject_;
  std::string operand_;
  std::string result_;
  std::string scratch_;
};

}  // namespace

std::string State::Target() const {
  std::string out = raw_path;
  if (has_query) {
    out += "?";
    out += query;
  }
  return out;
}

Program::Program() : compiled_(std::make_unique<Compiled>()) {}
Program::~Program() = default;

std::unique_ptr<const Program> Program::Compile(const RuleFile& file, ParseError* error) {
  *error = ParseError{};
  std::unique_ptr<Program> program(new Program());
  program->compiled_->file = file;
  int64_t budget = kMaxProgramInstructions;
  if (!CompileList(program->compiled_->file.statements, &program->compiled_->statements, &budget,
                   error)) {
    return nullptr;
  }
  program->command_count_ = file.action_count;
  program->regex_instructions_ = kMaxProgramInstructions - budget;
  return program;
}

std::unique_ptr<const Program> Program::CompileText(std::string_view text, ParseError* error) {
  RuleFile file;
  if (!Parse(text, &file, error)) {
    return nullptr;
  }
  return Compile(file, error);
}

void Program::Evaluate(const RequestView& request, State* state) const {
  state->outcome = Outcome::kContinue;
  state->status = 0;
  state->location.clear();
  state->error.clear();
  state->url_changed = false;
  state->path.assign(request.path.data(), request.path.size());
  state->raw_path.assign(request.raw_path.data(), request.raw_path.size());
  state->query.assign(request.query.data(), request.query.size());
  state->has_query = request.has_query;
  state->headers_changed = false;
  state->headers.clear();
  state->response_edits.clear();
  state->target_sid.clear();
  state->fired = 0;
  state->trace.clear();
  Evaluator evaluator(request, state);
  evaluator.Run(compiled_->statements);
}

void ApplyResponseEdits(std::span<const ResponseEdit> edits, std::vector<Header>* headers) {
  for (const ResponseEdit& edit : edits) {
    auto same = [&](const Header& h) { return EqualsIgnoreCase(h.first, edit.name); };
    switch (edit.op) {
      case Op::kRemoveResponseHeader:
        std::erase_if(*headers, same);
        break;
      case Op::kSetResponseHeader:
        std::erase_if(*headers, same);
        headers->emplace_back(edit.name, edit.value);
        break;
      case Op::kSetResponseHeaderIfEmpty: {
        auto it = std::find_if(headers->begin(), headers->end(), same);
        if (it == headers->end()) {
          headers->emplace_back(edit.name, edit.value);
        } else if (it->second.empty()) {
          it->second = edit.value;
        }
        break;
      }
      case Op::kAppendResponseHeader: {
        auto it = std::find_if(headers->begin(), headers->end(), same);
        if (it == headers->end()) {
          headers->emplace_back(edit.name, edit.value);
        } else {
          it->second += it->second.empty() ? "" : ", ";
          it->second += edit.value;
        }
        break;
      }
      case Op::kRegRewriteResponseHeader: {
        for (auto& [name, value] : *headers) {
          if (!EqualsIgnoreCase(name, edit.name) || edit.regex == nullptr) {
            continue;
          }
          std::array<re2::StringPiece, kMaxReferences> captures{};
          int n = std::min(edit.regex->NumberOfCapturingGroups() + 1, kMaxReferences);
          if (!edit.regex->Match(re2::StringPiece(value.data(), value.size()), 0, value.size(),
                                 re2::RE2::UNANCHORED, captures.data(), n)) {
            continue;
          }
          std::string replacement;
          for (size_t i = 0; i < edit.value.size(); ++i) {
            char c = edit.value[i];
            if (c == '$' && i + 1 < edit.value.size() && edit.value[i + 1] >= '0' &&
                edit.value[i + 1] <= '9') {
              int reference = edit.value[i + 1] - '0';
              if (reference < n && captures[static_cast<size_t>(reference)].data() != nullptr) {
                const auto& piece = captures[static_cast<size_t>(reference)];
                replacement.append(piece.data(), piece.size());
              }
              ++i;
            } else if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) {
              replacement.push_back(c);
            }
          }
          size_t begin = static_cast<size_t>(captures[0].data() - value.data());
          value = value.substr(0, begin) + replacement + value.substr(begin + captures[0].size());
        }
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace kwd::modification
