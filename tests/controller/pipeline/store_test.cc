#include "controller/pipeline/store.h"

#include <gtest/gtest.h>

#include "controller/pipeline/kube_source.h"

namespace kwd::pipeline {
namespace {

using nlohmann::json;

ObservedObject Decode(const json& object, json status = nullptr) {
  auto decoded = model::DecodeObject(object);
  EXPECT_TRUE(decoded.ok()) << decoded.error;
  return ObservedObject{std::move(*decoded.object), std::move(status)};
}

json Group(const std::string& name, const std::string& service, int generation = 1) {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", generation}}},
          {"spec", {{"backend", {{"service", {{"name", service}, {"port", 8000}}}}}}}};
}

json Slice(const std::string& name, const std::string& service, const std::string& pod,
           bool ready = true) {
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata",
           {{"name", name},
            {"namespace", "erp"},
            {"resourceVersion", "1"},
            {"labels", {{"kubernetes.io/service-name", service}}}}},
          {"addressType", "IPv4"},
          {"endpoints",
           {{{"addresses", {"10.0.0.1"}},
             {"conditions", {{"ready", ready}}},
             {"targetRef", {{"kind", "Pod"}, {"name", pod}}}}}},
          {"ports", {{{"port", 8000}}}}};
}

json Pod(const std::string& name, json annotations, json labels = json::object(),
         const std::string& resource_version = "1") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "erp"},
            {"resourceVersion", resource_version},
            {"labels", labels},
            {"annotations", annotations}}}};
}

json TlsSecret(const std::string& name, const std::string& crt = "Y2VydA==") {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", name},
            {"namespace", "erp"},
            {"annotations", {{"kubectl.kubernetes.io/last-applied-configuration", "{...}"}}}}},
          {"type", "kubernetes.io/tls"},
          {"data", {{"tls.crt", crt}, {"tls.key", "a2V5"}}}};
}

json Mapping(std::vector<std::string> secrets) {
  json tls = json::array();
  for (const auto& secret : secrets) {
    tls.push_back({{"hosts", {"a.example"}}, {"secretName", secret}});
  }
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "UrlMapping"},
          {"metadata", {{"name", "m"}, {"namespace", "erp"}, {"generation", 1}}},
          {"spec", {{"hosts", {"a.example"}}, {"tls", tls}}}};
}

// Secrets are kept only while a UrlMapping names them.
TEST(ObjectStoreTest, SecretsAreKeptOnlyWhileAMappingNamesThem) {
  ObjectStore store;
  // Named by nobody: dropped on arrival, no rebuild.
  EXPECT_FALSE(store.Upsert(Decode(TlsSecret("a-tls"))));
  EXPECT_EQ(store.CountOf(model::kSecretKind), 0u);
  // A mapping names it: it is wanted (the source fetches it), once.
  EXPECT_TRUE(store.Upsert(Decode(Mapping({"a-tls"}))));
  EXPECT_EQ(store.TakeWantedSecrets(),
            (std::vector<model::ObjectKey>{{"Secret", "erp", "a-tls"}}));
  EXPECT_TRUE(store.TakeWantedSecrets().empty());
  EXPECT_TRUE(store.Upsert(Decode(TlsSecret("a-tls"))));
  EXPECT_EQ(store.CountOf(model::kSecretKind), 1u);
  // Kept without what the compile does not read.
  auto kept = store.objects().secrets().at({"erp", "a-tls"});
  EXPECT_TRUE(kept.metadata.annotations.empty());
  EXPECT_EQ(kept.tls_crt, "cert");
  EXPECT_EQ(kept.tls_key, "key");
  EXPECT_FALSE(store.Upsert(Decode(TlsSecret("a-tls"))));  // unchanged
  EXPECT_TRUE(store.Upsert(Decode(TlsSecret("a-tls", "Y2VydDI="))));
  // The mapping edited but still naming it: kept (no drop and refetch).
  EXPECT_TRUE(store.Upsert(Decode(Mapping({"a-tls", "b-tls"}))));
  EXPECT_EQ(store.CountOf(model::kSecretKind), 1u);
  EXPECT_EQ(store.TakeWantedSecrets(),
            (std::vector<model::ObjectKey>{{"Secret", "erp", "b-tls"}}));
  // No longer named: forgotten.
  EXPECT_TRUE(store.Upsert(Decode(Mapping({"b-tls"}))));
  EXPECT_EQ(store.CountOf(model::kSecretKind), 0u);
  EXPECT_TRUE(store.Remove({"UrlMapping", "erp", "m"}));
  EXPECT_FALSE(store.Upsert(Decode(TlsSecret("b-tls"))));
  EXPECT_EQ(store.CountOf(model::kSecretKind), 0u);
}

TEST(ObjectStoreTest, LogonGroupChangesAreRelevantAndEqualWritesAreNot) {
  ObjectStore store;
  EXPECT_TRUE(store.Upsert(Decode(Group("g", "svc"))));
  EXPECT_FALSE(store.Upsert(Decode(Group("g", "svc"))));
  EXPECT_TRUE(store.Upsert(Decode(Group("g", "svc2", 2))));
  EXPECT_EQ(store.CountOf(model::kLogonGroupKind), 1u);
  EXPECT_TRUE(store.Remove({"LogonGroup", "erp", "g"}));
  EXPECT_FALSE(store.Remove({"LogonGroup", "erp", "g"}));
}

TEST(ObjectStoreTest, StatusOnlyChangeIsRecordedButNotRelevant) {
  ObjectStore store;
  ASSERT_TRUE(store.Upsert(Decode(Group("g", "svc"))));
  json status = {{"observedGeneration", 1}};
  json with_rv = Group("g", "svc");
  with_rv["metadata"]["resourceVersion"] = "77";
  EXPECT_FALSE(store.Upsert(Decode(with_rv, status)));
  const json* observed = store.ObservedStatus({"LogonGroup", "erp", "g"});
  ASSERT_NE(observed, nullptr);
  EXPECT_EQ(*observed, status);
}

TEST(ObjectStoreTest, SliceIsRelevantOnlyWhenALogonGroupNamesItsService) {
  ObjectStore store;
  EXPECT_FALSE(store.Upsert(Decode(Slice("other-1", "other", "p1"))));
  EXPECT_FALSE(store.Upsert(Decode(Slice("other-1", "other", "p1", false))));
  EXPECT_TRUE(store.Upsert(Decode(Group("g", "svc"))));
  EXPECT_TRUE(store.Upsert(Decode(Slice("svc-1", "svc", "p2"))));
  EXPECT_TRUE(store.Upsert(Decode(Slice("svc-1", "svc", "p2", false))));
  EXPECT_FALSE(store.Upsert(Decode(Slice("other-1", "other", "p1"))));
  EXPECT_EQ(store.CountOf(model::kEndpointSliceKind), 2u);
  EXPECT_TRUE(store.Remove({"EndpointSlice", "erp", "svc-1"}));
  EXPECT_FALSE(store.Remove({"EndpointSlice", "erp", "other-1"}));
}

TEST(ObjectStoreTest, PodIsRelevantOnlyWhenReferencedAndOnlyForItsAnnotations) {
  ObjectStore store;
  ASSERT_TRUE(store.Upsert(Decode(Group("g", "svc"))));
  EXPECT_FALSE(store.Upsert(Decode(Pod("p2", {{"dispatch.kwd.io/capacity", "3"}}))));
  ASSERT_TRUE(store.Upsert(Decode(Slice("svc-1", "svc", "p2"))));
  // Labels, other annotations and the resourceVersion are not compile inputs.
  EXPECT_FALSE(store.Upsert(
      Decode(Pod("p2", {{"dispatch.kwd.io/capacity", "3"}, {"x", "y"}}, {{"app", "erp"}}, "9"))));
  EXPECT_TRUE(store.Upsert(Decode(Pod("p2", {{"dispatch.kwd.io/capacity", "4"}}))));
  EXPECT_TRUE(store.Upsert(Decode(Pod("p2", {{"dispatch.kwd.io/capacity", "4"},
                                             {"dispatch.kwd.io/instance-name", "erp1_ERP_00"}}))));
  // The drain annotation is a compile input too (kubectl annotate ... drain=true).
  EXPECT_TRUE(store.Upsert(Decode(Pod("p2", {{"dispatch.kwd.io/capacity", "4"},
                                             {"dispatch.kwd.io/instance-name", "erp1_ERP_00"},
                                             {"dispatch.kwd.io/drain", "true"}}))));
  EXPECT_FALSE(store.Upsert(Decode(Pod("unreferenced", {{"dispatch.kwd.io/capacity", "4"}}))));
  const auto& pods = store.objects().pods();
  auto it = pods.find({"erp", "p2"});
  ASSERT_NE(it, pods.end());
  EXPECT_EQ(it->second.metadata.annotations.size(), 3u);
  EXPECT_EQ(it->second.metadata.annotations.at("dispatch.kwd.io/drain"), "true");
  EXPECT_TRUE(it->second.metadata.labels.empty());
}

TEST(ObjectStoreTest, ReplaceRemovesWhatIsMissingWithinItsScope) {
  ObjectStore store;
  ASSERT_TRUE(store.Upsert(Decode(Group("a", "svc"))));
  ASSERT_TRUE(store.Upsert(Decode(Group("b", "svc"))));
  json other_ns = Group("c", "svc");
  other_ns["metadata"]["namespace"] = "hr";
  ASSERT_TRUE(store.Upsert(Decode(other_ns)));

  std::vector<ObservedObject> same;
  same.push_back(Decode(Group("a", "svc")));
  same.push_back(Decode(Group("b", "svc")));
  EXPECT_FALSE(store.Replace(model::kLogonGroupKind, "erp", std::move(same)));

  std::vector<ObservedObject> only_a;
  only_a.push_back(Decode(Group("a", "svc")));
  EXPECT_TRUE(store.Replace(model::kLogonGroupKind, "erp", std::move(only_a)));
  EXPECT_EQ(store.CountOf(model::kLogonGroupKind), 2u);  // a, and c in another namespace
  EXPECT_TRUE(store.objects().Find({"LogonGroup", "hr", "c"}).has_value());

  EXPECT_TRUE(store.Replace(model::kLogonGroupKind, "", {}));
  EXPECT_EQ(store.CountOf(model::kLogonGroupKind), 0u);
}

TEST(ObjectStoreTest, RemovingTheLastReferenceMakesSlicesIrrelevant) {
  ObjectStore store;
  ASSERT_TRUE(store.Upsert(Decode(Group("a", "svc"))));
  ASSERT_TRUE(store.Upsert(Decode(Group("b", "svc"))));
  ASSERT_TRUE(store.Upsert(Decode(Slice("svc-1", "svc", "p"))));
  ASSERT_TRUE(store.Remove({"LogonGroup", "erp", "a"}));
  EXPECT_TRUE(store.Upsert(Decode(Slice("svc-1", "svc", "p", false))));  // b still names it
  ASSERT_TRUE(store.Remove({"LogonGroup", "erp", "b"}));
  EXPECT_FALSE(store.Upsert(Decode(Slice("svc-1", "svc", "p", true))));
}

// The store reports every write to its CompileMemo: after upserts, removals
// and relists (relevant or not), its compile equals a compile from scratch.
TEST(ObjectStoreTest, CompileAfterEveryKindOfWriteEqualsAFreshCompile) {
  ObjectStore store;
  auto expect_fresh = [&](const std::string& step) {
    compile::CompileResult memoized = store.Compile();
    compile::CompileResult fresh = compile::Compile(store.objects());
    EXPECT_EQ(memoized.snapshot.SerializeAsString(), fresh.snapshot.SerializeAsString()) << step;
    EXPECT_EQ(memoized.statuses, fresh.statuses) << step;
    return memoized;
  };
  store.Upsert(Decode(Group("g1", "svc1")));
  store.Upsert(Decode(Group("g2", "svc2")));
  store.Upsert(Decode(Slice("svc1-a", "svc1", "p1")));
  store.Upsert(Decode(Slice("unused-a", "unused", "p2")));  // irrelevant: no group uses it
  expect_fresh("initial");
  store.Upsert(Decode(Pod("p1", {{"dispatch.kwd.io/capacity", "7"}})));
  EXPECT_EQ(expect_fresh("pod").snapshot.groups(0).servers(0).capacity(), 7u);
  // The slice nobody used changes (not relevant), then g2 starts using it.
  store.Upsert(Decode(Slice("unused-a", "unused", "p2", false)));
  store.Upsert(Decode(Group("g2", "unused")));
  expect_fresh("group switches to a service whose slice changed unseen");
  // A relist that drops svc1-a and brings svc2-a.
  std::vector<ObservedObject> slices;
  slices.push_back(Decode(Slice("unused-a", "unused", "p2", false)));
  slices.push_back(Decode(Slice("svc2-a", "svc2", "p3")));
  store.Replace(model::kEndpointSliceKind, "", std::move(slices));
  EXPECT_EQ(expect_fresh("relist").snapshot.groups(0).servers_size(), 0);
  store.Remove({"Pod", "erp", "p1"});
  store.Remove({"LogonGroup", "erp", "g2"});
  expect_fresh("removals");
  EXPECT_GT(store.memo().groups_reused(), 0u);
}

// The store keeps each object's last accepted version for the compile: an
// invalid edit keeps serving the previous one, with the memo as without.
TEST(ObjectStoreTest, RememberAcceptedKeepsTheLastGoodVersion) {
  ObjectStore store;
  store.Upsert(Decode(Group("g1", "svc1")));
  store.Upsert(Decode(Slice("svc1-a", "svc1", "p1")));
  compile::CompileResult first = store.Compile();
  store.RememberAccepted(first);
  ASSERT_EQ(store.last_good().logon_groups.size(), 1u);
  json bad = Group("g1", "svc1", 2);
  bad["spec"]["strategy"] = "fastest_first";
  store.Upsert(Decode(bad));
  store.Upsert(Decode(Slice("svc1-a", "svc1", "p9")));
  compile::CompileResult kept = store.Compile();
  ASSERT_EQ(kept.snapshot.groups_size(), 1);
  EXPECT_EQ(kept.snapshot.groups(0).servers(0).pod(), "erp/p9");
  EXPECT_TRUE(kept.statuses[0].serving_last_good);
  compile::CompileResult fresh = compile::Compile(store.objects(), &store.last_good());
  EXPECT_EQ(kept.snapshot.SerializeAsString(), fresh.snapshot.SerializeAsString());
  store.RememberAccepted(kept);
  EXPECT_EQ(store.last_good().logon_groups.at({"erp", "g1"}).metadata.generation, 1);
  store.Remove({"LogonGroup", "erp", "g1"});
  store.RememberAccepted(store.Compile());
  EXPECT_TRUE(store.last_good().logon_groups.empty());
}

// From the API server, a LogonGroup with a field this controller does not
// know, or a spec it cannot read, is an object the compiler rejects (so its
// last good version stays), not a dropped one.
TEST(DecodeObservedTest, UnreadableCustomResourcesBecomeRejectedObjects) {
  json unknown = Group("g1", "svc1");
  unknown["spec"]["strategee"] = "adaptive";
  unknown["metadata"]["managedFields"] = json::array();
  std::string error;
  auto observed = DecodeObserved("LogonGroup", unknown, &error);
  ASSERT_TRUE(observed) << error;
  EXPECT_EQ(std::get<model::LogonGroup>(observed->object).field_errors,
            std::vector<std::string>{"spec.strategee: unknown field"});

  json shape = Group("g1", "svc1", 3);
  shape["spec"]["backend"] = "svc1";
  observed = DecodeObserved("LogonGroup", shape, &error);
  ASSERT_TRUE(observed) << error;
  const auto& group = std::get<model::LogonGroup>(observed->object);
  EXPECT_EQ(group.metadata.generation, 3);
  EXPECT_EQ(group.field_errors,
            std::vector<std::string>{"spec.backend: expected an object, got a string"});
  ObjectStore store;
  store.Upsert(std::move(*observed));
  compile::CompileResult result = store.Compile();
  EXPECT_EQ(result.statuses[0].Find(compile::kAccepted)->reason, compile::kReasonInvalidField);

  // Without metadata it stays undecodable.
  EXPECT_FALSE(DecodeObserved("LogonGroup", json{{"spec", json::object()}}, &error));
}

}  // namespace
}  // namespace kwd::pipeline
