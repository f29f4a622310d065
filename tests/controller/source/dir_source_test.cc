#include "controller/source/dir_source.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

namespace kwd::source {
namespace {

namespace fs = std::filesystem;

class DirSourceTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("kwd_dir_source_" +
            std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& relative, const std::string& text) {
    fs::path path = dir_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

  fs::path dir_;
};

constexpr const char* kTwoGroups = R"(# two documents
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: a, namespace: erp}
spec:
  strategy: adaptive
  defaultCapacity: 3
  backend:
    staticServers:
      - {name: s1, address: 10.0.0.1, port: 8000, capacity: 6}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: b}
spec:
  backend: {service: {name: "8000", port: "8000"}}
---
)";

TEST_F(DirSourceTest, LoadsMultiDocumentFilesWithTypedScalars) {
  Write("groups.yaml", kTwoGroups);
  LoadResult result = LoadDirectory(dir_);
  ASSERT_FALSE(result.has_errors()) << result.problems[0].ToString();
  ASSERT_EQ(result.objects.logon_groups().size(), 2u);
  const auto& a = result.objects.logon_groups().at({"erp", "a"});
  EXPECT_EQ(a.spec.strategy, "adaptive");
  EXPECT_EQ(a.spec.default_capacity, 3);
  EXPECT_EQ((*a.spec.backend->static_servers)[0].port, 8000);
  // Quoted scalars stay strings: a quoted port is a port name.
  const auto& b = result.objects.logon_groups().at({"default", "b"});
  EXPECT_EQ(b.spec.backend->service->name, "8000");
  EXPECT_FALSE(b.spec.backend->service->port->is_number);
  EXPECT_EQ(result.origins.at(model::ObjectKey{"LogonGroup", "erp", "a"}),
            (dir_ / "groups.yaml").string() + ":2");
}

TEST_F(DirSourceTest, SyntaxErrorNamesFileAndLine) {
  Write("ok.yaml", kTwoGroups);
  Write("bad.yml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n  namespace: x\n");
  LoadResult result = LoadDirectory(dir_);
  ASSERT_TRUE(result.has_errors());
  ASSERT_EQ(result.problems.size(), 1u);
  std::string text = result.problems[0].ToString();
  std::string prefix = (dir_ / "bad.yml").string() + ":";
  EXPECT_EQ(text.rfind(prefix, 0), 0u) << text;
  EXPECT_NE(text.find("YAML syntax error"), std::string::npos) << text;
  EXPECT_GT(result.problems[0].line, 0);
  EXPECT_EQ(result.objects.size(), 2u);  // the good file still loads
}

// Found by the object_yaml fuzz target: on this file yaml-cpp 0.7 reports
// document after document without reading on; collecting them took
// gigabytes. A document must start past the last one.
TEST_F(DirSourceTest, AParserThatMakesNoProgressIsASyntaxError) {
  const std::string text = "# The quickstaa:\012  name: erp\012, capacity: 0}\012    iVersion: dispatcj.kwd.io/v1alpha1\012kind: UrlMapping\012metadata: {name: m,ace\177 default\012spec:\012  sid: QST\012  messageServer: {host: 126.0.0.1, httpPort: 18101}\012  refreshIntervalSeconds: 5\012";
  LoadResult result;
  LoadYamlText(text, "fuzzed.yaml", &result);
  ASSERT_TRUE(result.has_errors());
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_NE(result.problems[0].ToString().find("YAML syntax error: the parser makes no progress"),
            std::string::npos)
      << result.problems[0].ToString();
}

TEST_F(DirSourceTest, UnknownKindsAreSkippedWithANote) {
  Write("mixed.yaml", R"(apiVersion: v1
kind: Service
metadata: {name: erp-abap}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: erp, annotations: {dispatch.kwd.io/capacity: "6"}}
)");
  LoadResult result = LoadDirectory(dir_);
  EXPECT_FALSE(result.has_errors());
  ASSERT_EQ(result.problems.size(), 2u);
  EXPECT_FALSE(result.problems[0].is_error());
  EXPECT_EQ(result.problems[0].line, 1);
  EXPECT_NE(result.problems[0].message.find("skipping Service default/erp-abap"),
            std::string::npos);
  EXPECT_EQ(result.problems[1].line, 5);
  EXPECT_EQ(result.objects.size(), 1u);
  EXPECT_EQ(
      result.objects.pods().at({"erp", "p"}).metadata.annotations.at("dispatch.kwd.io/capacity"),
      "6");
}

TEST_F(DirSourceTest, ShapeErrorsAndDuplicatesAreErrorsWithLines) {
  Write("a.yaml", R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: m}
spec:
  rules: {prefix: /sap/}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: g}
---
- not a mapping
)");
  Write("b.yaml", R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: g}
)");
  LoadResult result = LoadDirectory(dir_);
  ASSERT_EQ(result.problems.size(), 3u);
  std::string a = (dir_ / "a.yaml").string();
  std::string b = (dir_ / "b.yaml").string();
  // The line of the offending field, not of the document.
  EXPECT_EQ(result.problems[0].ToString(),
            a + ":5:3: UrlMapping default/m: spec.rules: expected a list, got an object");
  EXPECT_EQ(result.problems[1].ToString(), a + ":11:1: a document must be a mapping (an object)");
  EXPECT_EQ(result.problems[2].ToString(),
            b + ":1:1: LogonGroup default/g is defined twice (first at " + a + ":7)");
}

TEST_F(DirSourceTest, StrictErrorsNameTheLineAndPathOfTheField) {
  Write("a.yaml", R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGrup
metadata: {name: typo}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata:
  name: g
spec:
  strategee: adaptive
  backend:
    staticServers:
      - name: s1
        address: 10.0.0.1
        port: 8000
        weight: 3
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: m}
spec:
  hosts: [a.example]
  hosts: [b.example]
---
apiVersion: dispatch.kwd.io/v1beta1
kind: UrlMapping
metadata: {name: v}
)");
  LoadResult result = LoadDirectory(dir_);
  std::string a = (dir_ / "a.yaml").string();
  std::vector<std::string> got;
  for (const auto& problem : result.problems) {
    EXPECT_TRUE(problem.is_error()) << problem.ToString();
    got.push_back(problem.ToString());
  }
  EXPECT_EQ(got,
            (std::vector<std::string>{
                a + ":2:1: LogonGrup default/typo: kind: \"LogonGrup\" is not a kind of "
                    "dispatch.kwd.io/v1alpha1 (LogonGroup, UrlMapping, SapSystem)",
                a + ":10:3: LogonGroup default/g: spec.strategee: unknown field",
                a + ":16:9: LogonGroup default/g: spec.backend.staticServers[0].weight: "
                    "unknown field",
                a + ":23:3: UrlMapping default/m: spec.hosts: duplicate key (first at line 22)",
                a + ":25:1: UrlMapping default/v: apiVersion: \"dispatch.kwd.io/v1beta1\" is "
                    "not served; use dispatch.kwd.io/v1alpha1",
            }));
  EXPECT_EQ(result.objects.size(), 0u);
}

// Issue 11: serverName, caBundle and clientCertSecret are fields now; the
// old caSecret (replaced by caBundle) is still an unknown field.
TEST_F(DirSourceTest, UpstreamTlsFieldsAreReadAndCaSecretIsUnknown) {
  Write("a.yaml", R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: g}
spec:
  backend: {service: {name: erp}}
  upstreamTLS: {mode: reencrypt, serverName: erp.example, caBundle: Zm9v,
                clientCertSecret: erp-client, caSecret: ca}
)");
  LoadResult result = LoadDirectory(dir_);
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_EQ(result.problems[0].line, 7);
  EXPECT_NE(result.problems[0].message.find("spec.upstreamTLS.caSecret: unknown field"),
            std::string::npos);
}

TEST_F(DirSourceTest, AliasBombIsRefusedAtOnce) {
  // 9 levels of 9 aliases: expanding it makes 9^9 (387 million) strings.
  std::string bomb =
      "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    char previous = static_cast<char>(level - 1);
    bomb += std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 9; ++i) {
      bomb += std::string(i == 0 ? "" : ",") + "*" + previous;
    }
    bomb += "]\n";
  }
  bomb = "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: g}\n" + bomb;
  ASSERT_LT(bomb.size(), 700u);
  Write("bomb.yaml", bomb);
  auto start = std::chrono::steady_clock::now();
  LoadResult result = LoadDirectory(dir_);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_TRUE(result.problems[0].is_error());
  EXPECT_EQ(result.problems[0].line, 4);
  EXPECT_NE(result.problems[0].message.find("anchors"), std::string::npos)
      << result.problems[0].message;
}

TEST_F(DirSourceTest, AliasesAreRefusedEvenWhenSmall) {
  Write("a.yaml", R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: m}
spec:
  hosts: [a.example]
  defaultGroups: {abap: x}
  rules:
  - {prefix: /sap/, logonGroup: *grp}
)");
  LoadResult result = LoadDirectory(dir_);
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_TRUE(result.problems[0].is_error());
  EXPECT_EQ(result.problems[0].line, 8);
}

TEST_F(DirSourceTest, RecursiveSortedAndOnlyYaml) {
  Write("z/deep/one.yml", "apiVersion: v1\nkind: Pod\nmetadata: {name: z}\n");
  Write("a.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n");
  Write("notes.txt", "not: [yaml\n");
  Write("README.md", "# hi\n");
  LoadResult result = LoadDirectory(dir_);
  EXPECT_TRUE(result.problems.empty());
  EXPECT_EQ(result.objects.pods().size(), 2u);
}

TEST_F(DirSourceTest, MissingDirectoryIsAnError) {
  LoadResult result = LoadDirectory(dir_ / "nope");
  ASSERT_TRUE(result.has_errors());
  EXPECT_NE(result.problems[0].ToString().find("not a readable directory"), std::string::npos);
}

TEST(YamlScalarsTest, CoreSchemaTypes) {
  LoadResult result;
  LoadYamlText(R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: g, generation: 12}
spec:
  defaultCapacity: "3"
)",
               "mem.yaml", &result);
  // A quoted number is a string, which the decoder rejects as a shape error.
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_EQ(result.problems[0].ToString(),
            "mem.yaml:5:3: LogonGroup default/g: spec.defaultCapacity: expected an integer, got a "
            "string");

  LoadResult ok;
  LoadYamlText(R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: g, generation: 12}
spec:
  sessionAffinity: {affinityCookie: {enabled: false, name: null}}
  upstreamTLS: {mode: ~}
)",
               "mem.yaml", &ok);
  ASSERT_TRUE(ok.problems.empty()) << ok.problems[0].ToString();
  const auto& g = ok.objects.logon_groups().at({"default", "g"});
  EXPECT_EQ(g.metadata.generation, 12);
  EXPECT_EQ(g.spec.session_affinity.affinity_cookie.enabled, false);
  EXPECT_FALSE(g.spec.session_affinity.affinity_cookie.name.has_value());
  EXPECT_FALSE(g.spec.upstream_tls.mode.has_value());
}

// Plain scalars are typed without std::regex (whose matcher recurses once
// per character: a 50,000-digit number overflowed the stack) and without
// std::stod (which throws on "1e999"): both killed validate and serve. Such
// numbers are strings, which the decoder rejects with the field's line.
TEST(YamlScalarsTest, HugeAndOutOfRangeNumbersAreErrorsNotCrashes) {
  const std::string digits(200000, '7');
  for (const std::string& value :
       {digits, "-" + digits, digits + ".5", "1." + digits + "e3", std::string("1e999"),
        std::string("-1e999"), std::string("1e-999")}) {
    SCOPED_TRACE(value.substr(0, 20));
    LoadResult result;
    LoadYamlText(
        "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: "
        "g}\nspec:\n  defaultCapacity: " +
            value + "\n",
        "mem.yaml", &result);
    ASSERT_EQ(result.problems.size(), 1u);
    EXPECT_TRUE(result.problems[0].is_error());
    EXPECT_EQ(result.problems[0].line, 5);
    EXPECT_NE(result.problems[0].message.find("spec.defaultCapacity"), std::string::npos)
        << result.problems[0].message;
  }
  // Ordinary numbers keep their types.
  LoadResult ok;
  LoadYamlText(
      "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: g, generation: "
      "+12}\nspec:\n  defaultCapacity: 3\n",
      "mem.yaml", &ok);
  ASSERT_TRUE(ok.problems.empty()) << ok.problems[0].ToString();
  EXPECT_EQ(ok.objects.logon_groups().at({"default", "g"}).metadata.generation, 12);
}

// yaml-cpp drops a raw NUL ("di\0ag" was read as the name "dig") and passes
// other control bytes and invalid UTF-8 on: the file's bytes are refused at
// the line of the first bad one, before parsing.
TEST_F(DirSourceTest, ControlBytesAndInvalidUtf8AreRefusedWithTheirLine) {
  const std::string head = "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\n";
  const struct {
    std::string name;
    std::string body;
    std::string message;
  } cases[] = {
      {"nul", std::string("metadata: {name: di\0ag}\n", 24), "control character 0x00"},
      {"escape", "metadata: {name: a}\nspec: {strategy: \x1b[2J}\n", "control character 0x1b"},
      {"bad_utf8", "metadata: {name: a}\nspec: {strategy: \xff}\n", "invalid UTF-8"},
      {"overlong", "metadata: {name: a}\nspec: {strategy: \xc0\xaf}\n", "invalid UTF-8"},
      {"truncated", "metadata: {name: a}\nspec: {strategy: \xe2\x82}\n", "invalid UTF-8"},
  };
  for (const auto& c : cases) {
    LoadResult result;
    LoadYamlText(head + c.body, c.name + ".yaml", &result);
    ASSERT_EQ(result.problems.size(), 1u) << c.name;
    EXPECT_TRUE(result.problems[0].is_error()) << c.name;
    EXPECT_EQ(result.problems[0].line, c.name == "nul" ? 3 : 4) << c.name;
    EXPECT_NE(result.problems[0].message.find(c.message), std::string::npos)
        << c.name << ": " << result.problems[0].message;
    EXPECT_TRUE(result.objects.logon_groups().empty()) << c.name;
  }
  // TAB, CR and valid UTF-8 (in a comment) stay allowed.
  LoadResult fine;
  LoadYamlText(head + "# caf\xc3\xa9 \xe2\x82\xac\r\nmetadata:\t{name: a}\r\n", "fine.yaml", &fine);
  EXPECT_TRUE(fine.problems.empty()) << fine.problems[0].ToString();
  EXPECT_EQ(fine.objects.logon_groups().size(), 1u);
}

// Our objects never need a tag; "!!binary" and the like were ignored, so a
// tag is refused like an alias, with its line and field.
TEST_F(DirSourceTest, TagsAreRefusedWithLineAndField) {
  const std::string head =
      "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: a}\n";
  const struct {
    std::string name;
    std::string body;
    int line;
    std::string message;
  } cases[] = {
      {"binary", "spec:\n  strategy: !!binary YWRhcHRpdmU=\n", 5,
       "spec.strategy: YAML tags (!!binary)"},
      {"custom", "spec:\n  strategy: !custom adaptive\n", 5, "spec.strategy: YAML tags (!custom)"},
      {"str", "spec: {defaultCapacity: !!str 3}\n", 4, "spec.defaultCapacity: YAML tags (!!str)"},
      {"map", "spec: !!map\n  strategy: adaptive\n", 4, "spec: YAML tags (!!map)"},
      {"seq", "spec:\n  hosts: !!seq [a]\n", 5, "spec.hosts: YAML tags (!!seq)"},
      {"null", "spec:\n  strategy: !!null\n", 5, "spec.strategy: YAML tags (!!null)"},
      {"key", "spec:\n  !!str strategy: adaptive\n", 5, "spec.strategy: YAML tags (!!str)"},
      {"item", "spec:\n  hosts: [a, !x b]\n", 5, "spec.hosts[1]: YAML tags (!x)"},
  };
  for (const auto& c : cases) {
    LoadResult result;
    LoadYamlText(head + c.body, c.name + ".yaml", &result);
    ASSERT_EQ(result.problems.size(), 1u) << c.name;
    EXPECT_TRUE(result.problems[0].is_error()) << c.name;
    EXPECT_EQ(result.problems[0].line, c.line) << c.name;
    EXPECT_NE(result.problems[0].message.find(c.message), std::string::npos)
        << c.name << ": " << result.problems[0].message;
  }
}

}  // namespace
}  // namespace kwd::source
