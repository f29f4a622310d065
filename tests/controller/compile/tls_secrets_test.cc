// UrlMapping.spec.tls and kubernetes.io/tls Secrets: what the compile puts
// into the snapshot's certificates and the mapping's conditions.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/file.h"
#include "common/pem_files.h"
#include "common/snapshot_io.h"
#include "controller/compile/compile.h"
#include "controller/compile/internal.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_pki.h"

namespace kwd::compile {
namespace {

using nlohmann::json;

struct Pair {
  std::string cert;
  std::string key;
};

class TlsSecretsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::UniqueTempPath("tls_secrets");
    std::filesystem::create_directories(dir_);
    std::string error;
    ASSERT_TRUE(testing::MakeSelfSignedPair(dir_, "a", "a.example,*.b.example", &error)) << error;
    ASSERT_TRUE(testing::MakeSelfSignedPair(dir_, "other", "other.example", &error)) << error;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  static Pair Load(const std::string& name) {
    Pair pair;
    EXPECT_TRUE(ReadWholeFile(dir_ + "/" + name + ".pem", &pair.cert));
    EXPECT_TRUE(ReadWholeFile(dir_ + "/" + name + ".key", &pair.key));
    return pair;
  }

  static json Secret(const std::string& ns, const std::string& name, const std::string& cert,
                     const std::string& key, const std::string& type = "kubernetes.io/tls") {
    return {{"apiVersion", "v1"},
            {"kind", "Secret"},
            {"metadata", {{"name", name}, {"namespace", ns}, {"resourceVersion", "7"}}},
            {"type", type},
            {"data", {{"tls.crt", Base64Encode(cert)}, {"tls.key", Base64Encode(key)}}}};
  }

  static json Mapping(const std::string& name, const std::string& created, json hosts, json tls) {
    return {
        {"apiVersion", "dispatch.kwd.io/v1alpha1"},
        {"kind", "UrlMapping"},
        {"metadata",
         {{"name", name}, {"namespace", "erp"}, {"generation", 1}, {"creationTimestamp", created}}},
        {"spec", {{"hosts", std::move(hosts)}, {"tls", std::move(tls)}}}};
  }

  static model::ObjectSet Objects(const std::vector<json>& objects, std::int64_t now = 0) {
    model::ObjectSet set;
    for (const json& object : objects) {
      model::DecodeResult decoded = model::DecodeObject(object);
      EXPECT_TRUE(decoded.ok()) << decoded.error;
      if (decoded.ok()) {
        set.Upsert(std::move(*decoded.object));
      }
    }
    set.set_now_unix_seconds(now);
    return set;
  }

  static const ObjectStatus* Status(const CompileResult& result, const std::string& name) {
    for (const ObjectStatus& status : result.statuses) {
      if (status.kind == "UrlMapping" && status.name == name) {
        return &status;
      }
    }
    return nullptr;
  }

  static std::int64_t NotAfter(const std::string& cert) {
    CertificateInfo info;
    std::string error;
    Pair pair = Load("a");
    EXPECT_TRUE(CheckKeyPairPem(cert, pair.key, &info, &error)) << error;
    return info.not_after;
  }

  static std::string dir_;
};

std::string TlsSecretsTest::dir_;

TEST_F(TlsSecretsTest, ValidSecretBecomesACertificateServingOnlyItsListedHosts) {
  Pair a = Load("a");
  CompileResult result = Compile(Objects(
      {Secret("erp", "erp-tls", a.cert, a.key),
       Mapping(
           "erp", "2026-01-01T00:00:00Z", {"a.example", "*.b.example", "c.example"},
           json::array({{{"hosts", {"A.example", "x.b.example"}}, {"secretName", "erp-tls"}}}))},
      NotAfter(a.cert) - 3600));
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  const v1::Certificate& certificate = result.snapshot.certificates(0);
  EXPECT_EQ(certificate.name(), "erp/erp-tls");
  EXPECT_EQ(std::vector<std::string>(certificate.hosts().begin(), certificate.hosts().end()),
            (std::vector<std::string>{"a.example", "x.b.example"}));
  EXPECT_EQ(certificate.cert_pem(), a.cert);
  EXPECT_EQ(certificate.key_pem(), a.key);
  EXPECT_GT(certificate.not_after(), 0);
  EXPECT_EQ(result.certificates_expire, certificate.not_after());
  const ObjectStatus* status = Status(result, "erp");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->Find(kAccepted)->status, "True") << status->Find(kAccepted)->message;
  EXPECT_EQ(status->Find(kResolvedRefs)->status, "True");
  EXPECT_EQ(status->Find(kResolvedRefs)->message, "all LogonGroups and Secrets resolved");
  EXPECT_TRUE(CheckSnapshot(result.snapshot).empty());
}

TEST_F(TlsSecretsTest, MissingSecretIsSecretNotFoundAndTheRoutesStillServe) {
  CompileResult result = Compile(
      Objects({Mapping("erp", "2026-01-01T00:00:00Z", {"a.example"},
                       json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}))}));
  EXPECT_EQ(result.snapshot.certificates_size(), 0);
  EXPECT_EQ(result.snapshot.virtual_hosts_size(), 1);
  const ObjectStatus* status = Status(result, "erp");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->Find(kAccepted)->status, "True");
  const Condition* resolved = status->Find(kResolvedRefs);
  EXPECT_EQ(resolved->status, "False");
  EXPECT_EQ(resolved->reason, "SecretNotFound");
  EXPECT_NE(resolved->message.find("Secret erp/erp-tls not found"), std::string::npos)
      << resolved->message;
}

TEST_F(TlsSecretsTest, UnusableSecretsAreInvalidCertificateWithWhy) {
  Pair a = Load("a");
  Pair other = Load("other");
  struct Case {
    std::string name;
    json secret;
    std::string why;
  };
  std::vector<Case> cases = {
      {"bad pem", Secret("erp", "erp-tls", "not a certificate", a.key),
       "tls.crt holds no PEM certificate"},
      {"bad key", Secret("erp", "erp-tls", a.cert, "-----BEGIN PRIVATE KEY-----\nAAAA\n"),
       "tls.key holds no PEM private key"},
      {"key mismatch", Secret("erp", "erp-tls", a.cert, other.key),
       "tls.key does not belong to the certificate in tls.crt"},
      {"wrong type", Secret("erp", "erp-tls", a.cert, a.key, "Opaque"),
       "is of type \"Opaque\", not kubernetes.io/tls"},
      {"no key", Secret("erp", "erp-tls", a.cert, ""), "tls.key is missing or empty"},
  };
  cases.push_back({"not base64", Secret("erp", "erp-tls", a.cert, a.key), "is not base64"});
  cases.back().secret["data"]["tls.key"] = "%%%";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CompileResult result = Compile(Objects(
        {c.secret, Mapping("erp", "2026-01-01T00:00:00Z", {"a.example"},
                           json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}))}));
    EXPECT_EQ(result.snapshot.certificates_size(), 0);
    const Condition* resolved = Status(result, "erp")->Find(kResolvedRefs);
    EXPECT_EQ(resolved->reason, "InvalidCertificate");
    EXPECT_NE(resolved->message.find(c.why), std::string::npos) << resolved->message;
    EXPECT_NE(resolved->message.find("Secret erp/erp-tls"), std::string::npos);
    // Never a byte of the key in a message.
    EXPECT_EQ(resolved->message.find("PRIVATE KEY"), std::string::npos);
  }
}

TEST_F(TlsSecretsTest, ExpiryIsJudgedAtTheObjectSetsNowNotTheClock) {
  Pair a = Load("a");
  const std::int64_t not_after = NotAfter(a.cert);
  auto objects = [&](std::int64_t now) {
    return Objects({Secret("erp", "erp-tls", a.cert, a.key),
                    Mapping("erp", "2026-01-01T00:00:00Z", {"a.example"},
                            json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}))},
                   now);
  };
  CompileResult before = Compile(objects(not_after - 1));
  EXPECT_EQ(before.snapshot.certificates_size(), 1);
  CompileResult after = Compile(objects(not_after));
  EXPECT_EQ(after.snapshot.certificates_size(), 0);
  const Condition* resolved = Status(after, "erp")->Find(kResolvedRefs);
  EXPECT_EQ(resolved->reason, "InvalidCertificate");
  EXPECT_NE(resolved->message.find("the certificate expired at "), std::string::npos)
      << resolved->message;
  // Not valid yet (beyond five minutes of slack).
  CompileResult early = Compile(objects(not_after - 10 * 86400));
  EXPECT_EQ(Status(early, "erp")->Find(kResolvedRefs)->reason, "InvalidCertificate");
  EXPECT_NE(Status(early, "erp")->Find(kResolvedRefs)->message.find("not valid before"),
            std::string::npos);
}

TEST_F(TlsSecretsTest, HostNotInSpecHostsRejectsTheMapping) {
  Pair a = Load("a");
  CompileResult result = Compile(
      Objects({Secret("erp", "erp-tls", a.cert, a.key),
               Mapping("erp", "2026-01-01T00:00:00Z", {"a.example", "*.b.example"},
                       json::array({{{"hosts", {"x.b.example", "y.z.b.example", "c.example"}},
                                     {"secretName", "erp-tls"}}}))}));
  const Condition* accepted = Status(result, "erp")->Find(kAccepted);
  EXPECT_EQ(accepted->status, "False");
  EXPECT_EQ(accepted->reason, "InvalidField");
  EXPECT_NE(accepted->message.find("spec.tls[0].hosts: \"y.z.b.example\" is not one of "
                                   "spec.hosts"),
            std::string::npos)
      << accepted->message;
  EXPECT_NE(accepted->message.find("\"c.example\""), std::string::npos);
  EXPECT_EQ(accepted->message.find("\"x.b.example\""), std::string::npos);
  EXPECT_EQ(result.snapshot.certificates_size(), 0);
}

TEST_F(TlsSecretsTest, BadSecretNameAndEmptyHostsAreRejected) {
  CompileResult result = Compile(
      Objects({Mapping("erp", "2026-01-01T00:00:00Z", json::array(),
                       json::array({{{"hosts", json::array()}, {"secretName", "Bad_Name"}}}))}));
  const Condition* accepted = Status(result, "erp")->Find(kAccepted);
  EXPECT_EQ(accepted->status, "False");
  EXPECT_NE(accepted->message.find("spec.tls[0].secretName: \"Bad_Name\" is not a Secret name"),
            std::string::npos)
      << accepted->message;
  EXPECT_NE(accepted->message.find("spec.tls[0].hosts: at least one host"), std::string::npos);
}

TEST_F(TlsSecretsTest, CertificateNotNamingAHostIsANote) {
  Pair a = Load("a");
  CompileResult result = Compile(Objects(
      {Secret("erp", "erp-tls", a.cert, a.key),
       Mapping(
           "erp", "2026-01-01T00:00:00Z", json::array(),
           json::array({{{"hosts", {"a.example", "z.example"}}, {"secretName", "erp-tls"}}}))}));
  const Condition* accepted = Status(result, "erp")->Find(kAccepted);
  EXPECT_EQ(accepted->status, "True");
  EXPECT_NE(accepted->message.find("does not name z.example (it names a.example, *.b.example)"),
            std::string::npos)
      << accepted->message;
  EXPECT_EQ(accepted->message.find("a.example (it names"), std::string::npos);
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  EXPECT_EQ(result.snapshot.certificates(0).hosts_size(), 2);  // served as asked
}

TEST_F(TlsSecretsTest, NotesStayShortWhateverTheHostCount) {
  Pair other = Load("other");
  json hosts = json::array();
  for (int i = 0; i < 64; ++i) {
    hosts.push_back("h" + std::to_string(i) + ".example");
  }
  CompileResult result =
      Compile(Objects({Secret("erp", "erp-tls", other.cert, other.key),
                       Mapping("erp", "2026-01-01T00:00:00Z", json::array(),
                               json::array({{{"hosts", hosts}, {"secretName", "erp-tls"}}}))}));
  const std::string& message = Status(result, "erp")->Find(kAccepted)->message;
  EXPECT_NE(message.find("does not name h0.example, h1.example, h2.example, h3.example, "
                         "h4.example and 59 more (it names other.example)"),
            std::string::npos)
      << message;
  EXPECT_LT(message.size(), 1000u);
}

TEST_F(TlsSecretsTest, OlderMappingKeepsAHostTwoCertificatesWouldServe) {
  Pair a = Load("a");
  Pair other = Load("other");
  std::vector<json> objects = {
      Secret("erp", "new-tls", other.cert, other.key), Secret("erp", "old-tls", a.cert, a.key),
      Mapping("newer", "2026-02-01T00:00:00Z", {"a.example"},
              json::array({{{"hosts", {"a.example"}}, {"secretName", "new-tls"}}})),
      Mapping("older", "2026-01-01T00:00:00Z", {"a.example"},
              json::array({{{"hosts", {"a.example"}}, {"secretName", "old-tls"}}}))};
  CompileResult result = Compile(Objects(objects));
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  EXPECT_EQ(result.snapshot.certificates(0).name(), "erp/old-tls");
  EXPECT_NE(
      Status(result, "newer")
          ->Find(kAccepted)
          ->message.find("host a.example is served by UrlMapping erp/older (older), which sets the "
                         "certificate; Secret erp/new-tls is not used there"),
      std::string::npos)
      << Status(result, "newer")->Find(kAccepted)->message;
  // The same bytes whatever the insertion order.
  std::reverse(objects.begin(), objects.end());
  EXPECT_EQ(Compile(Objects(objects)).snapshot.version(), result.snapshot.version());
}

// A newer mapping cannot put its certificate in front of a host an older
// mapping serves, even when the older one names no certificate (another
// namespace's mapping claiming a host is not enough to take its TLS).
TEST_F(TlsSecretsTest, OnlyTheMappingThatServesAHostSetsItsCertificate) {
  Pair other = Load("other");
  json older =
      Mapping("older", "2026-01-01T00:00:00Z", {"a.example", "*.wild.example"}, json::array());
  // y.wild.example has no virtual host of its own: the older mapping's
  // *.wild.example serves it. n.example is the newer mapping's own.
  json newer = Mapping(
      "newer", "2026-02-01T00:00:00Z", {"a.example", "*.wild.example", "n.example"},
      json::array(
          {{{"hosts", {"a.example", "y.wild.example", "n.example"}}, {"secretName", "new-tls"}}}));
  newer["metadata"]["namespace"] = "evil";
  CompileResult result =
      Compile(Objects({older, newer, Secret("evil", "new-tls", other.cert, other.key)}));
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  EXPECT_EQ(std::vector<std::string>(result.snapshot.certificates(0).hosts().begin(),
                                     result.snapshot.certificates(0).hosts().end()),
            (std::vector<std::string>{"n.example"}));
  std::string message = Status(result, "newer")->Find(kAccepted)->message;
  EXPECT_NE(message.find("hosts a.example, y.wild.example are served by UrlMapping erp/older"),
            std::string::npos)
      << message;
}

TEST_F(TlsSecretsTest, TwoMappingsSharingOneSecretGiveOneCertificate) {
  Pair a = Load("a");
  CompileResult result = Compile(
      Objects({Secret("erp", "erp-tls", a.cert, a.key),
               Mapping("one", "2026-01-01T00:00:00Z", {"a.example"},
                       json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}})),
               Mapping("two", "2026-01-02T00:00:00Z", {"x.b.example"},
                       json::array({{{"hosts", {"x.b.example"}}, {"secretName", "erp-tls"}}}))}));
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  EXPECT_EQ(result.snapshot.certificates(0).hosts_size(), 2);
  EXPECT_TRUE(CheckSnapshot(result.snapshot).empty());
}

// Bytes around the PEM blocks (openssl pkcs12's "Bag Attributes", Latin-1
// comments) would make the snapshot's string fields invalid UTF-8: only the
// blocks, as OpenSSL writes them, go into the snapshot.
TEST_F(TlsSecretsTest, OnlyThePemBlocksReachTheSnapshot) {
  Pair a = Load("a");
  const std::string junk = "Bag Attributes\n    friendlyName: caf\xe9 \xff\xfe\n";
  CompileResult result = Compile(
      Objects({Secret("erp", "erp-tls", junk + a.cert + junk, junk + a.key),
               Mapping("erp", "2026-01-01T00:00:00Z", {"a.example"},
                       json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}))}));
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  EXPECT_EQ(result.snapshot.certificates(0).cert_pem(), a.cert);
  EXPECT_EQ(result.snapshot.certificates(0).key_pem(), a.key);
  EXPECT_NE(SnapshotToJson(result.snapshot).find("erp/erp-tls"), std::string::npos);
}

TEST_F(TlsSecretsTest, SnapshotJsonNeverHoldsThePrivateKey) {
  Pair a = Load("a");
  CompileResult result = Compile(
      Objects({Secret("erp", "erp-tls", a.cert, a.key),
               Mapping("erp", "2026-01-01T00:00:00Z", {"a.example"},
                       json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}))}));
  ASSERT_EQ(result.snapshot.certificates_size(), 1);
  std::string rendered = SnapshotToJson(result.snapshot);
  // The key's base64 body, line by line, is nowhere in the output.
  std::string body = a.key.substr(a.key.find('\n') + 1, 40);
  EXPECT_EQ(rendered.find(body), std::string::npos);
  EXPECT_EQ(rendered.find("PRIVATE KEY"), std::string::npos);
  EXPECT_NE(rendered.find(std::string(kRedactedPrivateKey)), std::string::npos);
  EXPECT_NE(SnapshotToJsonWithPrivateKeys(result.snapshot).find("PRIVATE KEY"), std::string::npos);
  // The redacted copy leaves the snapshot itself alone.
  EXPECT_EQ(result.snapshot.certificates(0).key_pem(), a.key);
}

// The memo keeps key-pair verdicts by content: the same output as the plain
// compile, expiry still judged at each compile's now, a changed Secret
// checked anew.
TEST_F(TlsSecretsTest, MemoCompileCachesVerdictsAndGivesTheSameOutput) {
  Pair a = Load("a");
  Pair other = Load("other");
  const std::int64_t not_after = NotAfter(a.cert);
  json mapping = Mapping("erp", "2026-01-01T00:00:00Z", {"a.example"},
                         json::array({{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}));
  model::ObjectSet objects =
      Objects({Secret("erp", "erp-tls", a.cert, a.key), mapping}, not_after - 10);
  CompileMemo memo;
  CompileResult first = Compile(objects, memo);
  CompileResult second = Compile(objects, memo);
  CompileResult plain = Compile(objects);
  EXPECT_EQ(first.snapshot.version(), plain.snapshot.version());
  EXPECT_EQ(second.snapshot.version(), plain.snapshot.version());
  ASSERT_EQ(second.snapshot.certificates_size(), 1);
  objects.set_now_unix_seconds(not_after + 1);
  EXPECT_EQ(Compile(objects, memo).snapshot.certificates_size(), 0);
  objects.set_now_unix_seconds(not_after - 10);
  model::DecodeResult mismatched = model::DecodeObject(Secret("erp", "erp-tls", a.cert, other.key));
  ASSERT_TRUE(mismatched.ok());
  objects.Upsert(std::move(*mismatched.object));
  memo.Changed({"Secret", "erp", "erp-tls"});
  CompileResult changed = Compile(objects, memo);
  EXPECT_EQ(changed.snapshot.certificates_size(), 0);
  EXPECT_EQ(Status(changed, "erp")->Find(kResolvedRefs)->reason, "InvalidCertificate");
}

TEST(HostCoversTest, OneLabelInFrontOfTheSuffix) {
  using internal::HostCovers;
  EXPECT_TRUE(HostCovers("a.example", "a.example"));
  EXPECT_TRUE(HostCovers("*.example", "a.example"));
  EXPECT_TRUE(HostCovers("*.example", "*.example"));
  EXPECT_FALSE(HostCovers("*.example", "example"));
  EXPECT_FALSE(HostCovers("*.example", "a.b.example"));
  EXPECT_FALSE(HostCovers("*.example", "*.a.example"));
  EXPECT_FALSE(HostCovers("a.example", "*.example"));
  EXPECT_FALSE(HostCovers("*.example", ".example"));
}

}  // namespace
}  // namespace kwd::compile
