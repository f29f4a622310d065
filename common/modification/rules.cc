#include "common/modification/rules.h"

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kwd::modification {
namespace {

char Lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string LowerCopy(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = Lower(c);
  }
  return out;
}

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) {
      return false;
    }
  }
  return true;
}

namespace {

// The length of the UTF-8 sequence at `text`, or 0 when it is not one.
size_t Utf8Length(std::string_view text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char c = byte(0);
  if (c < 0x80) {
    return 1;
  }
  size_t length = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (length == 0 || text.size() < length || c == 0xC0 || c == 0xC1 || c > 0xF4) {
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) {
      return 0;
    }
  }
  // Overlong three- and four-byte forms, surrogates, beyond U+10FFFF.
  if ((c == 0xE0 && byte(1) < 0xA0) || (c == 0xED && byte(1) >= 0xA0) ||
      (c == 0xF0 && byte(1) < 0x90) || (c == 0xF4 && byte(1) >= 0x90)) {
    return 0;
  }
  return length;
}

struct Token {
  std::string text;
  int column = 0;
  bool quoted = false;
};

struct Line {
  int number = 0;
  std::vector<Token> tokens;
};

struct OpInfo {
  std::string_view name;  // lowercase
  Op op;
  bool icase;
  bool header;   // takes a header name
  bool pattern;  // takes a regex
  int values;    // 0: none, 1: required, 2: optional (forbidden/gone)
};

constexpr std::array<OpInfo, 24> kOps = {{
    {"nop", Op::kNop, false, false, false, 0},
    {"removeheader", Op::kRemoveHeader, false, true, false, 0},
    {"setheader", Op::kSetHeader, false, true, false, 1},
    {"setheaderifempty", Op::kSetHeaderIfEmpty, false, true, false, 1},
    {"appendheader", Op::kAppendHeader, false, true, false, 1},
    {"regrewriteheader", Op::kRegRewriteHeader, false, true, true, 1},
    {"regirewriteheader", Op::kRegRewriteHeader, true, true, true, 1},
    {"removeresponseheader", Op::kRemoveResponseHeader, false, true, false, 0},
    {"setresponseheader", Op::kSetResponseHeader, false, true, false, 1},
    {"setresponseheaderifempty", Op::kSetResponseHeaderIfEmpty, false, true, false, 1},
    {"appendresponseheader", Op::kAppendResponseHeader, false, true, false, 1},
    // SAP's 7.4 page spells it so once; taken as the same command.
    {"appendrespondheader", Op::kAppendResponseHeader, false, true, false, 1},
    {"regrewriteresponseheader", Op::kRegRewriteResponseHeader, false, true, true, 1},
    {"regirewriteresponseheader", Op::kRegRewriteResponseHeader, true, true, true, 1},
    {"regrewriteurl", Op::kRewriteUrl, false, false, true, 1},
    {"regirewriteurl", Op::kRewriteUrl, true, false, true, 1},
    {"regrewriterawurl", Op::kRewriteRawUrl, false, false, true, 1},
    {"regirewriterawurl", Op::kRewriteRawUrl, true, false, true, 1},
    {"regredirecturl", Op::kRedirectUrl, false, false, true, 1},
    {"regiredirecturl", Op::kRedirectUrl, true, false, true, 1},
    {"regforbiddenurl", Op::kForbiddenUrl, false, false, true, 2},
    {"regiforbiddenurl", Op::kForbiddenUrl, true, false, true, 2},
    {"reggoneurl", Op::kGoneUrl, false, false, true, 2},
    {"regigoneurl", Op::kGoneUrl, true, false, true, 2},
}};

const OpInfo* FindOp(std::string_view name) {
  for (const OpInfo& info : kOps) {
    if (EqualsIgnoreCase(info.name, name)) {
      return &info;
    }
  }
  return nullptr;
}

bool IsHeaderName(std::string_view name) {
  if (name.empty() || name.size() > 256) {
    return false;
  }
  // RFC 9110 token characters; a leading ~ for SAP's pseudo headers
  // (~webdisp_target_sid).
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::string_view("!#$%&'*+-.^_`|").find(c) != std::string_view::npos ||
              (c == '~' && i == 0);
    if (!ok) {
      return false;
    }
  }
  return true;
}

class Parser {
 public:
  Parser(std::vector<Line> lines, ParseError* error) : lines_(std::move(lines)), error_(error) {}

  bool Run(RuleFile* out) {
    if (!ParseStatements(&out->statements, /*in_block=*/false, 0)) {
      return false;
    }
    out->action_count = actions_;
    return true;
  }

 private:
  bool Fail(int line, int column, std::string message) {
    if (error_->message.empty()) {
      error_->line = line;
      error_->column = column;
      error_->message = std::move(message);
    }
    return false;
  }

  bool AtEnd() const { return next_ >= lines_.size(); }
  const Line& Peek() const { return lines_[next_]; }

  static bool Is(const Token& token, std::string_view keyword) {
    return !token.quoted && EqualsIgnoreCase(token.text, keyword);
  }

  bool ParseStatements(std::vector<Statement>* out, bool in_block, int depth) {
    while (!AtEnd()) {
      const Line& line = Peek();
      const Token& first = line.tokens.front();
      if (Is(first, "end")) {
        if (!in_block) {
          return Fail(line.number, first.column, "end without a matching begin");
        }
        if (line.tokens.size() > 1) {
          return Fail(line.number, line.tokens[1].column, "nothing may follow end on its line");
        }
        ++next_;
        return true;
      }
      if (Is(first, "else")) {
        return Fail(line.number, first.column,
                    "else without a preceding if (or an else already given)");
      }
      ++next_;
      Statement statement;
      if (!ParseStatement(line.number, line.tokens, 0, &statement, depth)) {
        return false;
      }
      out->push_back(std::move(statement));
      if (++statements_ > kMaxStatements) {
        return Fail(line.number, 1,
                    "more than " + std::to_string(kMaxStatements) + " statements in one rule file");
      }
    }
    if (in_block) {
      return Fail(static_cast<int>(lines_.empty() ? 0 : lines_.back().number), 0,
                  "begin without a matching end");
    }
    return true;
  }

  // The next line's statement (the one a condition line guards).
  bool ParseNextLine(int after_line, Statement* out, int depth, std::string_view what) {
    if (AtEnd() || Is(Peek().tokens.front(), "end") || Is(Peek().tokens.front(), "else")) {
      return Fail(after_line, 0,
                  std::string(what) + " on line " + std::to_string(after_line) +
                      " is not followed by a rule");
    }
    const Line& line = Peek();
    ++next_;
    return ParseStatement(line.number, line.tokens, 0, out, depth);
  }

  // One statement starting at tokens[start].
  bool ParseStatement(int line, const std::vector<Token>& tokens, size_t start, Statement* out,
                      int depth) {
    if (depth > kMaxNesting) {
      return Fail(line, tokens[start].column,
                  "conditions nested deeper than " + std::to_string(kMaxNesting));
    }
    out->line = line;
    const Token& first = tokens[start];
    if (Is(first, "begin")) {
      return Fail(line, first.column, "begin must end an if line");
    }
    if (!Is(first, "if")) {
      out->is_block = false;
      return ParseAction(line, tokens, start, &out->action);
    }
    // A chain of conditions, over one or more lines.
    const std::vector<Token>* current = &tokens;
    size_t at = start;
    int current_line = line;
    while (true) {
      Condition condition;
      size_t rest = 0;
      if (!ParseCondition(current_line, *current, at, &condition, &rest)) {
        return false;
      }
      out->guard.push_back(std::move(condition));
      const Condition& last = out->guard.back();
      if (rest < current->size()) {
        if (last.join != Join::kNone) {
          return Fail(current_line, (*current)[rest].column,
                      "[and] / [or] must end the line (the next condition follows on the next "
                      "line)");
        }
        const Token& next = (*current)[rest];
        if (Is(next, "if")) {
          // "if A ... if B ...": a nested condition on the same line.
          out->is_block = true;
          Statement inner;
          if (!ParseStatement(current_line, *current, rest, &inner, depth + 1)) {
            return false;
          }
          out->body.push_back(std::move(inner));
          break;
        }
        if (Is(next, "begin")) {
          if (rest + 1 < current->size()) {
            return Fail(current_line, (*current)[rest + 1].column,
                        "nothing may follow begin on its line");
          }
          out->is_block = true;
          if (!ParseStatements(&out->body, /*in_block=*/true, depth + 1)) {
            return false;
          }
          break;
        }
        out->is_block = false;
        // "if ... <rule> else <rule>" on one line.
        size_t else_at = rest + 1;
        while (else_at < current->size() && !Is((*current)[else_at], "else")) {
          ++else_at;
        }
        std::vector<Token> action_tokens(current->begin() + static_cast<std::ptrdiff_t>(rest),
                                         current->begin() + static_cast<std::ptrdiff_t>(else_at));
        if (!ParseAction(current_line, action_tokens, 0, &out->action)) {
          return false;
        }
        if (else_at < current->size()) {
          if (else_at + 1 == current->size()) {
            return Fail(current_line, (*current)[else_at].column, "else without a rule after it");
          }
          std::vector<Token> else_tokens(
              current->begin() + static_cast<std::ptrdiff_t>(else_at + 1), current->end());
          Statement inner;
          if (!ParseStatement(current_line, else_tokens, 0, &inner, depth + 1)) {
            return false;
          }
          out->has_else = true;
          out->otherwise.push_back(std::move(inner));
          return true;
        }
        break;
      }
      if (last.join != Join::kNone) {
        // The chain goes on with an if on the next line.
        if (AtEnd() || !Is(Peek().tokens.front(), "if")) {
          return Fail(current_line, 0,
                      "the condition on line " + std::to_string(current_line) +
                          " ends with [and] / [or] but no if line follows");
        }
        current = &Peek().tokens;
        current_line = Peek().number;
        at = 0;
        ++next_;
        continue;
      }
      // The guarded statement is on the next line.
      Statement inner;
      if (!ParseNextLine(current_line, &inner, depth + 1, "the condition")) {
        return false;
      }
      if (inner.guard.empty() && !inner.is_block) {
        out->is_block = false;
        out->action = std::move(inner.action);
      } else {
        out->is_block = true;
        out->body.push_back(std::move(inner));
      }
      break;
    }
    return ParseElse(out, depth);
  }

  bool ParseElse(Statement* out, int depth) {
    if (AtEnd() || !Is(Peek().tokens.front(), "else")) {
      return true;
    }
    const Line& line = Peek();
    ++next_;
    out->has_else = true;
    if (line.tokens.size() == 1) {
      Statement inner;
      if (!ParseNextLine(line.number, &inner, depth + 1, "else")) {
        return false;
      }
      out->otherwise.push_back(std::move(inner));
      return true;
    }
    if (Is(line.tokens[1], "begin")) {
      if (line.tokens.size() > 2) {
        return Fail(line.number, line.tokens[2].column, "nothing may follow begin on its line");
      }
      return ParseStatements(&out->otherwise, /*in_block=*/true, depth + 1);
    }
    Statement inner;
    if (!ParseStatement(line.number, line.tokens, 1, &inner, depth + 1)) {
      return false;
    }
    out->otherwise.push_back(std::move(inner));
    return true;
  }

  bool ParseCondition(int line, const std::vector<Token>& tokens, size_t at, Condition* out,
                      size_t* rest) {
    const Token& if_token = tokens[at];
    if (tokens.size() < at + 4) {
      return Fail(line, if_token.column,
                  "a condition is: if <string> <operator> <pattern> [[and]|[or]]");
    }
    out->line = line;
    const Token& subject = tokens[at + 1];
    if (!ParseText(line, subject, /*back_references=*/false, &out->subject)) {
      return false;
    }
    const Token& op_token = tokens[at + 2];
    std::string_view op = op_token.text;
    out->negate = false;
    if (op == "!=") {
      out->op = CompOp::kNotEqual;
    } else {
      if (!op.empty() && op.front() == '!') {
        out->negate = true;
        op.remove_prefix(1);
      }
      static constexpr std::pair<std::string_view, CompOp> kCompOps[] = {
          {"=", CompOp::kEqual},
          {"<", CompOp::kLess},
          {">", CompOp::kGreater},
          {"<=", CompOp::kLessEqual},
          {">=", CompOp::kGreaterEqual},
          {"regmatch", CompOp::kRegMatch},
          {"regimatch", CompOp::kRegIMatch},
          {"strcmp", CompOp::kStrCmp},
          {"stricmp", CompOp::kStrICmp},
          {"ipmatch", CompOp::kIpMatch},
      };
      bool found = false;
      for (const auto& [name, value] : kCompOps) {
        if (EqualsIgnoreCase(name, op)) {
          out->op = value;
          found = true;
          break;
        }
      }
      if (!found || op_token.quoted) {
        return Fail(line, op_token.column,
                    "unknown comparison \"" + op_token.text +
                        "\" (one of = != < > <= >= regmatch regimatch strcmp stricmp ipmatch, "
                        "each negated by a leading !)");
      }
    }
    const Token& pattern = tokens[at + 3];
    out->pattern_column = pattern.column;
    if (out->op == CompOp::kRegMatch || out->op == CompOp::kRegIMatch) {
      if (!CheckPattern(line, pattern)) {
        return false;
      }
      out->operand.source = pattern.text;
    } else if (!ParseText(line, pattern, /*back_references=*/false, &out->operand)) {
      return false;
    }
    size_t next = at + 4;
    out->join = Join::kNone;
    if (next < tokens.size() && !tokens[next].quoted) {
      if (EqualsIgnoreCase(tokens[next].text, "[and]")) {
        out->join = Join::kAnd;
        ++next;
      } else if (EqualsIgnoreCase(tokens[next].text, "[or]")) {
        out->join = Join::kOr;
        ++next;
      } else if (tokens[next].text.front() == '[') {
        return Fail(line, tokens[next].column,
                    "a condition ends with [and] or [or], got " + tokens[next].text);
      }
    }
    *rest = next;
    return true;
  }

  bool CheckPattern(int line, const Token& token) {
    if (token.text.empty() || token.text == "!") {
      return Fail(line, token.column, "empty pattern");
    }
    if (token.text.size() > kMaxPatternBytes) {
      return Fail(line, token.column,
                  "pattern longer than " + std::to_string(kMaxPatternBytes) + " bytes");
    }
    return true;
  }

  bool ParseAction(int line, const std::vector<Token>& tokens, size_t at, Action* out) {
    const Token& name = tokens[at];
    const OpInfo* info = name.quoted ? nullptr : FindOp(name.text);
    if (info == nullptr) {
      return Fail(line, name.column,
                  "unknown command \"" + name.text +
                      "\" (header commands: SetHeader, SetHeaderIfEmpty, AppendHeader, "
                      "RemoveHeader, RegRewriteHeader and their Response forms; URL commands: "
                      "RegRewriteUrl, RegRewriteRawUrl, RegRedirectUrl, RegForbiddenUrl, "
                      "RegGoneUrl with their I forms; NOP)");
    }
    ++actions_;
    out->op = info->op;
    out->icase = info->icase;
    out->line = line;
    out->column = name.column;
    size_t i = at + 1;
    auto missing = [&](std::string_view what) {
      return Fail(line, name.column,
                  std::string(OpName(info->op)) + ": missing " + std::string(what));
    };
    auto is_options = [&](size_t index) {
      return index < tokens.size() && !tokens[index].quoted && tokens[index].text.front() == '[';
    };
    if (info->header) {
      if (i >= tokens.size() || is_options(i)) {
        return missing("the header name");
      }
      if (!IsHeaderName(tokens[i].text)) {
        return Fail(line, tokens[i].column,
                    "\"" + tokens[i].text + "\" is not a header name (letters, digits and " +
                        "!#$%&'*+-.^_`| at most 256)");
      }
      out->header = LowerCopy(tokens[i].text);
      if (IsProtectedHeader(out->header)) {
        return Fail(line, tokens[i].column,
                    "header " + tokens[i].text +
                        " belongs to the proxy (message framing and hop-by-hop headers cannot "
                        "be changed by rules)");
      }
      ++i;
    }
    if (info->pattern) {
      if (i >= tokens.size()) {
        return missing("the pattern");
      }
      if (!CheckPattern(line, tokens[i])) {
        return false;
      }
      std::string_view pattern = tokens[i].text;
      out->pattern_column = tokens[i].column;
      if (!info->header && pattern.front() == '!') {
        out->negate = true;
        pattern.remove_prefix(1);
        ++out->pattern_column;
      }
      out->pattern = std::string(pattern);
      ++i;
    }
    if (info->values == 1) {
      if (i >= tokens.size() || (is_options(i) && i + 1 >= tokens.size() && !info->pattern)) {
        return missing(info->pattern ? "the replacement" : "the value");
      }
      if (!ParseText(line, tokens[i], /*back_references=*/info->pattern, &out->value)) {
        return false;
      }
      out->has_value = !(info->pattern && tokens[i].text == "-" && !tokens[i].quoted);
      ++i;
    } else if (info->values == 2 && i < tokens.size() && !LooksLikeOptions(tokens, i)) {
      // Forbidden/gone: the destination is ignored (conventionally -).
      ++i;
    }
    if (i < tokens.size()) {
      if (!is_options(i)) {
        return Fail(line, tokens[i].column,
                    "unexpected \"" + tokens[i].text +
                        "\" (options are written [a,b] at the end; " +
                        "an argument with spaces in double quotes)");
      }
      if (!ParseOptions(line, tokens, i, out)) {
        return false;
      }
    }
    if (info->op == Op::kRedirectUrl && !out->has_value) {
      return Fail(line, name.column, "RegRedirectUrl: the destination must not be -");
    }
    return true;
  }

  static bool LooksLikeOptions(const std::vector<Token>& tokens, size_t i) {
    return !tokens[i].quoted && tokens[i].text.front() == '[' && tokens.back().text.back() == ']' &&
           !tokens.back().quoted;
  }

  bool ParseOptions(int line, const std::vector<Token>& tokens, size_t i, Action* out) {
    std::string joined;
    int column = tokens[i].column;
    for (size_t k = i; k < tokens.size(); ++k) {
      if (tokens[k].quoted) {
        return Fail(line, tokens[k].column, "quoted text inside the options");
      }
      joined += tokens[k].text;
    }
    // "[a,b]" or "[a][b]".
    std::vector<std::string> names;
    size_t at = 0;
    while (at < joined.size()) {
      if (joined[at] != '[') {
        return Fail(line, column, "options are written [a,b], got " + joined);
      }
      size_t close = joined.find(']', at);
      if (close == std::string::npos) {
        return Fail(line, column, "options: missing ] in " + joined);
      }
      std::string_view inner(joined.data() + at + 1, close - at - 1);
      while (true) {
        size_t comma = inner.find(',');
        names.emplace_back(inner.substr(0, comma));
        if (comma == std::string_view::npos) {
          break;
        }
        inner.remove_prefix(comma + 1);
      }
      at = close + 1;
    }
    Options& options = out->options;
    const bool url =
        out->op == Op::kRewriteUrl || out->op == Op::kRewriteRawUrl || out->op == Op::kRedirectUrl;
    for (const std::string& raw : names) {
      std::string option = LowerCopy(raw);
      if (option == "break") {
        options.break_ = true;
      } else if (option == "restart") {
        options.restart = true;
      } else if (option == "noescape" || option == "qsappend" || option == "qsreplace") {
        if (!url) {
          return Fail(line, column, "option " + option + " only with a URL rewrite or redirect");
        }
        (option == "noescape"   ? options.noescape
         : option == "qsappend" ? options.qsappend
                                : options.qsreplace) = true;
      } else if (option.rfind("code=", 0) == 0) {
        if (out->op != Op::kRedirectUrl) {
          return Fail(line, column, "option CODE= only with RegRedirectUrl");
        }
        std::string code = option.substr(5);
        if (code == "permanent") {
          options.code = 301;
        } else if (code == "temp") {
          options.code = 302;
        } else if (code == "seeother") {
          options.code = 303;
        } else if (code.size() == 3 && code[0] == '3' && code[1] >= '0' && code[1] <= '9' &&
                   code[2] >= '0' && code[2] <= '9') {
          options.code = std::stoi(code);
        } else {
          return Fail(line, column,
                      "CODE=" + raw.substr(5) +
                          ": a status from 300 to 399, or permanent, temp, "
                          "seeother");
        }
      } else if (option == "compound" || option.rfind("skip", 0) == 0) {
        return Fail(line, column,
                    "option " + raw +
                        " is not supported (SAP no longer recommends it): write "
                        "if ... begin ... end");
      } else if (option == "and" || option == "or") {
        return Fail(line, column, "[" + raw + "] joins conditions, not commands");
      } else {
        return Fail(line, column,
                    "unknown option \"" + raw +
                        "\" (break, restart, noescape, qsappend, qsreplace, CODE=)");
      }
    }
    if (options.break_ && options.restart) {
      return Fail(line, column, "break and restart contradict each other");
    }
    if (options.qsappend && options.qsreplace) {
      return Fail(line, column, "qsappend and qsreplace contradict each other");
    }
    return true;
  }

  bool ParseText(int line, const Token& token, bool back_references, Text* out) {
    out->source = token.text;
    out->segments.clear();
    std::string_view text = token.text;
    std::string literal;
    auto flush = [&] {
      if (!literal.empty()) {
        Segment segment;
        segment.text = std::move(literal);
        out->segments.push_back(std::move(segment));
        literal.clear();
      }
    };
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (c == '%' && i + 1 < text.size() && text[i + 1] == '{') {
        size_t close = text.find('}', i + 2);
        if (close == std::string_view::npos) {
          return Fail(line, token.column + static_cast<int>(i), "%{ without a closing }");
        }
        Segment segment;
        if (!ParseVariable(text.substr(i + 2, close - i - 2), &segment)) {
          return Fail(line, token.column + static_cast<int>(i),
                      "unknown variable %{" + std::string(text.substr(i + 2, close - i - 2)) +
                          "} (HTTP_HOST and the other HTTP_* headers, HEADER:<name>, "
                          "REQUEST_METHOD, SERVER_PROTOCOL, PATH, PATH_TRANSLATED, QUERY_STRING, "
                          "FORMFIELD:<name>, SERVER_PORT, SERVER_ADDR, REMOTE_ADDR, REMOTE_HOST, "
                          "REMOTE_PORT)");
        }
        flush();
        out->segments.push_back(std::move(segment));
        i = close;
        continue;
      }
      if (back_references && c == '$' && i + 1 < text.size() && text[i + 1] >= '0' &&
          text[i + 1] <= '9') {
        flush();
        Segment segment;
        segment.kind = Segment::Kind::kBackReference;
        segment.reference = text[i + 1] - '0';
        out->segments.push_back(std::move(segment));
        ++i;
        continue;
      }
      literal.push_back(c);
    }
    flush();
    return true;
  }

  static bool ParseVariable(std::string_view name, Segment* out) {
    out->kind = Segment::Kind::kVariable;
    using V = Segment::Variable;
    auto prefixed = [&](std::string_view prefix, std::string_view* rest) {
      if (name.size() > prefix.size() && EqualsIgnoreCase(name.substr(0, prefix.size()), prefix)) {
        *rest = name.substr(prefix.size());
        return true;
      }
      return false;
    };
    std::string_view rest;
    if (prefixed("HEADER:", &rest)) {
      if (!IsHeaderName(rest)) {
        return false;
      }
      out->variable = V::kHeader;
      out->text = LowerCopy(rest);
      return true;
    }
    if (prefixed("FORMFIELD:", &rest)) {
      out->variable = V::kFormField;
      out->case_sensitive_name = name.substr(0, 10) == "FormField:";
      out->text = out->case_sensitive_name ? std::string(rest) : LowerCopy(rest);
      return true;
    }
    if (prefixed("HTTP_", &rest)) {
      std::string header = LowerCopy(rest);
      for (char& c : header) {
        if (c == '_') {
          c = '-';
        }
      }
      if (!IsHeaderName(header)) {
        return false;
      }
      out->variable = V::kHeader;
      out->text = std::move(header);
      return true;
    }
    static constexpr std::pair<std::string_view, V> kNames[] = {
        {"REQUEST_METHOD", V::kRequestMethod},
        {"SERVER_PROTOCOL", V::kServerProtocol},
        {"PATH", V::kPath},
        {"PATH_TRANSLATED", V::kPath},
        {"QUERY_STRING", V::kQueryString},
        {"SERVER_PORT", V::kServerPort},
        {"SERVER_ADDR", V::kServerAddr},
        {"REMOTE_ADDR", V::kRemoteAddr},
        {"REMOTE_HOST", V::kRemoteAddr},
        {"REMOTE_PORT", V::kRemotePort},
    };
    for (const auto& [known, variable] : kNames) {
      if (EqualsIgnoreCase(known, name)) {
        out->variable = variable;
        return true;
      }
    }
    return false;
  }

  std::vector<Line> lines_;
  ParseError* error_;
  size_t next_ = 0;
  size_t statements_ = 0;
  size_t actions_ = 0;
};

// Splits the file into lines of tokens, leaving out blank and comment lines.
bool Tokenize(std::string_view text, std::vector<Line>* lines, ParseError* error) {
  auto fail = [&](int line, int column, std::string message) {
    error->line = line;
    error->column = column;
    error->message = std::move(message);
    return false;
  };
  if (text.size() > kMaxRuleFileBytes) {
    return fail(
        0, 0, "the rule file is larger than " + std::to_string(kMaxRuleFileBytes / 1024) + " KiB");
  }
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    std::string_view raw = text.substr(start, end - start);
    ++number;
    if (!raw.empty() && raw.back() == '\r') {
      raw.remove_suffix(1);
    }
    Line line;
    line.number = number;
    size_t i = 0;
    while (i < raw.size()) {
      unsigned char c = static_cast<unsigned char>(raw[i]);
      int column = static_cast<int>(i) + 1;
      if (c == ' ' || c == '\t') {
        ++i;
        continue;
      }
      if (line.tokens.empty() && c == '#') {
        break;  // a comment line
      }
      Token token;
      token.column = column;
      bool in_quotes = c == '"';
      token.quoted = in_quotes;
      if (in_quotes) {
        ++i;
      }
      bool closed = !in_quotes;
      while (i < raw.size()) {
        unsigned char d = static_cast<unsigned char>(raw[i]);
        if (d < 0x20 && d != '\t') {
          return fail(number, static_cast<int>(i) + 1, "control character in the rule text");
        }
        if (d == 0x7f) {
          return fail(number, static_cast<int>(i) + 1, "control character in the rule text");
        }
        if (d >= 0x80) {
          size_t length = Utf8Length(raw.substr(i));
          if (length == 0) {
            return fail(number, static_cast<int>(i) + 1, "bytes that are not UTF-8");
          }
          token.text.append(raw.substr(i, length));
          i += length;
          continue;
        }
        if (in_quotes) {
          if (d == '\\' && i + 1 < raw.size() && (raw[i + 1] == '"' || raw[i + 1] == '\\')) {
            token.text.push_back(raw[i + 1]);
            i += 2;
            continue;
          }
          if (d == '"') {
            closed = true;
            ++i;
            break;
          }
        } else if (d == ' ' || d == '\t') {
          break;
        }
        token.text.push_back(static_cast<char>(d));
        ++i;
      }
      if (!closed) {
        return fail(number, column, "a quoted argument without its closing \"");
      }
      if (in_quotes && i < raw.size() && raw[i] != ' ' && raw[i] != '\t') {
        return fail(number, static_cast<int>(i) + 1, "a space must follow a quoted argument");
      }
      line.tokens.push_back(std::move(token));
    }
    if (!line.tokens.empty()) {
      lines->push_back(std::move(line));
    }
    if (end == text.size()) {
      break;
    }
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kNop:
      return "NOP";
    case Op::kRemoveHeader:
      return "RemoveHeader";
    case Op::kSetHeader:
      return "SetHeader";
    case Op::kSetHeaderIfEmpty:
      return "SetHeaderIfEmpty";
    case Op::kAppendHeader:
      return "AppendHeader";
    case Op::kRegRewriteHeader:
      return "RegRewriteHeader";
    case Op::kRemoveResponseHeader:
      return "RemoveResponseHeader";
    case Op::kSetResponseHeader:
      return "SetResponseHeader";
    case Op::kSetResponseHeaderIfEmpty:
      return "SetResponseHeaderIfEmpty";
    case Op::kAppendResponseHeader:
      return "AppendResponseHeader";
    case Op::kRegRewriteResponseHeader:
      return "RegRewriteResponseHeader";
    case Op::kRewriteUrl:
      return "RegRewriteUrl";
    case Op::kRewriteRawUrl:
      return "RegRewriteRawUrl";
    case Op::kRedirectUrl:
      return "RegRedirectUrl";
    case Op::kForbiddenUrl:
      return "RegForbiddenUrl";
    case Op::kGoneUrl:
      return "RegGoneUrl";
  }
  return "?";
}

bool IsProtectedHeader(std::string_view name) {
  static constexpr std::string_view kProtected[] = {
      "content-length", "transfer-encoding", "connection",      "keep-alive", "te",
      "trailer",        "upgrade",           "proxy-connection"};
  for (std::string_view protected_name : kProtected) {
    if (name == protected_name) {
      return true;
    }
  }
  return false;
}

std::string ParseError::ToString() const {
  if (line == 0) {
    return message;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message;
}

bool Parse(std::string_view text, RuleFile* out, ParseError* error) {
  *out = RuleFile{};
  *error = ParseError{};
  std::vector<Line> lines;
  if (!Tokenize(text, &lines, error)) {
    return false;
  }
  Parser parser(std::move(lines), error);
  return parser.Run(out);
}

bool RenderAction(const StructuredAction& action, std::string* line, std::string* error) {
  auto has_control = [](std::string_view text) {
    for (char c : text) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return true;
      }
    }
    return false;
  };
  auto quote = [](std::string_view text) {
    bool plain = !text.empty() && text.front() != '"' && text.front() != '[';
    for (char c : text) {
      if (c == ' ' || c == '\t' || c == '\\' || c == '"') {
        plain = false;
      }
    }
    if (plain) {
      return std::string(text);
    }
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') {
        out.push_back('\\');
      }
      out.push_back(c);
    }
    out.push_back('"');
    return out;
  };
  for (const auto& [field, text] :
       {std::pair<std::string_view, const std::string*>{"op", &action.op},
        {"header", &action.header},
        {"pattern", &action.pattern},
        {"value", &action.value}}) {
    if (has_control(*text)) {
      *error = std::string(field) + ": control characters (a line break?) are not allowed";
      return false;
    }
  }
  if (action.op.empty() || !FindOp(action.op)) {
    *error = "op: \"" + action.op + "\" is not a command of the rule language";
    return false;
  }
  std::string out = action.op;
  for (const std::string* part : {&action.header, &action.pattern, &action.value}) {
    if (!part->empty()) {
      out += " " + quote(*part);
    }
  }
  if (!action.options.empty()) {
    out += " [";
    for (size_t i = 0; i < action.options.size(); ++i) {
      const std::string& option = action.options[i];
      bool ok = !option.empty();
      for (char c : option) {
        ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '=');
      }
      if (!ok) {
        *error = "options[" + std::to_string(i) + "]: \"" + option +
                 "\" is not an option (break, restart, noescape, qsappend, qsreplace, CODE=...)";
        return false;
      }
      out += (i > 0 ? "," : "") + option;
    }
    out += "]";
  }
  *line = std::move(out);
  return true;
}

}  // namespace kwd::modification
