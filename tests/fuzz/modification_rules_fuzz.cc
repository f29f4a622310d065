// Fuzzes the modification rule parser and compiler (common/modification) on
// arbitrary rule files, and evaluates what compiles on a request whose path
// comes from the input too. Checks that errors carry a position inside the
// file, that evaluation ends (restart bound), and that nothing it produces
// for the wire (forwarded target, Location, header values) holds a control
// character or a line break.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/modification/program.h"
#include "common/modification/rules.h"

namespace {

void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

bool HasControl(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kwd::modification;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  // The first line (up to 200 bytes) is the request path, the rest the rules.
  size_t newline = input.find('\n');
  std::string path = "/";
  std::string_view rules = input;
  if (newline != std::string_view::npos && newline < 200) {
    for (char c : input.substr(0, newline)) {
      if (static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f) {
        path.push_back(c);
      }
    }
    rules = input.substr(newline + 1);
  }
  ParseError error;
  auto program = Program::CompileText(rules, &error);
  if (program == nullptr) {
    Check(!error.message.empty());
    Check(error.line >= 0 && error.column >= 0);
    size_t lines = 1;
    for (char c : rules) {
      lines += c == '\n' ? 1 : 0;
    }
    Check(static_cast<size_t>(error.line) <= lines);
    return 0;
  }
  std::vector<HeaderView> headers = {{"Host", "erp.example.com"}, {"Cookie", "a=b"}};
  RequestView request;
  request.method = "GET";
  request.path = path;
  request.raw_path = path;
  request.query = "sap-client=100";
  request.has_query = true;
  request.headers = headers;
  request.server_port = "443";
  request.remote_addr = "10.0.0.1";
  State state;
  state.tracing = true;
  program->Evaluate(request, &state);
  if (state.outcome == Outcome::kContinue) {
    Check(!HasControl(state.Target()));
    Check(!state.raw_path.empty() && state.raw_path.front() == '/');
    for (const auto& [name, value] : state.headers) {
      Check(!HasControl(name));
      Check(value.find('\r') == std::string::npos && value.find('\n') == std::string::npos);
    }
    std::vector<Header> response = {{"Location", "http://x/"}};
    ApplyResponseEdits(state.response_edits, &response);
    for (const auto& [name, value] : response) {
      Check(value.find('\r') == std::string::npos && value.find('\n') == std::string::npos);
    }
  }
  if (state.outcome == Outcome::kRedirect) {
    Check(!HasControl(state.location) && state.location.find(' ') == std::string::npos);
    Check(state.status >= 300 && state.status <= 399);
  }
  return 0;
}
