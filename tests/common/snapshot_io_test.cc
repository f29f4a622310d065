#include "common/snapshot_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/crypto.h"
#include "tests/support/temp_path.h"

namespace kwd {
namespace {

v1::Snapshot ValidSnapshot() {
  v1::Snapshot s;
  auto* g = s.add_groups();
  g->set_key("erp/public");
  g->set_kind(v1::KIND_ABAP);
  g->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  for (const char* name : {"A", "B"}) {
    auto* server = g->add_servers();
    server->set_name(name);
    server->set_address("127.0.0.1");
    server->set_port(8000);
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
  }
  auto* vh = s.add_virtual_hosts();
  vh->set_default_root_handler(v1::KIND_JAVA);
  vh->set_default_abap_group("erp/public");
  auto* rule = vh->add_rules();
  rule->set_prefix("/sap/");
  rule->set_kind(v1::KIND_ABAP);
  rule->set_group("erp/public");
  StampSnapshotVersion(&s);
  return s;
}

TEST(SnapshotIoTest, VersionIsAContentHash) {
  v1::Snapshot a = ValidSnapshot();
  v1::Snapshot b = ValidSnapshot();
  EXPECT_EQ(a.version().size(), 64u);
  EXPECT_EQ(a.version(), b.version());
  b.mutable_groups(0)->mutable_servers(0)->set_capacity(2);
  EXPECT_NE(ComputeSnapshotVersion(b), a.version());
}

std::string DeterministicBytes(const google::protobuf::Message& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string Raw(const Sha256Digest& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// The version's definition (snapshot_io.h), computed the plain way: a copy
// without `version` and `groups`, hashed; each group hashed; the digests
// concatenated and hashed; hex.
std::string ReferenceVersion(const v1::Snapshot& snapshot) {
  v1::Snapshot rest = snapshot;
  rest.clear_version();
  rest.clear_groups();
  std::string joined = Raw(Sha256(DeterministicBytes(rest)));
  for (const auto& group : snapshot.groups()) {
    joined += Raw(Sha256(DeterministicBytes(group)));
  }
  return HexEncode(Sha256(joined));
}

// ComputeSnapshotDigests copies every field but `version` and `groups` by
// name: a new field must be added there, or it would not count.
TEST(SnapshotIoTest, DigestsCoverEveryField) {
  const auto* descriptor = v1::Snapshot::descriptor();
  std::vector<std::string> names;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    names.push_back(descriptor->field(i)->name());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"version", "groups", "virtual_hosts", "sources",
                                             "certificates"}));
  v1::Snapshot s = ValidSnapshot();
  const std::string before = ComputeSnapshotVersion(s);
  s.mutable_virtual_hosts(0)->set_default_java_group("erp/another");
  EXPECT_NE(ComputeSnapshotVersion(s), before);
  const std::string with_vhost_change = ComputeSnapshotVersion(s);
  s.add_sources()->set_name("another");
  EXPECT_NE(ComputeSnapshotVersion(s), with_vhost_change);
  const std::string with_source = ComputeSnapshotVersion(s);
  v1::Certificate* certificate = s.add_certificates();
  certificate->set_name("erp/erp-tls");
  certificate->add_hosts("a.example");
  certificate->set_cert_pem("cert");
  certificate->set_key_pem("key");
  EXPECT_NE(ComputeSnapshotVersion(s), with_source);
  EXPECT_EQ(ComputeSnapshotVersion(s), ReferenceVersion(s));
  const std::string with_certificate = ComputeSnapshotVersion(s);
  certificate->set_key_pem("another key");  // a rotated key alone is a new version
  EXPECT_NE(ComputeSnapshotVersion(s), with_certificate);
}

TEST(SnapshotIoTest, CheckSnapshotChecksCertificates) {
  v1::Snapshot s = ValidSnapshot();
  auto add = [&](const std::string& name, std::vector<std::string> hosts) {
    v1::Certificate* certificate = s.add_certificates();
    certificate->set_name(name);
    for (const auto& host : hosts) {
      certificate->add_hosts(host);
    }
    certificate->set_cert_pem("cert");
    certificate->set_key_pem("key");
    return certificate;
  };
  add("erp/a-tls", {"a.example", "b.example"});
  add("erp/b-tls", {"*.c.example"});
  EXPECT_TRUE(CheckSnapshot(s).empty());
  add("erp/b-tls", {"d.example"});  // not unique
  add("erp/c-tls", {"a.example"})->clear_key_pem();  // host twice, no key
  add("bad name", {});
  add("erp/d-tls", {"Upper.example", "a b"});
  std::string all;
  for (const std::string& problem : CheckSnapshot(s)) {
    all += problem + "\n";
  }
  EXPECT_NE(all.find("certificates are not sorted by unique name at certificate \"erp/b-tls\""),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("certificate \"erp/c-tls\" has no certificate or no key"), std::string::npos);
  EXPECT_NE(all.find("host a.example is also served by certificate \"erp/a-tls\""),
            std::string::npos);
  EXPECT_NE(all.find("certificate \"bad name\" has an invalid name"), std::string::npos);
  EXPECT_NE(all.find("certificate \"bad name\" serves no host"), std::string::npos);
  EXPECT_NE(all.find("\"Upper.example\" is an invalid host"), std::string::npos);
}

TEST(SnapshotIoTest, SnapshotToJsonRedactsPrivateKeysAndTheCacheFormKeepsThem) {
  v1::Snapshot s = ValidSnapshot();
  v1::Certificate* certificate = s.add_certificates();
  certificate->set_name("erp/erp-tls");
  certificate->add_hosts("a.example");
  certificate->set_cert_pem("-----BEGIN CERTIFICATE-----\nCERTBYTES\n");
  certificate->set_key_pem("-----BEGIN PRIVATE KEY-----\nSECRETKEYBYTES\n");
  const std::string shown = SnapshotToJson(s);
  EXPECT_EQ(shown.find("SECRETKEYBYTES"), std::string::npos);
  EXPECT_NE(shown.find("CERTBYTES"), std::string::npos);
  EXPECT_NE(shown.find(std::string(kRedactedPrivateKey)), std::string::npos);
  v1::Snapshot back;
  std::string error;
  ASSERT_TRUE(SnapshotFromJson(SnapshotToJsonWithPrivateKeys(s), &back, &error)) << error;
  EXPECT_EQ(back.certificates(0).key_pem(), certificate->key_pem());
  EXPECT_EQ(ComputeSnapshotVersion(back), ComputeSnapshotVersion(s));
}

TEST(SnapshotIoTest, UpdatingOneGroupDigestGivesTheNewVersion) {
  v1::Snapshot s = ValidSnapshot();
  SnapshotDigests digests = ComputeSnapshotDigests(s);
  EXPECT_EQ(digests.Version(), s.version());
  s.mutable_groups(0)->mutable_servers(0)->set_capacity(9);
  EXPECT_EQ(digests.Version(), s.version());  // stale until updated
  UpdateGroupDigest(s, 0, &digests);
  EXPECT_EQ(digests.Version(), ComputeSnapshotVersion(s));
  EXPECT_EQ(digests.Version(), ReferenceVersion(s));
  EXPECT_NE(digests.Version(), s.version());
}

TEST(SnapshotIoTest, LoadSnapshotFileRejectsAnEditedSnapshotThatKeptItsVersion) {
  v1::Snapshot s = ValidSnapshot();
  s.mutable_groups(0)->mutable_servers(0)->set_capacity(9);  // version now stale
  const std::string path = testing::UniqueTempPath("edited-snapshot.json");
  {
    std::ofstream out(path);
    out << SnapshotToJson(s);
  }
  v1::Snapshot loaded;
  std::string error;
  EXPECT_FALSE(LoadSnapshotFile(path, &loaded, &error));
  EXPECT_NE(error.find("does not match the content hash"), std::string::npos) << error;
  EXPECT_NE(error.find(path), std::string::npos) << error;
  s.clear_version();  // a hand-written snapshot without a version loads only where asked for
  {
    std::ofstream out(path);
    out << SnapshotToJson(s);
  }
  EXPECT_FALSE(LoadSnapshotFile(path, &loaded, &error));
  EXPECT_TRUE(LoadSnapshotFile(path, &loaded, &error, SnapshotVersionCheck::kIfSet)) << error;
}

// `{}` parses as a snapshot with no groups and no hosts: applied, it would
// answer every request 404/503. Without a version it is no snapshot the
// controller wrote, and is refused like any other invalid file.
TEST(SnapshotIoTest, LoadSnapshotFileRefusesASnapshotWithoutAVersion) {
  const std::string path = testing::UniqueTempPath("empty-snapshot.json");
  for (const char* text : {"{}", "{\"version\": \"\"}", "{\"groups\": []}"}) {
    std::ofstream(path) << text;
    v1::Snapshot loaded;
    std::string error;
    EXPECT_FALSE(LoadSnapshotFile(path, &loaded, &error)) << text;
    EXPECT_NE(error.find("has no version"), std::string::npos) << error;
    EXPECT_NE(error.find(path), std::string::npos) << error;
  }
  // The stamped empty snapshot is a snapshot the controller can write.
  v1::Snapshot empty;
  StampSnapshotVersion(&empty);
  std::ofstream(path) << SnapshotToJson(empty);
  v1::Snapshot loaded;
  std::string error;
  EXPECT_TRUE(LoadSnapshotFile(path, &loaded, &error)) << error;
}

TEST(SnapshotIoTest, VerifySnapshotVersion) {
  v1::Snapshot s = ValidSnapshot();
  std::string error;
  EXPECT_TRUE(VerifySnapshotVersion(s, &error)) << error;
  s.mutable_groups(0)->set_load_reset_interval_seconds(7);
  EXPECT_FALSE(VerifySnapshotVersion(s, &error));
  EXPECT_NE(error.find("does not match the content hash"), std::string::npos) << error;
  s.clear_version();
  EXPECT_TRUE(VerifySnapshotVersion(s, &error)) << "an unset version is not checked";
}

TEST(SnapshotIoTest, VersionIgnoresTheVersionFieldWhateverItHolds) {
  v1::Snapshot s = ValidSnapshot();
  const std::string want = ReferenceVersion(s);
  // Empty, the stamped hash, and lengths that need a one- and a two-byte
  // length varint.
  for (const std::string& version :
       {std::string(), s.version(), std::string(1, 'x'), std::string(127, 'v'),
        std::string(128, 'v'), std::string(70000, 'w')}) {
    s.set_version(version);
    EXPECT_EQ(ComputeSnapshotVersion(s), want) << version.size();
  }
  v1::Snapshot empty;
  EXPECT_EQ(ComputeSnapshotVersion(empty), ReferenceVersion(empty));
  EXPECT_EQ(ComputeSnapshotVersion(empty), HexEncode(Sha256(Raw(Sha256("")))));
}

TEST(SnapshotIoTest, VersionOfALargeSnapshotMatchesTheDefinition) {
  // Far larger than the hashing stream's buffer.
  v1::Snapshot s = ValidSnapshot();
  for (int i = 0; i < 5000; ++i) {
    auto* server = s.mutable_groups(0)->add_servers();
    server->set_name("server-" + std::to_string(i));
    server->set_address("10.0.0." + std::to_string(i % 250));
    server->set_port(8000);
    server->set_capacity(1 + i % 3);
    server->set_state(v1::SERVER_STATE_READY);
  }
  s.set_version("stale");
  EXPECT_EQ(ComputeSnapshotVersion(s), ReferenceVersion(s));
  StampSnapshotVersion(&s);
  EXPECT_EQ(s.version(), ReferenceVersion(s));
}

TEST(SnapshotIoTest, JsonRoundTripKeepsContentAndVersion) {
  v1::Snapshot a = ValidSnapshot();
  v1::Snapshot back;
  std::string error;
  ASSERT_TRUE(SnapshotFromJson(SnapshotToJson(a), &back, &error)) << error;
  EXPECT_EQ(back.SerializeAsString(), a.SerializeAsString());
  EXPECT_TRUE(CheckSnapshot(back).empty());
}

TEST(SnapshotIoTest, RejectsJsonWithUnknownFields) {
  v1::Snapshot out;
  std::string error;
  EXPECT_FALSE(SnapshotFromJson(R"({"groupz": []})", &out, &error));
  EXPECT_NE(error.find("kwd.v1.Snapshot"), std::string::npos);
}

TEST(SnapshotIoTest, CheckAcceptsWhatTheControllerWrites) {
  v1::Snapshot s = ValidSnapshot();
  auto* g = s.mutable_groups(0);
  g->mutable_health_check()->set_path("/sap/public/icman/ping?sap-client=001&x=%2F");
  g->mutable_session_affinity()->set_affinity_cookie_name("kwd_affinity");
  g->mutable_servers(0)->set_name("erp1_ERP_00");
  g->mutable_servers(0)->set_pod("erp/erp-abap-0");
  g->mutable_servers(1)->set_name("fd00::1");  // an address as name (no targetRef)
  g->mutable_servers(1)->set_address("fd00::1");
  auto* vh = s.mutable_virtual_hosts(0);
  vh->set_source("erp/m");
  vh->mutable_rules(0)->set_prefix("/sap(bd1lbizjptawmq==)/");
  vh->mutable_rules(0)->set_source("erp/m");
  for (const char* pattern : {"*", "*.cgi", "/sap/bc/gui/*", "/a%20b/*"}) {
    auto* p = vh->add_permissions();
    p->set_action(v1::PERMISSION_ACTION_DENY);
    p->set_pattern(pattern);
  }
  auto* other = s.add_virtual_hosts();
  other->set_host("*.corp.example");
  auto* source = s.add_sources();
  source->set_kind("UrlMapping");
  source->set_namespace_("erp");
  source->set_name("m.v1");
  EXPECT_EQ(CheckSnapshot(s), std::vector<std::string>{});
}

TEST(SnapshotIoTest, CheckFindsBrokenInvariants) {
  struct Case {
    const char* name;
    void (*mutate)(v1::Snapshot*);
    const char* expect;
  };
  const Case cases[] = {
      {"dangling rule group",
       [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_group("erp/nope");
       },
       "unknown group erp/nope"},
      {"zero capacity",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(1)->set_capacity(0); },
       "capacity 0"},
      {"unsorted servers",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(0)->set_name("Z"); },
       "not sorted"},
      {"bad prefix",
       [](v1::Snapshot* s) { s->mutable_virtual_hosts(0)->mutable_rules(0)->set_prefix("/sap"); },
       "must start and end with /"},
      {"star in the middle",
       [](v1::Snapshot* s) {
         auto* p = s->mutable_virtual_hosts(0)->add_permissions();
         p->set_action(v1::PERMISSION_ACTION_DENY);
         p->set_pattern("/sap/*/x");
       },
       "only at the start or the end"},
      // Names and paths end up in headers (Set-Cookie, the health check's
      // request line and Host), log lines and metric labels.
      {"server name with CR LF",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_servers(1)->set_name("B\r\nSet-Cookie: evil=1");
       },
       "invalid server name"},
      {"server name with a space",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(1)->set_name("B C"); },
       "invalid server name"},
      {"server name with a semicolon",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(1)->set_name("B;x=1"); },
       "invalid server name"},
      {"server address with LF",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_servers(0)->set_address("127.0.0.1\nX-Evil: 1");
       },
       "invalid address"},
      {"server pod with LF",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(0)->set_pod("erp/p\n1"); },
       "invalid pod"},
      {"group key with CR",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->set_key("erp/public\r");
         s->mutable_virtual_hosts(0)->set_default_abap_group("erp/public\r");
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_group("erp/public\r");
       },
       "invalid key"},
      {"group key without a namespace",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->set_key("public");
         s->mutable_virtual_hosts(0)->set_default_abap_group("public");
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_group("public");
       },
       "invalid key"},
      {"health check path with CR LF",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_health_check()->set_path("/ping HTTP/1.1\r\nX: y");
       },
       "health check path"},
      {"health check path not origin-form",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_health_check()->set_path("http://x/ping");
       },
       "health check path"},
      {"affinity cookie name with a space",
       [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_session_affinity()->set_affinity_cookie_name("a b");
       },
       "affinity cookie name"},
      {"host with LF",
       [](v1::Snapshot* s) { s->mutable_virtual_hosts(0)->set_host("erp.example.com\n"); },
       "invalid host"},
      {"prefix with a space",
       [](v1::Snapshot* s) { s->mutable_virtual_hosts(0)->mutable_rules(0)->set_prefix("/sa p/"); },
       "path characters"},
      {"prefix with CR LF",
       [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_prefix("/sap\r\n/");
       },
       "path characters"},
      {"rule source with LF",
       [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_source("erp/m\n");
       },
       "invalid source"},
      {"permission pattern with CR",
       [](v1::Snapshot* s) {
         auto* p = s->mutable_virtual_hosts(0)->add_permissions();
         p->set_action(v1::PERMISSION_ACTION_DENY);
         p->set_pattern("/sap/\r*");
       },
       "path characters"},
      {"source object name with LF",
       [](v1::Snapshot* s) {
         auto* source = s->add_sources();
         source->set_kind("LogonGroup");
         source->set_namespace_("erp");
         source->set_name("public\n");
       },
       "invalid source object"},
      {"system with a lowercase SID",
       [](v1::Snapshot* s) { s->mutable_virtual_hosts(0)->add_systems()->set_sid("erp"); },
       "is not a SAP system ID"},
      {"systems out of order",
       [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->add_systems()->set_sid("QAS");
         s->mutable_virtual_hosts(0)->add_systems()->set_sid("ERP");
       },
       "systems not sorted by unique SID"},
      {"system naming an unknown group",
       [](v1::Snapshot* s) {
         auto* system = s->mutable_virtual_hosts(0)->add_systems();
         system->set_sid("QAS");
         system->set_default_abap_group("erp/missing");
       },
       "system QAS default abap group names unknown group erp/missing"},
  };
  for (const auto& c : cases) {
    v1::Snapshot s = ValidSnapshot();
    c.mutate(&s);
    auto problems = CheckSnapshot(s);
    ASSERT_FALSE(problems.empty()) << c.name;
    bool found = false;
    for (const auto& p : problems) {
      found = found || p.find(c.expect) != std::string::npos;
    }
    EXPECT_TRUE(found) << c.name << ": " << problems.front();
  }
}

}  // namespace
}  // namespace kwd
