// The modification rule language: parser errors with line and column, and
// the compiled program on real-shaped SAP rule files.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/modification/program.h"
#include "common/modification/rules.h"

namespace kwd::modification {
namespace {

struct Request {
  std::string method = "GET";
  std::string path = "/";
  std::string raw_path;  // defaults to path
  std::string query;
  bool has_query = false;
  bool https = false;
  std::vector<HeaderView> headers;
  std::string remote_addr = "10.1.2.3";
  std::string server_addr = "192.0.2.10";
  std::string server_port = "80";

  RequestView View() const {
    RequestView view;
    view.method = method;
    view.path = path;
    view.raw_path = raw_path.empty() ? path : raw_path;
    view.query = query;
    view.has_query = has_query;
    view.https = https;
    view.headers = headers;
    view.remote_addr = remote_addr;
    view.server_addr = server_addr;
    view.server_port = server_port;
    view.remote_port = "50000";
    return view;
  }
};

std::unique_ptr<const Program> MustCompile(std::string_view text) {
  ParseError error;
  auto program = Program::CompileText(text, &error);
  if (program == nullptr) {
    ADD_FAILURE() << error.ToString();
    return Program::CompileText("NOP", &error);
  }
  return program;
}

ParseError MustFail(std::string_view text) {
  ParseError error;
  auto program = Program::CompileText(text, &error);
  EXPECT_EQ(program, nullptr) << text;
  return error;
}

State Eval(const Program& program, const Request& request) {
  State state;
  program.Evaluate(request.View(), &state);
  return state;
}

std::string HeaderValue(const State& state, std::string_view name) {
  for (const auto& [key, value] : state.headers) {
    if (key == name) {
      return value;
    }
  }
  return "<none>";
}

TEST(ModificationTest, ForceHttpsRedirectKeepsHostPathAndQuery) {
  auto program = MustCompile(R"R(# plain-HTTP requests go to the same host and path over HTTPS
if %{SERVER_PROTOCOL} !stricmp "https"
RegRedirectUrl ^(.*)$ https://%{HTTP_HOST}$1 [CODE=permanent]
)R");
  Request request;
  request.path = "/sap/bc/gui/sap its/webgui";
  request.query = "sap-client=100";
  request.has_query = true;
  request.headers = {{"Host", "erp.example.com"}};
  State state = Eval(*program, request);
  EXPECT_EQ(state.outcome, Outcome::kRedirect);
  EXPECT_EQ(state.status, 301);
  EXPECT_EQ(state.location, "https://erp.example.com/sap/bc/gui/sap%20its/webgui?sap-client=100");
  request.https = true;
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kContinue);
}

TEST(ModificationTest, RemoteHostIsTheClientAddress) {
  // kwd looks up no host names: %{REMOTE_HOST} is %{REMOTE_ADDR}.
  auto program = MustCompile("if %{REMOTE_HOST} = 10.1.2.3\nSetHeader X-Host %{REMOTE_HOST}\n");
  Request request;
  EXPECT_EQ(HeaderValue(Eval(*program, request), "x-host"), "10.1.2.3");
  request.remote_addr = "10.9.9.9";
  EXPECT_EQ(HeaderValue(Eval(*program, request), "x-host"), "<none>");
}

TEST(ModificationTest, FioriLaunchpadRedirectOnlyForTheBareRoot) {
  auto program = MustCompile("RegIRedirectUrl ^/$ /sap/bc/ui2/flp [CODE=permanent]\n");
  Request request;
  State state = Eval(*program, request);
  EXPECT_EQ(state.outcome, Outcome::kRedirect);
  EXPECT_EQ(state.location, "/sap/bc/ui2/flp");
  request.path = "/sap/bc/ui2/flp";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kContinue);
}

TEST(ModificationTest, HostBasedSystemChoiceSetsTheTargetSid) {
  auto program = MustCompile(R"R(if %{HTTP_HOST} regimatch ^erp\.example\.com
SetHeader x-sap-webdisp-target-sid ERP [break]
if %{HTTP_HOST} regimatch ^portal\.example\.com
SetHeader x-sap-webdisp-target-sid EP1 [break]
SetHeader x-sap-webdisp-target-sid "NONE"
)R");
  Request request;
  request.headers = {{"Host", "PORTAL.example.com:443"}};
  State state = Eval(*program, request);
  EXPECT_EQ(state.target_sid, "EP1");
  EXPECT_EQ(state.fired, 1);  // [break]: the last line did not run
  request.headers = {{"Host", "erp.example.com"}};
  EXPECT_EQ(Eval(*program, request).target_sid, "ERP");
  request.headers = {{"Host", "other"}};
  EXPECT_EQ(Eval(*program, request).target_sid, "NONE");
}

TEST(ModificationTest, PseudoHeaderAlsoChoosesTheSystem) {
  auto program = MustCompile("SetHeader ~webdisp_target_sid QAS\n");
  EXPECT_EQ(Eval(*program, Request{}).target_sid, "QAS");
}

TEST(ModificationTest, HeaderEditsInOrder) {
  auto program = MustCompile(R"R(SetHeader clientProtocol %{SERVER_PROTOCOL}
RemoveHeader X-Secret
SetHeaderIfEmpty X-Client-Ip %{REMOTE_ADDR}
SetHeaderIfEmpty Accept-Language de
AppendHeader Via "1.1 kwd"
RegIRewriteHeader User-Agent "^mozilla/(\d+)" "Browser/$1"
)R");
  Request request;
  request.headers = {{"X-Secret", "s3cret"},
                     {"Accept-Language", "en"},
                     {"Via", "1.0 edge"},
                     {"User-Agent", "Mozilla/5.0 (X11)"}};
  State state = Eval(*program, request);
  ASSERT_TRUE(state.headers_changed);
  EXPECT_EQ(HeaderValue(state, "clientprotocol"), "http");
  EXPECT_EQ(HeaderValue(state, "X-Secret"), "<none>");
  EXPECT_EQ(HeaderValue(state, "x-client-ip"), "10.1.2.3");
  EXPECT_EQ(HeaderValue(state, "Accept-Language"), "en");
  EXPECT_EQ(HeaderValue(state, "Via"), "1.0 edge, 1.1 kwd");
  EXPECT_EQ(HeaderValue(state, "User-Agent"), "Browser/5.0 (X11)");
  EXPECT_EQ(state.fired, 5);  // SetHeaderIfEmpty Accept-Language did not fire
}

TEST(ModificationTest, ResponseHeaderEditsAreAppliedToTheResponse) {
  auto program = MustCompile(R"R(SetResponseHeader Strict-Transport-Security "max-age=31536000"
RemoveResponseHeader Server
AppendResponseHeader Cache-Control private
AppendRespondHeader X-Seen-By %{SERVER_ADDR}
SetResponseHeaderIfEmpty X-Frame-Options SAMEORIGIN
RegRewriteResponseHeader Location ^http://(.*)$ https://$1
)R");
  State state = Eval(*program, Request{});
  ASSERT_EQ(state.response_edits.size(), 6u);
  std::vector<Header> response = {{"Server", "SAP NetWeaver"},
                                  {"Cache-Control", "no-store"},
                                  {"X-Frame-Options", "DENY"},
                                  {"Location", "http://erp.example.com/x"}};
  ApplyResponseEdits(state.response_edits, &response);
  std::vector<Header> want = {{"Cache-Control", "no-store, private"},
                              {"X-Frame-Options", "DENY"},
                              {"Location", "https://erp.example.com/x"},
                              {"strict-transport-security", "max-age=31536000"},
                              {"x-seen-by", "192.0.2.10"}};
  EXPECT_EQ(response, want);
}

TEST(ModificationTest, RewriteWithBackReferencesAndQueryOptions) {
  auto program = MustCompile(R"R(RegIRewriteUrl ^/legacy/(.*) /sap/bc/$1
RegRewriteUrl ^/q/(.*) /sap/q?x=$1 [qsappend]
RegRewriteUrl ^/r/(.*) /sap/r/$1 [qsreplace]
)R");
  Request request;
  request.path = "/LEGACY/a b/c";
  request.query = "sap-client=100";
  request.has_query = true;
  State state = Eval(*program, request);
  EXPECT_TRUE(state.url_changed);
  EXPECT_EQ(state.path, "/sap/bc/a b/c");
  EXPECT_EQ(state.Target(), "/sap/bc/a%20b/c?sap-client=100");

  request.path = "/q/1";
  EXPECT_EQ(Eval(*program, request).Target(), "/sap/q?x=1&sap-client=100");
  request.path = "/r/1";
  EXPECT_EQ(Eval(*program, request).Target(), "/sap/r/1");
}

TEST(ModificationTest, RawRewriteSeesTheEncodedPath) {
  auto program = MustCompile("RegRewriteRawUrl ^/a%2Fb(.*) /c$1\n");
  Request request;
  request.path = "/a/b/x";
  request.raw_path = "/a%2Fb/x";
  State state = Eval(*program, request);
  EXPECT_EQ(state.Target(), "/c/x");
  // The normalised form does not hold %2F: the plain command does not match.
  auto plain = MustCompile("RegRewriteUrl ^/a%2Fb(.*) /c$1\n");
  EXPECT_FALSE(Eval(*plain, request).url_changed);
}

TEST(ModificationTest, NoescapeTakesTheResultAsEncoded) {
  auto program = MustCompile("RegRewriteUrl ^/x/(.*) /y/%41$1 [noescape]\n");
  Request request;
  request.path = "/x/z";
  State state = Eval(*program, request);
  EXPECT_EQ(state.raw_path, "/y/%41z");
  EXPECT_EQ(state.path, "/y/Az");
  // Without noescape the % is a character of the path.
  auto escaped = MustCompile("RegRewriteUrl ^/x/(.*) /y/%41$1\n");
  EXPECT_EQ(Eval(*escaped, request).raw_path, "/y/%2541z");
}

TEST(ModificationTest, ForbiddenWithNegationAndGone) {
  auto program = MustCompile(R"R(RegIGoneUrl ^/oldpath(.*) -
RegIForbiddenUrl !^/sap/(.*) -
)R");
  Request request;
  request.path = "/sap/bc/ping";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kContinue);
  request.path = "/etc/passwd";
  State state = Eval(*program, request);
  EXPECT_EQ(state.outcome, Outcome::kForbidden);
  EXPECT_EQ(state.status, 403);
  request.path = "/OLDPATH/x";
  EXPECT_EQ(Eval(*program, request).status, 410);
}

TEST(ModificationTest, CatchAllTrapAndBreak) {
  // SAP's warning: the rewrite does not stop processing, so the catch-all
  // forbids everything...
  auto trap = MustCompile(R"R(RegIRewriteUrl ^/dtcsld(.*) /sap/dtc$1
RegForbiddenUrl /(.*) -
)R");
  Request request;
  request.path = "/dtcsld/x";
  EXPECT_EQ(Eval(*trap, request).outcome, Outcome::kForbidden);
  // ...unless the rewrite breaks.
  auto fixed = MustCompile(R"R(RegIRewriteUrl ^/dtcsld(.*) /sap/dtc$1 [break]
RegForbiddenUrl /(.*) -
)R");
  State state = Eval(*fixed, request);
  EXPECT_EQ(state.outcome, Outcome::kContinue);
  EXPECT_EQ(state.path, "/sap/dtc/x");
}

TEST(ModificationTest, NopBreakIsAnEarlyExit) {
  auto program = MustCompile(R"R(if %{SERVER_ADDR} = 192.0.2.10
NOP [break]
RegForbiddenUrl ^/(.*) -
)R");
  Request request;
  request.path = "/x";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kContinue);
  request.server_addr = "192.0.2.11";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kForbidden);
}

TEST(ModificationTest, OnlyGetAndPostFromSapsReferenceFile) {
  auto program = MustCompile(R"R(SetHeader clientProtocol %{SERVER_PROTOCOL}
if %{REQUEST_METHOD} !stricmp "GET" [AND]
if %{REQUEST_METHOD} !stricmp "POST"
RegForbiddenUrl ^/(.*) -
RegRewriteUrl ^/$ /index.html
if %{HTTP_HOST} regimatch ^ldp.*
RegIRewriteUrl ^/ping(.*) /sap/public/icman/ping$1
)R");
  Request request;
  request.method = "DELETE";
  request.path = "/x";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kForbidden);
  request.method = "post";
  request.path = "/";
  EXPECT_EQ(Eval(*program, request).path, "/index.html");
  request.path = "/ping/x";
  request.headers = {{"host", "ldpa001"}};
  EXPECT_EQ(Eval(*program, request).path, "/sap/public/icman/ping/x");
}

TEST(ModificationTest, AndOrAreEvaluatedLeftToRightWithoutPrecedence) {
  // true or false and false: left to right is (true or false) and false =
  // false; with precedence it would be true.
  auto program = MustCompile(R"R(if a = a [or]
if a = b [and]
if a = c
SetHeader x-hit yes
)R");
  EXPECT_FALSE(Eval(*program, Request{}).headers_changed);
  // false and true or true: (false and true) or true = true.
  auto second = MustCompile(R"R(if a = b [and]
if a = a [or]
if a = a
SetHeader x-hit yes
)R");
  EXPECT_EQ(HeaderValue(Eval(*second, Request{}), "x-hit"), "yes");
}

TEST(ModificationTest, BlocksAndElse) {
  auto program = MustCompile(R"R(if %{HTTP_HOST} stricmp erp.example.com begin
  SetHeader x-a 1
  if %{PATH} regmatch ^/admin
  RegForbiddenUrl ^/ -
  else
  SetHeader x-b 2
end
else begin
  SetHeader x-c 3
end
if %{QUERY_STRING} = "" SetHeader x-d 4 else SetHeader x-d 5
)R");
  Request request;
  request.headers = {{"Host", "ERP.example.com"}};
  State state = Eval(*program, request);
  EXPECT_EQ(HeaderValue(state, "x-a"), "1");
  EXPECT_EQ(HeaderValue(state, "x-b"), "2");
  EXPECT_EQ(HeaderValue(state, "x-c"), "<none>");
  EXPECT_EQ(HeaderValue(state, "x-d"), "4");
  request.path = "/admin/x";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kForbidden);
  request.headers = {{"Host", "other"}};
  request.query = "a=1";
  request.has_query = true;
  state = Eval(*program, request);
  EXPECT_EQ(HeaderValue(state, "x-a"), "<none>");
  EXPECT_EQ(HeaderValue(state, "x-c"), "3");
  EXPECT_EQ(HeaderValue(state, "x-d"), "5");
}

TEST(ModificationTest, ComparisonsAndVariables) {
  auto program = MustCompile(R"R(if %{SERVER_PORT} >= 443 SetHeader x-tls yes
if %{SERVER_PORT} < 100 SetHeader x-low yes
if %{REMOTE_ADDR} ipmatch 10.0.0.0/8 SetHeader x-internal yes
if %{REMOTE_ADDR} !ipmatch 10.0.0.0/8 SetHeader x-external yes
if %{FORMFIELD:SAP-CLIENT} = 100 SetHeader x-client 100
if %{FormField:sap-client} = 100 SetHeader x-exact yes
if %{HEADER:x-custom} strcmp Value SetHeader x-case yes
if %{HEADER:x-custom} stricmp value SetHeader x-nocase yes
)R");
  Request request;
  request.server_port = "8443";
  request.query = "sap-client=100&x=1";
  request.has_query = true;
  request.headers = {{"X-Custom", "Value"}};
  State state = Eval(*program, request);
  EXPECT_EQ(HeaderValue(state, "x-tls"), "yes");  // numeric: 8443 >= 443
  EXPECT_EQ(HeaderValue(state, "x-low"), "<none>");
  EXPECT_EQ(HeaderValue(state, "x-internal"), "yes");
  EXPECT_EQ(HeaderValue(state, "x-external"), "<none>");
  EXPECT_EQ(HeaderValue(state, "x-client"), "100");
  EXPECT_EQ(HeaderValue(state, "x-exact"), "yes");
  EXPECT_EQ(HeaderValue(state, "x-case"), "yes");
  EXPECT_EQ(HeaderValue(state, "x-nocase"), "yes");
}

TEST(ModificationTest, RestartIsBounded) {
  auto program = MustCompile("RegRewriteUrl ^/(.*) /x/$1 [restart]\n");
  Request request;
  request.path = "/a";
  State state = Eval(*program, request);
  EXPECT_EQ(state.outcome, Outcome::kError);
  EXPECT_NE(state.error.find("restart"), std::string::npos);
  // A restart that converges is fine.
  auto converges = MustCompile(R"R(RegRewriteUrl ^/old/(.*) /new/$1 [restart]
RegRewriteUrl ^/new/old/(.*) /new/$1
)R");
  request.path = "/old/old/y";
  state = Eval(*converges, request);
  EXPECT_EQ(state.outcome, Outcome::kContinue);
  EXPECT_EQ(state.path, "/new/y");
}

TEST(ModificationTest, TraceRecordsEveryCommandThatFired) {
  auto program = MustCompile(R"R(SetHeader x-a 1
RegRewriteUrl ^/a(.*) /b$1
RegRewriteUrl ^/zzz /never
)R");
  Request request;
  request.path = "/a/c";
  State state;
  state.tracing = true;
  program->Evaluate(request.View(), &state);
  ASSERT_EQ(state.trace.size(), 2u);
  EXPECT_EQ(state.trace[0].line, 1);
  EXPECT_EQ(state.trace[0].url, "/a/c");
  EXPECT_EQ(state.trace[0].headers, (std::vector<Header>{{"x-a", "1"}}));
  EXPECT_EQ(state.trace[1].line, 2);
  EXPECT_EQ(state.trace[1].command, "RegRewriteUrl ^/a(.*) /b$1");
  EXPECT_EQ(state.trace[1].url, "/b/c");
}

TEST(ModificationTest, ErrorsNameLineAndColumn) {
  ParseError error = MustFail("SetHeader x 1\nRegRewriteUrl ^/(a /b\n");
  EXPECT_EQ(error.line, 2);
  EXPECT_EQ(error.column, 15);
  EXPECT_NE(error.message.find("does not compile"), std::string::npos) << error.message;

  error = MustFail("\n\n  Frobnicate x\n");
  EXPECT_EQ(error.line, 3);
  EXPECT_EQ(error.column, 3);
  EXPECT_NE(error.message.find("unknown command"), std::string::npos);

  error = MustFail("if %{HTTP_HOST} regimatch *.wdf.sap.com\nNOP\n");
  EXPECT_EQ(error.line, 1);
  EXPECT_EQ(error.column, 27);
  EXPECT_NE(error.message.find("not globs"), std::string::npos) << error.message;

  error = MustFail("RegRewriteUrl ^/(a)$ /b/$2\n");
  EXPECT_NE(error.message.find("$2"), std::string::npos) << error.message;

  error = MustFail("SetHeader x %{NO_SUCH_VARIABLE}\n");
  EXPECT_NE(error.message.find("unknown variable"), std::string::npos);
  EXPECT_EQ(error.column, 13);

  error = MustFail("SetHeader Content-Length 0\n");
  EXPECT_NE(error.message.find("belongs to the proxy"), std::string::npos);
  error = MustFail("RegRedirectUrl ^/$ /x [CODE=200]\n");
  EXPECT_NE(error.message.find("CODE="), std::string::npos);
  error = MustFail("RegRewriteUrl ^/$ /x [compound]\n");
  EXPECT_NE(error.message.find("not supported"), std::string::npos);
  error = MustFail("SetHeader x 1 [bogus]\n");
  EXPECT_NE(error.message.find("unknown option"), std::string::npos);
  error = MustFail("if a = a\n");
  EXPECT_NE(error.message.find("not followed by a rule"), std::string::npos);
  error = MustFail("if a = a [and]\nNOP\n");
  EXPECT_NE(error.message.find("no if line follows"), std::string::npos);
  error = MustFail("if a = a begin\nNOP\n");
  EXPECT_NE(error.message.find("begin without a matching end"), std::string::npos);
  error = MustFail("end\n");
  EXPECT_NE(error.message.find("end without"), std::string::npos);
  error = MustFail("else NOP\n");
  EXPECT_NE(error.message.find("else without"), std::string::npos);
  error = MustFail("SetHeader x \"open\n");
  EXPECT_NE(error.message.find("closing"), std::string::npos);
  error = MustFail("if a regmatch b c\n");
  EXPECT_NE(error.message.find("unknown command"), std::string::npos);
}

TEST(ModificationTest, HostileInput) {
  // Bytes that are not UTF-8, and controls.
  ParseError error = MustFail("SetHeader x \xff\xfe\n");
  EXPECT_EQ(error.line, 1);
  EXPECT_NE(error.message.find("UTF-8"), std::string::npos);
  error = MustFail(std::string("SetHeader x a\0b\n", 16));
  EXPECT_NE(error.message.find("control"), std::string::npos);
  // Nesting beyond the bound.
  std::string deep;
  for (int i = 0; i < 100; ++i) {
    deep += "if a = a begin\n";
  }
  error = MustFail(deep);
  EXPECT_NE(error.message.find("nested"), std::string::npos) << error.message;
  // Too large a file.
  error = MustFail(std::string(kMaxRuleFileBytes + 1, '#'));
  EXPECT_NE(error.message.find("larger than"), std::string::npos);
}

TEST(ModificationTest, CatastrophicBacktrackingPatternRunsInLinearTime) {
  auto program = MustCompile("RegForbiddenUrl ^/(a+)+$ -\nRegForbiddenUrl ^/(a|aa)*c -\n");
  Request request;
  request.path = "/" + std::string(5000, 'a') + "!";
  auto start = std::chrono::steady_clock::now();
  State state = Eval(*program, request);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(state.outcome, Outcome::kContinue);
  EXPECT_LT(elapsed, std::chrono::milliseconds(200));
}

TEST(ModificationTest, TenThousandRules) {
  std::string text;
  for (int i = 0; i < 10000; ++i) {
    text += "RegRewriteUrl ^/r" + std::to_string(i) + "/(.*) /s" + std::to_string(i) + "/$1\n";
  }
  auto program = MustCompile(text);
  ASSERT_NE(program, nullptr);
  EXPECT_EQ(program->command_count(), 10000u);
  Request request;
  request.path = "/r9999/x";
  EXPECT_EQ(Eval(*program, request).path, "/s9999/x");
  // More statements than the bound: refused, not slowly accepted.
  std::string too_many;
  for (size_t i = 0; i <= kMaxStatements; ++i) {
    too_many += "NOP\n";
  }
  EXPECT_NE(MustFail(too_many).message.find("statements"), std::string::npos);
}

TEST(ModificationTest, RewriteThatMakesNoPathIsAnError) {
  auto program = MustCompile("RegRewriteUrl ^/(.*) $1 [noescape]\n");
  Request request;
  request.path = "/x";
  EXPECT_EQ(Eval(*program, request).outcome, Outcome::kError);
}

TEST(ModificationTest, StructuredActionsRenderToTheSameLanguage) {
  StructuredAction action;
  action.op = "RegIRewriteUrl";
  action.pattern = "^/legacy/(.*)";
  action.value = "/sap/bc/$1";
  action.options = {"break"};
  std::string line;
  std::string error;
  ASSERT_TRUE(RenderAction(action, &line, &error)) << error;
  EXPECT_EQ(line, "RegIRewriteUrl ^/legacy/(.*) /sap/bc/$1 [break]");

  StructuredAction header;
  header.op = "SetHeader";
  header.header = "X-Note";
  header.value = "a \"quoted\" value\\";
  ASSERT_TRUE(RenderAction(header, &line, &error));
  auto program = MustCompile(line);
  EXPECT_EQ(HeaderValue(Eval(*program, Request{}), "x-note"), "a \"quoted\" value\\");

  header.value = "x\nRegForbiddenUrl ^/ -";
  EXPECT_FALSE(RenderAction(header, &line, &error));
  EXPECT_NE(error.find("control"), std::string::npos);
  header.value = "x";
  header.options = {"break]", "SetHeader"};
  EXPECT_FALSE(RenderAction(header, &line, &error));
  header.options = {};
  header.op = "Frob";
  EXPECT_FALSE(RenderAction(header, &line, &error));
}

}  // namespace
}  // namespace kwd::modification

namespace kwd::modification {
namespace {

// Many patterns each near RE2's per-pattern bound: refused by the file's
// total budget instead of taking gigabytes.
TEST(ModificationTest, PatternsTogetherAreBounded) {
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    text += "RegForbiddenUrl ^/[a-z]{1000}[0-9]{1000}[A-Z]{1000}" + std::to_string(i) + " -\n";
  }
  ParseError error;
  EXPECT_EQ(Program::CompileText(text, &error), nullptr);
  EXPECT_NE(error.message.find("too large"), std::string::npos) << error.ToString();
  EXPECT_GT(error.line, 1);
}

}  // namespace
}  // namespace kwd::modification
