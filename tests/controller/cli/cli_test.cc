// Black-box tests: run the built kwd-controller binary and check exit codes
// and output.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/snapshot_io.h"
#include "tests/support/command.h"

namespace kwd {
namespace {

namespace fs = std::filesystem;

using RunResult = kwd::testing::CommandResult;
using kwd::testing::ShellQuote;

RunResult RunController(const std::string& args, const std::string& cwd = "") {
  fs::path tmp =
      fs::path(::testing::TempDir()) /
      ("kwd_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  return kwd::testing::RunCommand(
      (cwd.empty() ? "" : "cd " + ShellQuote(cwd) + " && ") + ShellQuote(KWD_CONTROLLER_BINARY) +
          " " + args,
      tmp);
}

std::string Example(const std::string& name) {
  return std::string(KWD_SOURCE_DIR) + "/examples/" + name;
}

class ExampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleTest, ValidatesClean) {
  RunResult r = RunController("validate --source=dir:" + Example(GetParam()));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok: ", 0), 0u) << r.out;
}

TEST_P(ExampleTest, CompilesToACheckedSnapshot) {
  RunResult r = RunController("compile --source=dir:" + Example(GetParam()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  v1::Snapshot snapshot;
  std::string error;
  ASSERT_TRUE(SnapshotFromJson(r.out, &snapshot, &error)) << error;
  EXPECT_EQ(CheckSnapshot(snapshot), std::vector<std::string>{});
  EXPECT_EQ(snapshot.version(), ComputeSnapshotVersion(snapshot));
  EXPECT_GT(snapshot.groups_size(), 0);
  // Same input, same bytes.
  EXPECT_EQ(RunController("compile --source dir:" + Example(GetParam())).out, r.out);
}

INSTANTIATE_TEST_SUITE_P(All, ExampleTest, ::testing::Values("quickstart", "seed-002", "k8s"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

TEST(CliTest, QuickstartContent) {
  RunResult r = RunController("compile --source=dir:" + Example("quickstart"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Snapshot snapshot;
  std::string error;
  ASSERT_TRUE(SnapshotFromJson(r.out, &snapshot, &error)) << error;
  std::vector<std::string> keys;
  for (const auto& g : snapshot.groups()) {
    keys.push_back(g.key());
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"default/diag", "default/j2ee", "default/portal",
                                            "default/public"}));
  const auto& public_group = snapshot.groups(3);
  ASSERT_EQ(public_group.servers_size(), 2);
  EXPECT_EQ(public_group.servers(0).port(), 18001u);
  EXPECT_EQ(public_group.servers(0).capacity(), 2u);
  EXPECT_EQ(public_group.servers(1).capacity(), 1u);
  ASSERT_EQ(snapshot.virtual_hosts_size(), 1);
  const auto& vhost = snapshot.virtual_hosts(0);
  EXPECT_EQ(vhost.default_root_handler(), v1::KIND_JAVA);
  EXPECT_EQ(vhost.default_abap_group(), "default/diag");
  EXPECT_EQ(vhost.default_java_group(), "default/j2ee");
  ASSERT_EQ(vhost.rules_size(), 3);
  EXPECT_EQ(vhost.rules(0).prefix(), "/irj/");
  EXPECT_EQ(vhost.rules(0).group(), "default/portal");
  EXPECT_EQ(vhost.rules(1).prefix(), "/sap/");
  EXPECT_EQ(vhost.rules(1).group(), "default/diag");
  EXPECT_EQ(vhost.rules(2).prefix(), "/sap/bc/gui/");
  EXPECT_EQ(vhost.rules(2).group(), "default/public");
  EXPECT_GT(vhost.permissions_size(), 0);
}

class CliTempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("kwd_cli_in_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::string Source() const { return "--source=dir:" + dir_.string(); }

  fs::path dir_;
};

constexpr const char* kConflicting = R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: g, namespace: erp}
spec: {strategy: fastest, backend: {staticServers: []}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: ok, namespace: erp}
spec: {backend: {staticServers: [{name: s, address: 127.0.0.1, port: 1}]}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: a, namespace: erp, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {rules: [{prefix: /sap/, kind: abap, logonGroup: ok}]}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp, creationTimestamp: "2026-02-01T00:00:00Z"}
spec: {rules: [{prefix: /sap/, kind: abap, logonGroup: ok}]}
)";

TEST_F(CliTempDirTest, ValidateListsProblemsPerObject) {
  Write("x.yaml", kConflicting);
  RunResult r = RunController("validate " + Source());
  EXPECT_EQ(r.exit_code, 1);
  // One line per problem, at the field, with the condition reason.
  EXPECT_NE(r.out.find("LogonGroup erp/g: spec.strategy: \"fastest\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[InvalidStrategy]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("UrlMapping erp/erp: rule /sap/ on any host dropped: UrlMapping erp/a "
                       "(older) defines it [Conflicted]"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("ok:"), std::string::npos);
}

TEST_F(CliTempDirTest, CompileWarnsButSucceedsOnInvalidObjects) {
  Write("x.yaml", kConflicting);
  RunResult r = RunController("compile " + Source());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: LogonGroup erp/g: Accepted=False InvalidStrategy"),
            std::string::npos)
      << r.err;
  v1::Snapshot snapshot;
  std::string error;
  ASSERT_TRUE(SnapshotFromJson(r.out, &snapshot, &error)) << error;
  ASSERT_EQ(snapshot.groups_size(), 1);
  EXPECT_EQ(snapshot.groups(0).key(), "erp/ok");
}

TEST_F(CliTempDirTest, YamlSyntaxErrorExitsOneNamingFileAndLine) {
  Write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [x}\n");
  RunResult compile = RunController("compile " + Source());
  EXPECT_EQ(compile.exit_code, 1);
  EXPECT_EQ(compile.out, "");
  EXPECT_NE(compile.err.find((dir_ / "broken.yaml").string() + ":3:20: YAML syntax error"),
            std::string::npos)
      << compile.err;
  RunResult validate = RunController("validate " + Source());
  EXPECT_EQ(validate.exit_code, 1);
  EXPECT_NE(validate.out.find((dir_ / "broken.yaml").string() + ":3:"), std::string::npos)
      << validate.out;
}

// Issue 10 item 16: what a strict validate refuses, each at the line of the
// offending field with its path, exit 1; compile refuses the same.
TEST_F(CliTempDirTest, StrictValidateRefusesTyposDuplicatesAliasesAndReencryptWithoutName) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string want;  // after "file:"
  };
  const std::string head =
      "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\n"
      "metadata: {name: g}\n";
  std::vector<Case> cases = {
      {"kind", "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGrup\nmetadata: {name: g}\n",
       ":2:1: LogonGrup default/g: kind: \"LogonGrup\" is not a kind of dispatch.kwd.io/v1alpha1"},
      {"field", head + "spec:\n  backend: {staticServers: []}\n  strategee: adaptive\n",
       ":6:3: LogonGroup default/g: spec.strategee: unknown field, did you mean \"strategy\"?"},
      {"duplicate", head + "spec:\n  strategy: adaptive\n  strategy: fastest\n",
       ":6:3: LogonGroup default/g: spec.strategy: duplicate key (first at line 5)"},
      {"alias", head + "spec:\n  kind: &k abap\n  strategy: *k\n", ":5:9: YAML anchors"},
      {"reencrypt",
       head + "spec:\n  backend: {service: {name: erp}}\n  upstreamTLS:\n    mode: reencrypt\n",
       ":6:3: LogonGroup default/g: spec.upstreamTLS.serverName: "
       "required with mode reencrypt unless every server address is a host name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Write("x.yaml", c.yaml);
    RunResult validate = RunController("validate " + Source());
    EXPECT_EQ(validate.exit_code, 1) << validate.out << validate.err;
    std::string want = (dir_ / "x.yaml").string() + c.want;
    EXPECT_NE(validate.out.find(want), std::string::npos) << validate.out;
    if (c.name != "reencrypt") {
      RunResult compile = RunController("compile " + Source());
      EXPECT_EQ(compile.exit_code, 1);
      EXPECT_EQ(compile.out, "");
    }
  }
}

// Names, hosts, prefixes, patterns, health-check paths and server names are
// ASCII: non-ASCII (raw or by a YAML escape) is refused naming the field,
// and a file with a NUL, another control byte, invalid UTF-8 or a YAML tag
// is refused at its line before anything in it is read.
TEST_F(CliTempDirTest, ValidateRefusesNonAsciiFieldsAndBadBytes) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string want;  // after "file" when it starts with ':'
  };
  const std::string group = "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\n";
  const std::string backend =
      "  backend: {staticServers: [{name: s1, address: 10.0.0.1, port: 1}]}\n";
  const std::string mapping =
      "apiVersion: dispatch.kwd.io/v1alpha1\nkind: UrlMapping\nmetadata: {name: m}\nspec:\n";
  std::vector<Case> cases = {
      {"name", group + "metadata: {name: \"g\\u00e9\"}\nspec:\n" + backend,
       "metadata.name: \"g\xc3\xa9\" is not a valid object name"},
      {"health_path",
       group + "metadata: {name: g}\nspec:\n" + backend +
           "  healthCheck: {path: /sap/ping\xc3\xa9x}\n",
       "spec.healthCheck.path: must start with /"},
      {"server",
       group + "metadata: {name: g}\nspec:\n"
               "  backend: {staticServers: [{name: \"s\\xe9\", address: 10.0.0.1, "
               "port: 1}]}\n",
       "spec.backend.staticServers[0].name"},
      {"host", mapping + "  hosts: [\"h\\u00e9.example\"]\n", "spec.hosts"},
      {"prefix", mapping + "  rules: [{prefix: \"/caf\\u00e9/\", kind: abap}]\n",
       "spec.rules[0].prefix"},
      {"pattern", mapping + "  permissions: [{action: deny, pattern: \"/\\u00e9*\"}]\n",
       "spec.permissions[0].pattern"},
      {"nul", group + std::string("metadata: {name: di\0ag}\n", 24),
       ":3:20: control character 0x00"},
      {"invalid_utf8",
       group + "metadata: {name: g}\nspec:\n" + backend + "  healthCheck: {path: /sap/ping\xff}\n",
       ":6:32: invalid UTF-8"},
      {"tag",
       group + "metadata: {name: g}\nspec:\n" + backend +
           "  healthCheck: {path: !!binary L3NhcC9waW5n}\n",
       ":6:23: spec.healthCheck.path: YAML tags (!!binary) are not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Write("x.yaml", c.yaml);
    RunResult validate = RunController("validate " + Source());
    EXPECT_EQ(validate.exit_code, 1) << validate.out << validate.err;
    std::string want = c.want[0] == ':' ? (dir_ / "x.yaml").string() + c.want : c.want;
    EXPECT_NE(validate.out.find(want), std::string::npos) << validate.out;
    // Nothing of the object reaches a snapshot, cut short or whole.
    RunResult compile = RunController("compile " + Source());
    EXPECT_EQ(compile.out.find("/sap/ping"), std::string::npos) << compile.out;
    EXPECT_EQ(compile.out.find("\"s1\""), std::string::npos) << compile.out;
    EXPECT_EQ(compile.out.find("\"dig\""), std::string::npos) << compile.out;
  }
}

// yaml-cpp's node tree shares an aliased node; converting it expanded the
// "billion laughs" in this 600-byte file to hundreds of MiB.
TEST_F(CliTempDirTest, AliasBombIsRefusedQuickly) {
  std::string bomb =
      "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: g}\n"
      "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    bomb += std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 9; ++i) {
      bomb += std::string(i == 0 ? "*" : ",*") + static_cast<char>(level - 1);
    }
    bomb += "]\n";
  }
  ASSERT_LT(bomb.size(), 600u);
  Write("bomb.yaml", bomb);
  auto start = std::chrono::steady_clock::now();
  RunResult r = RunController("validate " + Source());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.out.find((dir_ / "bomb.yaml").string() + ":4:4: YAML anchors (&name) are not supported"),
      std::string::npos)
      << r.out;
}

TEST_F(CliTempDirTest, UnknownKindsAreNotProblems) {
  Write("svc.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n");
  RunResult r = RunController("validate " + Source());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "ok: 0 objects\n");
  EXPECT_NE(r.err.find("note: "), std::string::npos);
}

struct UsageCase {
  std::string name;
  std::string args;
  int want_exit;
  std::string want_out;  // substring of stdout
  std::string want_err;  // substring of stderr
};

// `validate -f FILE` (repeatable) and `-f -` (standard input): the same
// problems, named by the file (or <stdin>) and line.
TEST_F(CliTempDirTest, ValidateReadsFilesAndStandardInput) {
  Write("x.yaml", kConflicting);
  std::string file = (dir_ / "x.yaml").string();
  RunResult r = RunController("validate -f " + ShellQuote(file));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("LogonGroup erp/g: spec.strategy: "), std::string::npos) << r.out;
  r = RunController("validate -f - <" + ShellQuote(file));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("LogonGroup erp/g: spec.strategy: "), std::string::npos) << r.out;
  // Both quickstart files, one with -f and one on standard input: clean.
  std::string quickstart = Example("quickstart");
  r = RunController("validate -f " + ShellQuote(quickstart + "/logongroups.yaml") + " -f - <" +
                    ShellQuote(quickstart + "/urlmapping.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok: ", 0), 0u) << r.out;
  // A YAML syntax error on standard input names <stdin> and the line.
  Write("bad.yaml", "kind: LogonGroup\nmetadata: [\n");
  r = RunController("validate -f - <" + ShellQuote((dir_ / "bad.yaml").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("<stdin>:"), std::string::npos) << r.out << r.err;
  // A missing file is a problem naming it; -f and --source do not mix.
  r = RunController("validate -f /nonexistent/kwd.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent/kwd.yaml: cannot read"), std::string::npos) << r.out;
  r = RunController("validate -f " + ShellQuote(file) + " " + Source());
  EXPECT_EQ(r.exit_code, 2);
  // compile takes -f as well.
  r = RunController("compile -f " + ShellQuote(quickstart + "/logongroups.yaml") + " -f " +
                    ShellQuote(quickstart + "/urlmapping.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"groups\""), std::string::npos);
}

// Issue 26 item 1: golden outputs of `validate` for files with several
// mistakes each. Every problem of every object in one run, one line each,
// "file:line:column: Kind ns/name: field.path: message", in file order.
class ValidateGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidateGoldenTest, PrintsEveryProblemOnItsOwnLine) {
  const fs::path dir = fs::path(KWD_SOURCE_DIR) / "tests/controller/cli/validate_golden";
  const std::string name = GetParam();
  const std::string want = kwd::testing::ReadFileOrEmpty(dir / (name + ".want"));
  ASSERT_FALSE(want.empty()) << name;
  RunResult r = RunController("validate -f " + name + ".yaml", /*cwd=*/dir.string());
  EXPECT_EQ(r.out, want) << r.err;
  EXPECT_EQ(r.exit_code, want.starts_with("ok: ") ? 0 : 1) << r.out << r.err;
}

INSTANTIATE_TEST_SUITE_P(Files, ValidateGoldenTest,
                         ::testing::Values("several_mistakes", "wrong_types", "helm_template"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;  // the name of the golden file
                         });

// A misspelt field no longer hides a bad capacity: both in one run, with
// file:line:column, and the field's closest name.
TEST_F(CliTempDirTest, ValidateReportsAMisspeltFieldAndABadCapacityTogether) {
  Write("x.yaml",
        "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: g}\n"
        "spec:\n  strategee: adaptive\n  backend:\n    staticServers:\n"
        "      - {name: s, address: 10.0.0.1, port: 8000, capacity: -3}\n");
  RunResult r = RunController("validate " + Source());
  EXPECT_EQ(r.exit_code, 1);
  const std::string file = (dir_ / "x.yaml").string();
  EXPECT_EQ(r.out, file +
                       ":5:3: LogonGroup default/g: spec.strategee: unknown field, did you mean "
                       "\"strategy\"?\n" +
                       file +
                       ":8:50: LogonGroup default/g: spec.backend.staticServers[0].capacity: "
                       "must be an integer from 1 to 4294967295, got -3 [InvalidField]\n");
}

// helm template output: the chart's own objects are one note (a count),
// --quiet prints none; live-state conditions are notes unless --live.
TEST_F(CliTempDirTest, ValidateQuietAndLive) {
  const fs::path golden = fs::path(KWD_SOURCE_DIR) / "tests/controller/cli/validate_golden";
  RunResult r =
      RunController("validate -f - <" + ShellQuote((golden / "helm_template.yaml").string()));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err,
            "note: skipped 4 objects of kinds kwd does not read (Deployment 1, Service 2, "
            "ServiceAccount 1)\n");
  r = RunController("validate --quiet -f - <" +
                    ShellQuote((golden / "helm_template.yaml").string()));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "ok: 1 objects\n");
  EXPECT_EQ(r.err, "");

  Write("svc.yaml",
        "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: erp}\n"
        "spec:\n  backend: {service: {name: erp, port: 8000}}\n");
  r = RunController("validate " + Source());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "ok: 1 objects\n");
  EXPECT_NE(r.err.find("note: " + (dir_ / "svc.yaml").string() + ":5:"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("[NoEndpoints]"), std::string::npos) << r.err;
  r = RunController("validate --live " + Source());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find((dir_ / "svc.yaml").string() + ":5:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[NoEndpoints]"), std::string::npos) << r.out;
  r = RunController("validate --live --quiet " + Source());
  EXPECT_EQ(r.err, "");
}

TEST(CliTest, VersionCommandAndFlag) {
  for (const char* args : {"version", "--version"}) {
    RunResult r = RunController(args);
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_EQ(r.out.rfind("kwd-controller ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(" (revision "), std::string::npos) << r.out;
  }
}

// The one duration rule: a unit is required; ms, s, m and h are known.
TEST(CliTest, ServeDurationsNeedAUnit) {
  for (const char* flag : {"--hold-off", "--max-delay", "--poll-interval", "--lease-duration",
                           "--renew-deadline", "--retry-period"}) {
    RunResult r = RunController(std::string("serve --source=kube ") + flag + " 15");
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_NE(r.err.find(std::string(flag) + ": \"15\" needs a unit"), std::string::npos) << r.err;
  }
  RunResult help = RunController("serve --help");
  for (const char* flag :
       {"--source", "--kubeconfig", "--namespace", "--grpc-listen", "--grpc-tls-cert",
        "--grpc-tls-key", "--grpc-client-ca", "--admin-listen", "--admin-allowed-hosts",
        "--leader-elect", "--leader-election-namespace", "--leader-election-identity",
        "--lease-duration", "--renew-deadline", "--retry-period", "--hold-off", "--max-delay",
        "--poll-interval", "--log-level"}) {
    EXPECT_NE(help.out.find(std::string("  ") + flag), std::string::npos) << flag;
  }
}

class UsageTest : public ::testing::TestWithParam<UsageCase> {};

TEST_P(UsageTest, ExitCodeAndMessage) {
  const UsageCase& c = GetParam();
  RunResult r = RunController(c.args);
  EXPECT_EQ(r.exit_code, c.want_exit) << r.out << r.err;
  EXPECT_NE(r.out.find(c.want_out), std::string::npos) << r.out;
  EXPECT_NE(r.err.find(c.want_err), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    All, UsageTest,
    ::testing::Values(
        UsageCase{"Help", "--help", 0, "usage: kwd-controller <command>", ""},
        UsageCase{"ShortHelp", "-h", 0, "validate", ""},
        UsageCase{"CompileHelp", "compile --help", 0, "usage: kwd-controller compile", ""},
        UsageCase{"ValidateHelp", "validate -h", 0, "usage: kwd-controller validate", ""},
        UsageCase{"NoCommand", "", 2, "", "usage: kwd-controller"},
        UsageCase{"UnknownCommand", "frobnicate", 2, "", "unknown command \"frobnicate\""},
        UsageCase{"MissingSource", "compile", 2, "", "missing --source=dir:DIR or -f FILE"},
        UsageCase{"UnknownFlag", "validate --source=dir:. --frob", 2, "", "unknown flag --frob"},
        UsageCase{"BadSource", "compile --source=file:x", 2, "",
                  "--source must be dir:DIR or kube"},
        UsageCase{"KubeNotForCompile", "compile --source=kube", 2, "",
                  "only --source=dir:DIR is supported here"},
        UsageCase{"MissingDirectory", "validate --source=dir:/nonexistent/kwd", 1,
                  "not a readable directory", ""},
        UsageCase{"ServeUnknownFlag", "serve --source=dir:. --frob", 2, "", "unknown flag --frob"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kwd
