// The embedded CRD schemas and the check `kwd-controller validate` runs.
#include "controller/schema/schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kwd::schema {
namespace {

using nlohmann::json;

std::vector<std::string> Lines(const std::vector<Problem>& problems) {
  std::vector<std::string> lines;
  for (const Problem& problem : problems) {
    lines.push_back(problem.path + ": " + problem.message +
                    (problem.hint.empty() ? "" : " (" + problem.hint + ")"));
  }
  return lines;
}

TEST(SchemaTest, EveryEmbeddedCrdParses) {
  ASSERT_EQ(EmbeddedCrds().size(), 3u);
  EXPECT_EQ(Schemas::Builtin().Kinds(),
            (std::vector<std::string>{"dispatch.kwd.io/v1alpha1 LogonGroup",
                                      "dispatch.kwd.io/v1alpha1 SapSystem",
                                      "dispatch.kwd.io/v1alpha1 UrlMapping"}));
  EXPECT_EQ(Schemas::Builtin().Find("dispatch.kwd.io/v1beta1", "LogonGroup"), nullptr);
  EXPECT_EQ(Schemas::Builtin().Find("v1", "Service"), nullptr);
}

TEST(SchemaTest, ParseRefusesWhatIsNoCrd) {
  std::string error;
  const EmbeddedFile files[] = {{"x.yaml", "kind: ConfigMap\n"}};
  EXPECT_FALSE(Schemas::Parse(files, &error));
  EXPECT_EQ(error, "x.yaml: not a CustomResourceDefinition");
}

// Every problem of the object at once, not the first of them.
TEST(SchemaTest, CheckReportsEveryProblem) {
  const Node* root = Schemas::Builtin().Find("dispatch.kwd.io/v1alpha1", "LogonGroup");
  ASSERT_NE(root, nullptr);
  json object = json::parse(R"({
    "apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "LogonGroup",
    "metadata": {"name": "g", "labels": {"a": "b"}},
    "spec": {
      "strategee": "adaptive",
      "kind": "ABAP",
      "defaultCapacity": 0,
      "healthCheck": {"intervalSeconds": "5"},
      "backend": {"staticServers": [
        {"name": "s1", "address": "10.0.0.1", "port": 70000},
        {"name": "s2", "adress": "10.0.0.2", "port": 8000}
      ]}
    }
  })");
  EXPECT_EQ(Lines(Check(*root, object)),
            (std::vector<std::string>{
                "spec.backend.staticServers[0].port: 70000 is more than the maximum 65535",
                "spec.backend.staticServers[1].adress: unknown field (address)",
                "spec.backend.staticServers[1].address: required",
                "spec.defaultCapacity: 0 is less than the minimum 1",
                "spec.healthCheck.intervalSeconds: expected an integer, got a string",
                "spec.kind: \"ABAP\" is not one of abap, java (abap)",
                "spec.strategee: unknown field (strategy)",
            }));
}

TEST(SchemaTest, AValidObjectHasNoProblem) {
  const Node* root = Schemas::Builtin().Find("dispatch.kwd.io/v1alpha1", "UrlMapping");
  ASSERT_NE(root, nullptr);
  json object = json::parse(R"({
    "apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "UrlMapping",
    "metadata": {"name": "m", "namespace": "erp"},
    "spec": {"hosts": ["erp.example.com"], "rules": [{"prefix": "/sap/", "kind": "abap"}],
             "defaultGroups": {"abap": "diag"}, "defaultRootHandler": null}
  })");
  EXPECT_EQ(Lines(Check(*root, object)), std::vector<std::string>{});
}

TEST(SchemaTest, ClosestIsATypoOrNothing) {
  const std::vector<std::string> fields = {"strategy", "kind", "backend", "defaultCapacity"};
  EXPECT_EQ(Closest("strategee", fields), "strategy");
  EXPECT_EQ(Closest("Strategy", fields), "strategy");
  EXPECT_EQ(Closest("kid", fields), "kind");
  EXPECT_EQ(Closest("defaultCapcity", fields), "defaultCapacity");
  EXPECT_EQ(Closest("weight", fields), "");
  EXPECT_EQ(Closest("", fields), "");
  EXPECT_EQ(Closest("strategy", fields), "");  // itself is no hint
  EXPECT_EQ(Closest(std::string(100000, 'x'), fields), "");
}

}  // namespace
}  // namespace kwd::schema
