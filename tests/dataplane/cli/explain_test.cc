// Black-box tests of `kwd-proxy explain`: the real binary on a snapshot JSON
// written here (not produced by the controller).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr const char kSnapshot[] = R"({
  "groups": [
    {"key": "erp/diag", "kind": "KIND_ABAP", "strategy": "STRATEGY_WEIGHTED_ROUND_ROBIN",
     "loadResetIntervalSeconds": 25,
     "sessionAffinity": {
       "identifiers": ["SESSION_IDENTIFIER_SAP_CONTEXTID", "SESSION_IDENTIFIER_SAPLB",
                       "SESSION_IDENTIFIER_JSESSIONID", "SESSION_IDENTIFIER_SAP_EXT_SID"],
       "affinityCookieEnabled": true, "affinityCookieName": "kwd_affinity"},
     "servers": [
       {"name": "app1", "address": "10.0.0.1", "port": 8000, "capacity": 6,
        "state": "SERVER_STATE_READY"},
       {"name": "app2", "address": "10.0.0.2", "port": 8001, "capacity": 3,
        "state": "SERVER_STATE_READY"}]},
    {"key": "erp/j2ee", "kind": "KIND_JAVA", "strategy": "STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN",
     "servers": [
       {"name": "j1", "address": "10.0.1.1", "port": 50000, "capacity": 2,
        "state": "SERVER_STATE_READY"},
       {"name": "j2", "address": "10.0.1.2", "port": 50000, "capacity": 1,
        "state": "SERVER_STATE_READY"}]}
  ],
  "virtualHosts": [
    {"host": "", "defaultRootHandler": "KIND_ABAP", "defaultAbapGroup": "erp/diag",
     "defaultJavaGroup": "erp/j2ee",
     "rules": [{"prefix": "/nogroup/", "kind": "KIND_ABAP"},
               {"prefix": "/sap/", "kind": "KIND_ABAP", "group": "erp/diag",
                "hsts": {"maxAgeSeconds": 31536000, "includeSubdomains": true}}],
     "permissions": [{"action": "PERMISSION_ACTION_DENY", "pattern": "*.cgi"},
                     {"action": "PERMISSION_ACTION_SECURE", "pattern": "/sap/bc/gui/*"},
                     {"action": "PERMISSION_ACTION_SECURE", "pattern": "/sap/redirect/*",
                      "redirectToHttps": true}]},
    {"host": "portal.example.com", "defaultRootHandler": "KIND_JAVA",
     "defaultJavaGroup": "erp/j2ee"}
  ]
})";

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::vector<nlohmann::json> lines;
};

class ExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("kwd_explain_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    snapshot_ = (dir_ / "snapshot.json").string();
    std::ofstream(snapshot_) << kSnapshot;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs kwd-proxy with `args` (already shell-quoted), capturing both streams.
  ProcessResult Proxy(const std::string& args, const std::string& env = "") {
    const std::string err_file = (dir_ / "stderr").string();
    std::string command =
        env + " " + std::string(KWD_BINARY_DIR) + "/kwd-proxy " + args + " 2>" + err_file;
    ProcessResult run;
    FILE* pipe = ::popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::array<char, 4096> buffer;
    size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
      run.out.append(buffer.data(), n);
    }
    int status = ::pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream err_in(err_file);
    std::stringstream err;
    err << err_in.rdbuf();
    run.err = err.str();
    std::istringstream lines(run.out);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line.front() == '{') {
        run.lines.push_back(nlohmann::json::parse(line));
      }
    }
    return run;
  }

  ProcessResult Explain(const std::string& args, const std::string& env = "") {
    return Proxy("explain --snapshot " + snapshot_ + " " + args, env);
  }

  std::filesystem::path dir_;
  std::string snapshot_;
};

std::string Servers(const ProcessResult& run) {
  std::string out;
  for (const auto& line : run.lines) {
    out += line["server"].is_null() ? "-" : line["server"].get<std::string>();
    out += " ";
  }
  return out;
}

// A secure entry of a mapping with secureAction: redirect: the redirect
// explain shows (301/308, the Location with --https-port, 443 left out),
// the Strict-Transport-Security of https answers, and 403 without a port.
TEST_F(ExplainTest, ShowsTheSecureRedirectAndHsts) {
  ProcessResult run = Explain(
      "--url 'http://erp.example.com:8080/sap/redirect/a%2Fb?x=%41' --https-port 8443");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 1u);
  EXPECT_EQ(run.lines[0]["status"], 301);
  EXPECT_EQ(run.lines[0]["reason"], "secure-redirect");
  EXPECT_EQ(run.lines[0]["location"], "https://erp.example.com:8443/sap/redirect/a%2Fb?x=%41");
  EXPECT_TRUE(run.lines[0]["server"].is_null());
  EXPECT_TRUE(run.lines[0]["hsts"].is_null());  // plain http: never

  run = Explain("--url http://erp.example.com/sap/redirect/a --method POST");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.lines[0]["status"], 308);
  EXPECT_EQ(run.lines[0]["location"], "https://erp.example.com/sap/redirect/a");

  run = Explain("--url http://erp.example.com/sap/redirect/a --https-port 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.lines[0]["status"], 403);
  EXPECT_EQ(run.lines[0]["reason"], "denied");
  EXPECT_TRUE(run.lines[0]["location"].is_null());

  // Without the flag the entry forbids, as SAP does.
  run = Explain("--url http://erp.example.com/sap/bc/gui/a");
  EXPECT_EQ(run.lines[0]["status"], 403);
  EXPECT_TRUE(run.lines[0]["location"].is_null());

  run = Explain("--url https://erp.example.com/sap/redirect/a");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.lines[0]["status"].is_null());
  EXPECT_EQ(run.lines[0]["server"], "app1");
  EXPECT_EQ(run.lines[0]["hsts"], "max-age=31536000; includeSubDomains");

  for (const char* bad : {"--method get", "--method ''", "--https-port 65536", "--https-port x"}) {
    run = Explain(std::string("--url / ") + bad);
    EXPECT_EQ(run.exit_code, 2) << bad;
    EXPECT_NE(run.err.find(std::string(bad).substr(0, std::string(bad).find(' '))),
              std::string::npos)
        << run.err;
  }
}

TEST_F(ExplainTest, BalancesSequentialRequestsWithTheSeedSequence) {
  ProcessResult run = Explain("--url /sap/bc/bsp/x --count 6");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 6u);
  EXPECT_EQ(Servers(run), "app1 app1 app2 app1 app1 app2 ");
  const auto& first = run.lines[0];
  EXPECT_EQ(first["group"], "erp/diag");
  EXPECT_EQ(first["rule"], "/sap/");
  EXPECT_EQ(first["kind"], "abap");
  EXPECT_EQ(first["reason"], "balance");
  EXPECT_TRUE(first["status"].is_null());
  EXPECT_EQ(first["address"], "10.0.0.1:8000");
  EXPECT_EQ(first["path"], "/sap/bc/bsp/x");
}

TEST_F(ExplainTest, SimpleWeightedRoundRobinForJava) {
  ProcessResult run = Explain("--url /irj/portal --count 6");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(Servers(run), "j1 j1 j2 j1 j1 j2 ");
  EXPECT_EQ(run.lines[0]["rule"], "default");
  EXPECT_EQ(run.lines[0]["kind"], "java");
}

TEST_F(ExplainTest, ClassificationAndStatuses) {
  struct Case {
    std::string args;
    std::string reason;
    int status;  // 0: forwarded
    std::string rule;
  };
  const Case cases[] = {
      {"--url /", "balance", 0, "root"},
      {"--url 'http://portal.example.com/'", "balance", 0, "root"},
      {"--url / --host portal.example.com", "balance", 0, "root"},
      {"--url / --header 'Host: portal.example.com:443'", "balance", 0, "root"},
      {"--url /sap/x.cgi", "denied", 403, "/sap/"},
      {"--url /sap/bc/gui/x", "denied", 403, "/sap/"},
      {"--url https://erp/sap/bc/gui/x", "balance", 0, "/sap/"},
      {"--url /nogroup/x", "no-server", 503, "/nogroup/"},
      {"--url /sap/../../x", "bad-request", 400, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    ProcessResult run = Explain(c.args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    ASSERT_EQ(run.lines.size(), 1u);
    const auto& line = run.lines[0];
    EXPECT_EQ(line["reason"], c.reason);
    if (c.status == 0) {
      EXPECT_TRUE(line["status"].is_null());
      EXPECT_FALSE(line["server"].is_null());
    } else {
      EXPECT_EQ(line["status"], c.status);
      EXPECT_TRUE(line["server"].is_null());
    }
    if (c.rule.empty()) {
      EXPECT_TRUE(line["rule"].is_null());
    } else {
      EXPECT_EQ(line["rule"], c.rule);
    }
  }
  ProcessResult portal = Explain("--url / --host portal.example.com");
  EXPECT_EQ(portal.lines[0]["group"], "erp/j2ee");
  EXPECT_EQ(portal.lines[0]["kind"], "java");
}

// A URL's bytes need not be UTF-8 (the admin port's explain decodes %FF):
// the JSON line shows them replaced instead of the process aborting on an
// exception from the JSON writer.
TEST_F(ExplainTest, UrlBytesThatAreNotUtf8AreReplaced) {
  ProcessResult run = Explain("--url \"$(printf '/sap/\\377x')\"");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 1u) << run.out;
  EXPECT_EQ(run.lines[0]["path"], "/sap/\xEF\xBF\xBDx");
}

TEST_F(ExplainTest, StickyCookiesFromHeaders) {
  ProcessResult ctx = Explain(
      "--url /sap/bc/x --count 3 --header 'Cookie: a=1; sap-contextid=SID%3aANON%3aapp2%3aX'");
  ASSERT_EQ(ctx.exit_code, 0) << ctx.err;
  EXPECT_EQ(Servers(ctx), "app2 app2 app2 ");
  EXPECT_EQ(ctx.lines[0]["reason"], "sticky:sap-contextid");

  ProcessResult saplb = Explain("--url /sap/bc/x --header 'Cookie: saplb_*=(app2)node'");
  EXPECT_EQ(saplb.lines[0]["reason"], "sticky:saplb");

  ProcessResult lost =
      Explain("--url /sap/bc/x --header 'Cookie: sap-contextid=SID%3aANON%3agone%3aX'");
  EXPECT_EQ(lost.lines[0]["reason"], "balance");
  EXPECT_EQ(lost.lines[0]["lost"], "sap-contextid");
}

TEST_F(ExplainTest, SapExtSidIsRecordedAndTheAffinityCookieReplays) {
  ProcessResult run = Explain("--url '/sap/;sap-ext-sid=Portal42/x' --count 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 3u);
  EXPECT_EQ(run.lines[0]["reason"], "balance");
  ASSERT_TRUE(run.lines[0]["set_cookie"].is_string());
  EXPECT_EQ(run.lines[1]["reason"], "sticky:sap-ext-sid");
  EXPECT_EQ(run.lines[2]["reason"], "sticky:sap-ext-sid");
  EXPECT_TRUE(run.lines[1]["set_cookie"].is_null());

  // The cookie it printed routes a later request (same default key) to the same server.
  std::string set_cookie = run.lines[0]["set_cookie"];
  std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  ProcessResult replay = Explain("--url /sap/bc/x --header 'Cookie: " + cookie + "'");
  EXPECT_EQ(replay.lines[0]["reason"], "sticky:affinity-cookie");
  EXPECT_EQ(replay.lines[0]["server"], run.lines[0]["server"]);

  // Under another key the cookie is not trusted.
  ProcessResult other_key =
      Explain("--url /sap/bc/x --header 'Cookie: " + cookie + "'", "KWD_AFFINITY_KEY=another-key");
  EXPECT_EQ(other_key.lines[0]["reason"], "balance");
  std::ofstream(dir_ / "key") << "another-key\n";
  ProcessResult key_file = Explain("--url /sap/bc/x --affinity-key-file " +
                                   (dir_ / "key").string() + " --header 'Cookie: " + cookie + "'");
  EXPECT_EQ(key_file.lines[0]["reason"], "balance");
}

TEST_F(ExplainTest, UsageErrorsExitTwo) {
  for (const char* args :
       {"explain", "explain --url /", "explain --snapshot x --url / --count 0",
        "explain --snapshot x --url / --count abc", "explain --snapshot x --url / --bogus",
        "explain --snapshot", "explain --snapshot x --url / --header novalue", "frobnicate", ""}) {
    SCOPED_TRACE(args);
    ProcessResult run = Proxy(args);
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_FALSE(run.err.empty());
    EXPECT_TRUE(run.out.empty());
  }
}

TEST_F(ExplainTest, HelpExitsZero) {
  for (const char* args : {"--help", "explain --help", "serve --help"}) {
    SCOPED_TRACE(args);
    ProcessResult run = Proxy(args);
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_NE(run.out.find("usage: kwd-proxy"), std::string::npos);
  }
}

TEST_F(ExplainTest, BadSnapshotsExitOneNamingTheFileAndProblem) {
  const std::string missing = (dir_ / "missing.json").string();
  ProcessResult run = Proxy("explain --snapshot " + missing + " --url /");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find(missing), std::string::npos) << run.err;

  const std::string garbage = (dir_ / "garbage.json").string();
  std::ofstream(garbage) << "{not json";
  run = Proxy("explain --snapshot " + garbage + " --url /");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find(garbage), std::string::npos) << run.err;

  const std::string invalid = (dir_ / "invalid.json").string();
  std::string text = kSnapshot;
  text.replace(text.find("\"capacity\": 6"), 13, "\"capacity\": 0");
  std::ofstream(invalid) << text;
  run = Proxy("explain --snapshot " + invalid + " --url /");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find(invalid), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("capacity 0"), std::string::npos) << run.err;
}

}  // namespace
