// The compile step with SapSystems: LogonGroup.spec.backend.sapSystem takes
// its servers from the poller's SapServerList (a plain compile input), the
// SapSystem gets Accepted/Refreshed, and the memo recompiles only the groups
// a list change touches.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/snapshot_io.h"
#include "controller/compile/compile.h"
#include "controller/pipeline/store.h"

namespace kwd::compile {
namespace {

using nlohmann::json;

model::Object Decode(const json& object) {
  model::DecodeResult decoded = model::DecodeObject(object);
  EXPECT_TRUE(decoded.ok()) << decoded.error;
  EXPECT_TRUE(decoded.unknown_fields.empty());
  return *decoded.object;
}

json Group(const std::string& name, const std::string& kind, json sap, json extra = {}) {
  json spec = {{"kind", kind}, {"defaultCapacity", 5}, {"backend", {{"sapSystem", sap}}}};
  if (extra.is_object()) {
    spec.update(extra);
  }
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", 1}}},
          {"spec", spec}};
}

json System(const std::string& name, json spec = {}) {
  json s = {{"sid", "ERP"}, {"messageServer", {{"host", "erp-ms"}, {"httpPort", 8101}}}};
  if (spec.is_object()) {
    s.update(spec);
  }
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "SapSystem"},
          {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", 2}}},
          {"spec", s}};
}

model::SapInstance Instance(std::string name, std::string address, std::uint32_t http,
                            std::uint32_t https, std::uint32_t capacity, bool abap, bool java) {
  model::SapInstance i;
  i.name = std::move(name);
  i.host = i.name;
  i.address = std::move(address);
  i.http_port = http;
  i.https_port = https;
  i.capacity = capacity;
  i.abap = abap;
  i.java = java;
  return i;
}

model::SapServerList List(const std::string& name) {
  model::SapServerList list;
  list.metadata.namespace_ = "erp";
  list.metadata.name = name;
  list.has_list = true;
  list.refreshed = true;
  list.reason = "Refreshed";
  list.message = "4 instances from http://erp-ms:8101/msgserver/text/logon?version=1.2";
  list.instances = {Instance("a_ERP_00", "10.0.0.1", 8000, 44300, 3, true, false),
                    Instance("b_ERP_01", "10.0.0.2", 8001, 0, 0, true, false),
                    Instance("j_ERP_02", "10.0.0.3", 50000, 50001, 2, false, true),
                    Instance("n_ERP_03", "10.0.0.4", 0, 0, 9, true, false)};
  list.has_groups = true;
  list.logon_groups = {{"PUBLIC", {"b_ERP_01", "gone_ERP_07"}}, {"SPACE", {"a_ERP_00"}}};
  return list;
}

// "name@address:port/capacity" of each server of erp/<group>, or "absent".
std::string Servers(const CompileResult& result, const std::string& group) {
  int index = FindSortedGroup(result.snapshot, "erp/" + group);
  if (index < 0) {
    return "absent";
  }
  std::string out;
  for (const auto& s : result.snapshot.groups(index).servers()) {
    out += (out.empty() ? "" : ",") + s.name() + "@" + s.address() + ":" +
           std::to_string(s.port()) + "/" + std::to_string(s.capacity());
  }
  return out;
}

const Condition* Find(const CompileResult& result, std::string_view kind, const std::string& name,
                      std::string_view type) {
  for (const ObjectStatus& status : result.statuses) {
    if (status.kind == kind && status.name == name) {
      return status.Find(type);
    }
  }
  return nullptr;
}

const ObjectStatus* StatusOf(const CompileResult& result, std::string_view kind,
                             const std::string& name) {
  for (const ObjectStatus& status : result.statuses) {
    if (status.kind == kind && status.name == name) {
      return &status;
    }
  }
  return nullptr;
}

TEST(CompileSapSystemTest, InternalGroupsAndLogonGroups) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp")));
  objects.Upsert(List("erp"));
  objects.Upsert(Decode(Group("diag", "abap", {{"name", "erp"}})));
  objects.Upsert(Decode(Group("j2ee", "java", {{"name", "erp"}})));
  objects.Upsert(Decode(Group("public", "abap", {{"name", "erp"}, {"logonGroup", "PUBLIC"}})));
  objects.Upsert(Decode(Group("nosuch", "abap", {{"name", "erp"}, {"logonGroup", "WEBGUI"}})));
  objects.Upsert(Decode(Group("nosys", "abap", {{"name", "other"}})));
  CompileResult result = Compile(objects);
  EXPECT_TRUE(CheckSnapshot(result.snapshot).empty());
  // !DIAG: the ABAP instances with an HTTP port; no LB= means defaultCapacity.
  EXPECT_EQ(Servers(result, "diag"), "a_ERP_00@10.0.0.1:8000/3,b_ERP_01@10.0.0.2:8001/5");
  EXPECT_EQ(Servers(result, "j2ee"), "j_ERP_02@10.0.0.3:50000/2");
  // SMLG members that are in the live list.
  EXPECT_EQ(Servers(result, "public"), "b_ERP_01@10.0.0.2:8001/5");
  const Condition* resolved = Find(result, "LogonGroup", "diag", kResolvedRefs);
  ASSERT_NE(resolved, nullptr);
  EXPECT_EQ(resolved->status, "True");
  EXPECT_EQ(resolved->message, "SapSystem erp/erp: 2 of 4 instances");
  const Condition* accepted = Find(result, "LogonGroup", "diag", kAccepted);
  EXPECT_NE(accepted->message.find("1 instance without an HTTP port left out"), std::string::npos)
      << accepted->message;

  const Condition* unknown = Find(result, "LogonGroup", "nosuch", kResolvedRefs);
  EXPECT_EQ(unknown->status, "False");
  EXPECT_EQ(unknown->reason, "LogonGroupNotFound");
  EXPECT_EQ(unknown->message,
            "logon group \"WEBGUI\" not in SapSystem erp/erp (groups: PUBLIC, SPACE)");
  EXPECT_EQ(Servers(result, "nosuch"), "");  // accepted, no servers: 503

  const Condition* nosys = Find(result, "LogonGroup", "nosys", kResolvedRefs);
  EXPECT_EQ(nosys->reason, "SapSystemNotFound");

  const ObjectStatus* system = StatusOf(result, "SapSystem", "erp");
  ASSERT_NE(system, nullptr);
  EXPECT_EQ(system->servers, 4);
  EXPECT_EQ(system->generation, 2);
  EXPECT_EQ(system->Find(kAccepted)->status, "True");
  EXPECT_EQ(system->Find(kAccepted)->message,
            "message server http://erp-ms:8101/msgserver/text/logon?version=1.2, every 25s");
  EXPECT_EQ(system->Find(kRefreshed)->status, "True");
  EXPECT_EQ(system->Find(kRefreshed)->reason, "Refreshed");
}

TEST(CompileSapSystemTest, ReencryptTakesTheHttpsPorts) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp")));
  objects.Upsert(List("erp"));
  json group = Group("diags", "abap", {{"name", "erp"}});
  model::Object decoded = Decode(group);
  std::get<model::LogonGroup>(decoded).spec.upstream_tls.mode = "reencrypt";
  objects.Upsert(decoded);
  CompileResult result = Compile(objects);
  // (The compile may reject reencrypt in this version; the ports are chosen anyway.)
  const ObjectStatus* status = StatusOf(result, "LogonGroup", "diags");
  ASSERT_NE(status, nullptr);
  if (status->Find(kAccepted)->status == "True") {
    EXPECT_EQ(Servers(result, "diags"), "a_ERP_00@10.0.0.1:44300/3");
  }
  EXPECT_NE(status->Find(kResolvedRefs)->message.find("1 of 4 instances"), std::string::npos)
      << status->Find(kResolvedRefs)->message;
}

TEST(CompileSapSystemTest, NoListYetAndBadSpecs) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp")));
  objects.Upsert(Decode(System("bad", {{"sid", "erp"}, {"refreshIntervalSeconds", 0}})));
  objects.Upsert(Decode(Group("diag", "abap", {{"name", "erp"}})));
  json both = Group("both", "abap", {{"name", "erp"}});
  both["spec"]["backend"]["staticServers"] = {{{"name", "s1"}, {"address", "10.0.0.9"}, {"port", 1}}};
  objects.Upsert(Decode(both));
  CompileResult result = Compile(objects);
  const Condition* resolved = Find(result, "LogonGroup", "diag", kResolvedRefs);
  EXPECT_EQ(resolved->reason, "NoServerList");
  EXPECT_EQ(resolved->message, "SapSystem erp/erp has no server list yet: not polled yet");
  EXPECT_EQ(Find(result, "SapSystem", "erp", kRefreshed), nullptr) << "not polled: no Refreshed";
  const Condition* bad = Find(result, "SapSystem", "bad", kAccepted);
  EXPECT_EQ(bad->status, "False");
  EXPECT_EQ(bad->reason, "InvalidField");
  EXPECT_NE(bad->message.find("spec.sid"), std::string::npos);
  EXPECT_NE(bad->message.find("spec.refreshIntervalSeconds: 0"), std::string::npos);
  const Condition* both_accepted = Find(result, "LogonGroup", "both", kAccepted);
  EXPECT_EQ(both_accepted->status, "False");
  EXPECT_EQ(both_accepted->message,
            "spec.backend: exactly one of service, staticServers or sapSystem must be set, got both");
}

// A list change recompiles only the groups that read it; the memo's output
// is the plain compile's; an equal list is no change at all.
TEST(CompileSapSystemTest, StoreAndMemo) {
  pipeline::ObjectStore store;
  store.Upsert({Decode(System("erp")), nullptr});
  store.Upsert({Decode(System("crm")), nullptr});
  store.Upsert({List("erp"), nullptr});
  store.Upsert({Decode(Group("diag", "abap", {{"name", "erp"}})), nullptr});
  store.Upsert({Decode(Group("crm", "abap", {{"name", "crm"}})), nullptr});
  store.Compile();
  const std::uint64_t before = store.memo().groups_compiled();

  EXPECT_FALSE(store.Upsert({List("erp"), nullptr})) << "an equal list changes nothing";

  model::SapServerList changed = List("erp");
  changed.instances.erase(changed.instances.begin());  // a_ERP_00 leaves
  EXPECT_TRUE(store.Upsert({changed, nullptr}));
  CompileResult result = store.Compile();
  EXPECT_EQ(store.memo().groups_compiled() - before, 1u) << "only diag";
  EXPECT_EQ(Servers(result, "diag"), "b_ERP_01@10.0.0.2:8001/5");
  CompileResult plain = Compile(store.objects());
  EXPECT_EQ(SnapshotToJson(result.snapshot), SnapshotToJson(plain.snapshot));
  EXPECT_EQ(result.statuses, plain.statuses);

  // The crm list arrives: only crm is compiled again.
  const std::uint64_t before_crm = store.memo().groups_compiled();
  EXPECT_TRUE(store.Upsert({List("crm"), nullptr}));
  CompileResult with_crm = store.Compile();
  EXPECT_EQ(store.memo().groups_compiled() - before_crm, 1u);
  EXPECT_EQ(Servers(with_crm, "crm"), "a_ERP_00@10.0.0.1:8000/3,b_ERP_01@10.0.0.2:8001/5");
  // The list goes (SapSystem deleted): the group resolves no more.
  EXPECT_TRUE(store.Remove({"SapServerList", "erp", "erp"}));
  CompileResult without = store.Compile();
  EXPECT_EQ(Find(without, "LogonGroup", "diag", kResolvedRefs)->reason, "NoServerList");
}

json Mapping(const std::string& name, json spec) {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "UrlMapping"},
          {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", 3}}},
          {"spec", spec}};
}

model::SapServerList ListWithUrlMap(const std::string& name) {
  model::SapServerList list = List(name);
  list.has_url_map = true;
  list.url_prefixes = {{"/irj~portal/", "PORTAL", true},
                       {"/sap/bc/gui/sap/its/webgui/", "WEBGUI", false},
                       {"/sap/bc/own/", "", false},
                       {"/sap/public/x/", "PUBLIC", false}};
  return list;
}

// "prefix kind group" of each rule of the any-host virtual host.
std::string Rules(const CompileResult& result) {
  std::string out;
  for (const auto& vhost : result.snapshot.virtual_hosts()) {
    if (!vhost.host().empty()) {
      continue;
    }
    for (const auto& rule : vhost.rules()) {
      out += (out.empty() ? "" : ", ") + rule.prefix() + " " +
             (rule.kind() == v1::KIND_JAVA ? "java" : "abap") + " " + rule.group();
    }
  }
  return out;
}

// UrlMapping.spec.fromSapSystem: the SapSystem's ICF URL prefixes become
// rules (kind from STACK, group from the LogonGroup of that SMLG group, else
// the kind's default), the mapping's own rules win on the same prefix.
TEST(CompileSapSystemTest, UrlMapFromSapSystem) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp", {{"urlMap", true}})));
  objects.Upsert(ListWithUrlMap("erp"));
  objects.Upsert(Decode(Group("diag", "abap", {{"name", "erp"}})));
  objects.Upsert(Decode(Group("j2ee", "java", {{"name", "erp"}})));
  objects.Upsert(Decode(Group("public", "abap", {{"name", "erp"}, {"logonGroup", "PUBLIC"}})));
  objects.Upsert(Decode(
      Mapping("erp", {{"fromSapSystem", "erp"},
                      {"rules", json::array({{{"prefix", "/sap/bc/own/"}, {"kind", "java"}}})}})));
  CompileResult result = Compile(objects);
  EXPECT_EQ(Rules(result),
            "/irj~portal/ java erp/j2ee, /sap/bc/gui/sap/its/webgui/ abap erp/diag, "
            "/sap/bc/own/ java erp/j2ee, /sap/public/x/ abap erp/public");
  const Condition* accepted = Find(result, "UrlMapping", "erp", kAccepted);
  ASSERT_NE(accepted, nullptr);
  EXPECT_EQ(accepted->status, "True") << accepted->message;
  EXPECT_NE(accepted->message.find("3 from SapSystem erp"), std::string::npos) << accepted->message;
  const Condition* resolved = Find(result, "UrlMapping", "erp", kResolvedRefs);
  ASSERT_NE(resolved, nullptr);
  EXPECT_EQ(resolved->status, "True") << resolved->message;

  // A refresh with other prefixes: the rules follow.
  model::SapServerList changed = ListWithUrlMap("erp");
  changed.url_prefixes.erase(changed.url_prefixes.begin());
  changed.url_prefixes.push_back({"/sap/zz/", "PUBLIC", false});
  objects.Upsert(changed);
  EXPECT_EQ(Rules(Compile(objects)),
            "/sap/bc/gui/sap/its/webgui/ abap erp/diag, /sap/bc/own/ java erp/j2ee, "
            "/sap/public/x/ abap erp/public, /sap/zz/ abap erp/public");

  // An invalid prefix that got here anyway is left out, not served.
  changed.url_prefixes.push_back({"/bad path/", "", false});
  changed.url_prefixes.push_back({"/x/", "bad group", false});
  objects.Upsert(changed);
  EXPECT_EQ(Rules(Compile(objects)),
            "/sap/bc/gui/sap/its/webgui/ abap erp/diag, /sap/bc/own/ java erp/j2ee, "
            "/sap/public/x/ abap erp/public, /sap/zz/ abap erp/public");
}

TEST(CompileSapSystemTest, UrlMapFromSapSystemUnresolved) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp")));
  objects.Upsert(List("erp"));  // no URL map
  objects.Upsert(Decode(Group("diag", "abap", {{"name", "erp"}})));
  auto own = json::array({{{"prefix", "/sap/bc/own/"}}});
  objects.Upsert(Decode(
      Mapping("nomap", {{"hosts", {"a.example"}}, {"fromSapSystem", "erp"}, {"rules", own}})));
  objects.Upsert(Decode(
      Mapping("missing", {{"hosts", {"b.example"}}, {"fromSapSystem", "crm"}, {"rules", own}})));
  objects.Upsert(
      Decode(Mapping("badname", {{"hosts", {"c.example"}}, {"fromSapSystem", "Not_A_Name"}})));
  CompileResult result = Compile(objects);
  const Condition* nomap = Find(result, "UrlMapping", "nomap", kResolvedRefs);
  ASSERT_NE(nomap, nullptr);
  EXPECT_EQ(nomap->status, "False");
  EXPECT_EQ(nomap->reason, "NoUrlMap");
  EXPECT_NE(nomap->message.find("spec.urlMap true"), std::string::npos) << nomap->message;
  EXPECT_EQ(Find(result, "UrlMapping", "nomap", kAccepted)->status, "True");
  const Condition* missing = Find(result, "UrlMapping", "missing", kResolvedRefs);
  ASSERT_NE(missing, nullptr);
  EXPECT_EQ(missing->status, "False");
  EXPECT_EQ(missing->reason, "SapSystemNotFound");
  const Condition* bad = Find(result, "UrlMapping", "badname", kAccepted);
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->status, "False");
  EXPECT_NE(bad->message.find("spec.fromSapSystem"), std::string::npos) << bad->message;
  // The own rules still serve.
  int own_rules = 0;
  for (const auto& vhost : result.snapshot.virtual_hosts()) {
    for (const auto& rule : vhost.rules()) {
      own_rules += rule.prefix() == "/sap/bc/own/" ? 1 : 0;
    }
  }
  EXPECT_EQ(own_rules, 2);

  // Not polled yet: no list at all.
  objects.Remove({"SapServerList", "erp", "erp"});
  EXPECT_EQ(Find(Compile(objects), "UrlMapping", "nomap", kResolvedRefs)->reason, "NoUrlMap");
}

json StaticGroup(const std::string& name, bool reencrypt) {
  json spec = {{"kind", "abap"},
               {"backend",
                {{"staticServers", json::array({{{"name", name + "_ERP_00"},
                                                 {"address", "10.0.1.1"},
                                                 {"port", 44300}}})}}}};
  if (reencrypt) {
    spec["upstreamTLS"] = {{"mode", "reencrypt"}, {"serverName", "erp.example.com"}};
  }
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", 1}}},
          {"spec", spec}};
}

// Issue 23 item 5: a discovered /sap/bc/gui/sensitive/ moved traffic out of
// the operator's re-encrypted /sap/bc/gui/ group into a plain-HTTP
// discovered group. Discovered prefixes no longer take a subtree of the
// mapping's own rules unless spec.fromSapSystemRefines is true, and never
// when the traffic they take would lose its upstream TLS.
TEST(CompileSapSystemTest, DiscoveredPrefixesDoNotTakeOverTheOperatorsRules) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp", {{"urlMap", true}})));
  model::SapServerList list = ListWithUrlMap("erp");
  list.url_prefixes = {{"/newapp/", "PUBLIC", false},
                       {"/sap/bc/gui/sensitive/", "PUBLIC", false},
                       {"/sap/bc/plain/x/", "PUBLIC", false},
                       {"/sap/opu/odata/", "", false}};
  objects.Upsert(list);
  objects.Upsert(Decode(Group("diag", "abap", {{"name", "erp"}})));
  objects.Upsert(Decode(Group("public", "abap", {{"name", "erp"}, {"logonGroup", "PUBLIC"}})));
  objects.Upsert(Decode(StaticGroup("secure", /*reencrypt=*/true)));
  auto mapping = [](bool refines, const std::string& java_default) {
    json own = json::array({{{"prefix", "/sap/bc/gui/"}, {"logonGroup", "secure"}},
                            {{"prefix", "/sap/bc/plain/"}, {"logonGroup", "diag"}}});
    json spec = {{"fromSapSystem", "erp"},
                 {"defaultGroups", {{"abap", "diag"}, {"java", java_default}}},
                 {"rules", own}};
    if (refines) {
      spec["fromSapSystemRefines"] = true;
    }
    return Decode(Mapping("erp", spec));
  };
  objects.Upsert(mapping(false, "diag"));
  CompileResult result = Compile(objects);
  EXPECT_EQ(Rules(result),
            "/newapp/ abap erp/public, /sap/bc/gui/ abap erp/secure, /sap/bc/plain/ abap erp/diag, "
            "/sap/opu/odata/ abap erp/diag");
  const Condition* accepted = Find(result, "UrlMapping", "erp", kAccepted);
  ASSERT_NE(accepted, nullptr);
  EXPECT_EQ(accepted->status, "True") << accepted->message;
  EXPECT_NE(accepted->message.find("2 prefixes under spec.rules left out "
                                   "(spec.fromSapSystemRefines: false): /sap/bc/gui/sensitive/ "
                                   "(under /sap/bc/gui/), /sap/bc/plain/x/ (under /sap/bc/plain/)"),
            std::string::npos)
      << accepted->message;

  // Opted in: the plain subtree of a plain rule may be refined; the
  // re-encrypted one still not, as that would lower its TLS.
  objects.Upsert(mapping(true, "diag"));
  CompileResult refined = Compile(objects);
  EXPECT_EQ(Rules(refined),
            "/newapp/ abap erp/public, /sap/bc/gui/ abap erp/secure, /sap/bc/plain/ abap erp/diag, "
            "/sap/bc/plain/x/ abap erp/public, /sap/opu/odata/ abap erp/diag");
  accepted = Find(refined, "UrlMapping", "erp", kAccepted);
  EXPECT_NE(accepted->message.find("1 prefix left out as it would lower the upstream TLS of the "
                                   "traffic it takes: /sap/bc/gui/sensitive/ (erp/public, plain "
                                   "HTTP, instead of erp/secure, re-encrypted)"),
            std::string::npos)
      << accepted->message;

  // Unmatched paths go to the java default group: when that re-encrypts, a
  // discovered plain prefix outside every rule does not take its traffic.
  objects.Upsert(mapping(false, "secure"));
  EXPECT_EQ(Rules(Compile(objects)), "/sap/bc/gui/ abap erp/secure, /sap/bc/plain/ abap erp/diag");

  // No java default group (unmatched paths get 503): a discovered prefix
  // outside every rule takes traffic that went nowhere and lowers nothing
  // (attack review: such prefixes were left out "instead of , re-encrypted").
  objects.Upsert(mapping(false, "nosuch"));
  CompileResult nowhere = Compile(objects);
  EXPECT_EQ(Rules(nowhere),
            "/newapp/ abap erp/public, /sap/bc/gui/ abap erp/secure, /sap/bc/plain/ abap erp/diag, "
            "/sap/opu/odata/ abap erp/diag");
  EXPECT_EQ(Find(nowhere, "UrlMapping", "erp", kAccepted)->message.find("would lower"),
            std::string::npos);
}

// Issue 23 item 2, in the compile too: a list polled before allowedNetworks
// was narrowed (or that slipped past the poller) gives no server outside it.
TEST(CompileSapSystemTest, AddressRuleAppliedAgainWithTheCurrentSpec) {
  model::ObjectSet objects;
  objects.Upsert(Decode(System("erp", {{"allowedNetworks", {"10.0.0.0/30"}}})));
  model::SapServerList list = List("erp");
  list.instances.push_back(Instance("lo_ERP_08", "127.0.0.1", 8000, 0, 1, true, false));
  objects.Upsert(list);
  objects.Upsert(Decode(Group("diag", "abap", {{"name", "erp"}})));
  CompileResult result = Compile(objects);
  // 10.0.0.1 and 10.0.0.2 are inside 10.0.0.0/30; 10.0.0.4 (no HTTP port) and
  // 127.0.0.1 are not.
  EXPECT_EQ(Servers(result, "diag"), "a_ERP_00@10.0.0.1:8000/3,b_ERP_01@10.0.0.2:8001/5");
  const Condition* accepted = Find(result, "LogonGroup", "diag", kAccepted);
  ASSERT_NE(accepted, nullptr);
  EXPECT_NE(accepted->message.find("instance \"lo_ERP_08\" left out: address 127.0.0.1 refused: "
                                   "loopback address, not in spec.allowedNetworks"),
            std::string::npos)
      << accepted->message;
}

}  // namespace
}  // namespace kwd::compile
