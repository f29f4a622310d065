// Kubernetes Events (events.k8s.io/v1) and the affinity-key Secret, against
// the fake API server (tests/fake_apiserver), which checks an Event's required
// fields like the real API does.
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "controller/kube/event_recorder.h"
#include "controller/kube/kube_client.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;

json Events(kube::KubeClient& client, const std::string& ns) {
  return client.Get("/apis/events.k8s.io/v1/namespaces/" + ns + "/events").body["items"];
}

TEST(EventRecorderTest, PostsEventsShapedLikeTheRealApiAndDeduplicates) {
  FakeApiServer fake;
  kube::KubeClient client(fake.Config());
  kube::EventRecorderOptions options;
  options.reporting_instance = "kwd-controller-0_abc123";
  kube::EventRecorder recorder(client, options);
  kube::EventObjectRef ref{"dispatch.kwd.io/v1alpha1", "LogonGroup", "erp", "public", "uid-1"};
  recorder.Record(ref, "Warning", "InvalidStrategy", "Validate",
                  "Accepted=False: spec.strategy: \"fastest\"");
  recorder.Record(ref, "Warning", "InvalidStrategy", "Validate",
                  "Accepted=False: spec.strategy: \"fastest\"");  // the same: dropped
  recorder.Record(ref, "Warning", "InvalidStrategy", "Validate", std::string(3000, 'x'));
  recorder.Flush();
  json items = Events(client, "erp");
  ASSERT_EQ(items.size(), 2u) << items.dump();
  const json& event = items[0];
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["reason"], "InvalidStrategy");
  EXPECT_EQ(event["action"], "Validate");
  EXPECT_EQ(event["reportingController"], "dispatch.kwd.io/kwd-controller");
  EXPECT_EQ(event["reportingInstance"], "kwd-controller-0_abc123");
  EXPECT_EQ(event["regarding"], json({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
                                      {"kind", "LogonGroup"},
                                      {"namespace", "erp"},
                                      {"name", "public"},
                                      {"uid", "uid-1"}}));
  EXPECT_TRUE(std::regex_match(event["eventTime"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << event["eventTime"];
  EXPECT_EQ(event["metadata"]["name"].get<std::string>().rfind("public.", 0), 0u);
  EXPECT_EQ(items[1]["note"].get<std::string>().size(), 1024u);  // the API's limit
}

TEST(EventRecorderTest, ARefusedEventIsDroppedNotFatal) {
  FakeApiServer fake;
  kube::KubeClient client(fake.Config());
  kube::EventRecorder recorder(client, {});  // no reporting instance: the API refuses (422)
  recorder.Record({"v1", "Pod", "erp", "p", ""}, "Normal", "Test", "Test", "note");
  recorder.Flush();
  EXPECT_EQ(Events(client, "erp").size(), 0u);
}

class ControllerAgainstFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakeApiServer>();
    client_ = std::make_unique<kube::KubeClient>(fake_->Config());
    dir_ = fs::temp_directory_path() /
           ("kwd-events-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    kubeconfig_ = (dir_ / "kubeconfig").string();
    std::ofstream(kubeconfig_)
        << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {server: '"
        << fake_->address() << "'}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: c\n"
        << "  context: {cluster: fake, user: u, namespace: default}\ncurrent-context: c\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<kube::KubeClient> client_;
  fs::path dir_;
  std::string kubeconfig_;
};

json LogonGroup(const std::string& name, const std::string& strategy) {
  json server = {{"name", "s1"}, {"address", "127.0.0.1"}, {"port", 8000}};
  json spec = {{"kind", "abap"}, {"strategy", strategy}};
  spec["backend"]["staticServers"] = json::array({server});
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}}},
          {"spec", spec}};
}

// The controller (leader) records a Warning Event for a rejected LogonGroup,
// a Normal one when it is accepted again, and its leadership changes.
TEST_F(ControllerAgainstFakeTest, RejectedObjectsAndLeadershipBecomeEvents) {
  fake_->Upsert(LogonGroup("broken", "fastest"));
  fake_->Upsert(LogonGroup("good", "weighted_round_robin"));
  testing::Process controller(
      {testing::BinaryPath("kwd-controller"), "serve", "--source=kube", "--kubeconfig", kubeconfig_,
       "--admin-listen", "127.0.0.1:" + std::to_string(testing::ReserveFreePort()), "--grpc-listen",
       "127.0.0.1:0", "--hold-off", "5ms", "--leader-elect", "--leader-election-namespace", "kwd",
       "--leader-election-identity", "replica-a"},
      (dir_ / "controller.log").string());
  ASSERT_TRUE(controller.started()) << controller.Log();
  auto find = [&](const std::string& ns, const std::string& reason) -> json {
    for (const json& event : Events(*client_, ns)) {
      if (event.value("reason", "") == reason) {
        return event;
      }
    }
    return nullptr;
  };
  ASSERT_TRUE(testing::WaitFor([&] { return !find("erp", "InvalidStrategy").is_null(); },
                               std::chrono::seconds(15)))
      << controller.Log();
  json warning = find("erp", "InvalidStrategy");
  EXPECT_EQ(warning["type"], "Warning");
  EXPECT_EQ(warning["regarding"]["kind"], "LogonGroup");
  EXPECT_EQ(warning["regarding"]["name"], "broken");
  EXPECT_FALSE(warning["regarding"].value("uid", "").empty());
  EXPECT_NE(warning["note"].get<std::string>().find("fastest"), std::string::npos);
  EXPECT_EQ(warning["reportingInstance"], "replica-a");
  // Nothing for the accepted one.
  for (const json& event : Events(*client_, "erp")) {
    EXPECT_NE(event["regarding"]["name"], "good") << event.dump();
  }
  ASSERT_TRUE(testing::WaitFor([&] { return !find("kwd", "LeaderElected").is_null(); }));
  EXPECT_EQ(find("kwd", "LeaderElected")["regarding"]["kind"], "Lease");
  // Fixed: accepted again.
  json fixed = LogonGroup("broken", "weighted_round_robin");
  json current =
      client_->Get("/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups/broken").body;
  fixed["status"] = current["status"];
  fake_->Upsert(fixed);
  EXPECT_TRUE(testing::WaitFor([&] {
    json event = find("erp", "Accepted");
    return !event.is_null() && event["type"] == "Normal";
  })) << Events(*client_, "erp").dump();
  // Stopping gives up the lease: recorded too.
  EXPECT_EQ(controller.Stop(), 0);
  EXPECT_FALSE(find("kwd", "LeadershipLost").is_null()) << Events(*client_, "kwd").dump();
}

// Runs the built kwd-controller with `args`; its output (both streams) goes to `out`.
int RunController(const std::string& args, std::string* out) {
  std::string command = testing::BinaryPath("kwd-controller") + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[1024];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    out->append(buffer, n);
  }
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// `kwd-controller ensure-affinity-key` (the chart's hook Job) creates the
// Secret once and never changes it.
TEST_F(ControllerAgainstFakeTest, EnsureAffinityKeyCreatesTheSecretOnce) {
  auto run = [&](std::string* out) {
    return RunController(
        "ensure-affinity-key --namespace kwd --secret wd-kwd-affinity-key "
        "--key affinity.key --kubeconfig " +
            kubeconfig_,
        out);
  };
  std::string out;
  ASSERT_EQ(run(&out), 0) << out;
  EXPECT_NE(out.find("created"), std::string::npos) << out;
  std::string path = "/api/v1/namespaces/kwd/secrets/wd-kwd-affinity-key";
  json secret = client_->Get(path).body;
  std::string key = secret["data"]["affinity.key"];
  EXPECT_GE(key.size(), 40u);  // base64 of 43 characters of Base64url (32 random bytes)
  out.clear();
  ASSERT_EQ(run(&out), 0) << out;
  EXPECT_NE(out.find("kept"), std::string::npos) << out;
  EXPECT_EQ(client_->Get(path).body["data"]["affinity.key"], key);
  // A Secret without the key is not changed: an error naming it.
  fake_->Upsert({{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "wd-kwd-affinity-key"}, {"namespace", "kwd"}}},
                 {"data", {{"other", "eA=="}}}});
  out.clear();
  EXPECT_EQ(run(&out), 1) << out;
  EXPECT_NE(out.find("exists without key affinity.key"), std::string::npos) << out;
}

std::string Unbase64(const std::string& text) {
  std::string out(text.size(), '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  size_t padding = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  out.resize(n < 0 ? 0 : static_cast<size_t>(n) - padding);
  return out;
}

// A certificate from PEM, freed with X509_free.
std::shared_ptr<X509> Cert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return std::shared_ptr<X509>(cert, X509_free);
}

// Issue 27 item 4: two controllers with different classes on one API server
// each program only their own LogonGroups (snapshot, status, Lease); an
// object whose className changes moves from one to the other; an object
// without className belongs to neither.
TEST_F(ControllerAgainstFakeTest, TwoClassesEachProgramOnlyTheirOwnObjects) {
  auto group = [](const std::string& name, const std::string& class_name) {
    json object = LogonGroup(name, "weighted_round_robin");
    if (!class_name.empty()) {
      object["spec"]["className"] = class_name;
    }
    return object;
  };
  fake_->Upsert(group("alpha-group", "alpha"));
  fake_->Upsert(group("beta-group", "beta"));
  fake_->Upsert(group("classless", ""));
  auto start = [&](const std::string& class_name) {
    return std::make_unique<testing::Process>(
        std::vector<std::string>{
            testing::BinaryPath("kwd-controller"), "serve", "--source=kube", "--kubeconfig",
            kubeconfig_, "--class", class_name, "--admin-listen",
            "127.0.0.1:" + std::to_string(testing::ReserveFreePort()), "--grpc-listen",
            "127.0.0.1:0", "--hold-off", "5ms", "--leader-elect", "--leader-election-namespace",
            "kwd", "--leader-election-identity", "replica-" + class_name},
        (dir_ / (class_name + ".log")).string());
  };
  auto alpha = start("alpha");
  auto beta = start("beta");
  ASSERT_TRUE(alpha->started()) << alpha->Log();
  ASSERT_TRUE(beta->started()) << beta->Log();
  auto groups_of = [](testing::Process& controller) {
    std::vector<std::string> names;
    testing::HttpReply reply = testing::HttpGet(controller.port(), "/debug/snapshot");
    json snapshot = json::parse(reply.body, nullptr, false);
    if (snapshot.is_object() && snapshot.contains("groups")) {
      for (const json& g : snapshot["groups"]) {
        names.push_back(g.value("key", ""));
      }
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  auto status_of = [&](const std::string& name) {
    return client_->Get("/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups/" + name)
        .body.value("status", json());
  };
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return groups_of(*alpha) == std::vector<std::string>{"erp/alpha-group"} &&
               groups_of(*beta) == std::vector<std::string>{"erp/beta-group"};
      },
      std::chrono::seconds(15)))
      << "alpha: " << json(groups_of(*alpha)).dump() << " beta: " << json(groups_of(*beta)).dump()
      << "\n"
      << alpha->Log() << beta->Log();
  // Each class elects its own leader, which writes its own objects' status.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return status_of("alpha-group").contains("conditions") &&
               status_of("beta-group").contains("conditions");
      },
      std::chrono::seconds(15)))
      << alpha->Log() << beta->Log();
  json alpha_lease = client_->Get(kube::LeasesPath("kwd") + "/kwd-controller-alpha").body;
  json beta_lease = client_->Get(kube::LeasesPath("kwd") + "/kwd-controller-beta").body;
  EXPECT_EQ(alpha_lease["spec"]["holderIdentity"], "replica-alpha");
  EXPECT_EQ(beta_lease["spec"]["holderIdentity"], "replica-beta");
  EXPECT_TRUE(status_of("classless").is_null()) << "no controller of its class: untouched";
  EXPECT_TRUE(Events(*client_, "erp").empty() ||
              std::none_of(Events(*client_, "erp").begin(), Events(*client_, "erp").end(),
                           [](const json& e) { return e["regarding"]["name"] == "classless"; }));

  // beta-group moves to class alpha: alpha programs it, beta drops it.
  fake_->Upsert(group("beta-group", "alpha"));
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return groups_of(*alpha) == std::vector<std::string>{"erp/alpha-group", "erp/beta-group"} &&
               groups_of(*beta).empty();
      },
      std::chrono::seconds(15)))
      << "alpha: " << json(groups_of(*alpha)).dump() << " beta: " << json(groups_of(*beta)).dump();
  EXPECT_EQ(alpha->Stop(), 0);
  EXPECT_EQ(beta->Stop(), 0);
}

// Issue 27: a Deployment scaled to 0 leaves its EndpointSlice with
// "endpoints": null and "ports": null (the fake's scale-to-zero does what the
// EndpointSlice controller does). The LogonGroup says NoEndpoints, not
// PortNotFound, and comes back when the pods do.
TEST_F(ControllerAgainstFakeTest, ScaledToZeroServiceIsNoEndpoints) {
  json lg = {
      {"apiVersion", "dispatch.kwd.io/v1alpha1"},
      {"kind", "LogonGroup"},
      {"metadata", {{"name", "public"}, {"namespace", "erp"}}},
      {"spec",
       {{"kind", "abap"}, {"backend", {{"service", {{"name", "erp-java"}, {"port", "http"}}}}}}}};
  json slice = {{"apiVersion", "discovery.k8s.io/v1"},
                {"kind", "EndpointSlice"},
                {"metadata",
                 {{"name", "erp-java-x7k2p"},
                  {"namespace", "erp"},
                  {"labels", {{"kubernetes.io/service-name", "erp-java"}}}}},
                {"addressType", "IPv4"},
                {"endpoints",
                 json::array({{{"addresses", {"127.0.0.1"}}, {"conditions", {{"ready", true}}}}})},
                {"ports", json::array({{{"name", "http"}, {"port", 8000}}})}};
  fake_->Upsert(lg);
  fake_->Upsert(slice);
  testing::Process controller(
      {testing::BinaryPath("kwd-controller"), "serve", "--source=kube", "--kubeconfig", kubeconfig_,
       "--admin-listen", "127.0.0.1:" + std::to_string(testing::ReserveFreePort()), "--grpc-listen",
       "127.0.0.1:0", "--hold-off", "5ms", "--leader-elect", "--leader-election-namespace", "kwd"},
      (dir_ / "controller.log").string());
  ASSERT_TRUE(controller.started()) << controller.Log();
  auto resolved = [&]() -> json {
    json object =
        client_->Get("/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups/public").body;
    json status = object.is_object() ? object.value("status", json::object()) : json::object();
    for (const json& condition : status.value("conditions", json::array())) {
      if (condition.value("type", "") == "ResolvedRefs") {
        return condition;
      }
    }
    return json::object();
  };
  ASSERT_TRUE(testing::WaitFor([&] { return resolved().value("status", "") == "True"; },
                               std::chrono::seconds(15)))
      << resolved().dump() << controller.Log();
  fake_->Control("scale-to-zero", {{"namespace", "erp"}, {"service", "erp-java"}});
  ASSERT_TRUE(testing::WaitFor([&] { return resolved().value("status", "") == "False"; },
                               std::chrono::seconds(15)))
      << resolved().dump() << controller.Log();
  EXPECT_EQ(resolved()["reason"], "NoEndpoints") << resolved().dump();
  EXPECT_NE(resolved()["message"].get<std::string>().find("scaled to 0"), std::string::npos);
  fake_->Upsert(slice);  // scaled up again
  EXPECT_TRUE(testing::WaitFor([&] { return resolved().value("status", "") == "True"; },
                               std::chrono::seconds(15)))
      << resolved().dump();
  EXPECT_EQ(controller.Stop(), 0);
}

TEST_F(ControllerAgainstFakeTest, ClassNameMustBeADnsLabel) {
  std::string out;
  for (const char* bad : {"Alpha", "-a", "a_b", "a/b"}) {
    out.clear();
    EXPECT_EQ(RunController(std::string("serve --source=kube --class '") + bad + "'", &out), 2)
        << bad << ": " << out;
    EXPECT_NE(out.find("--class"), std::string::npos) << out;
  }
}

// `kwd-controller ensure-grpc-certs` (the chart's hook Job and CronJob):
// makes the CA and both certificates once, keeps them on the next runs,
// renews a leaf that expires soon with the same CA, and makes a controller
// certificate anew when the Service's names change.
TEST_F(ControllerAgainstFakeTest, EnsureGrpcCertsMakesKeepsAndRenews) {
  const std::string base =
      "ensure-grpc-certs --namespace kwd --ca-secret wd-grpc-ca --controller-secret "
      "wd-grpc-controller --proxy-secret wd-grpc-proxy --dns-name wd-kwd-controller.kwd.svc "
      "--kubeconfig " +
      kubeconfig_;
  auto secret = [&](const std::string& name) {
    return client_->Get("/api/v1/namespaces/kwd/secrets/" + name).body;
  };
  auto data = [&](const std::string& name, const std::string& key) {
    return Unbase64(secret(name)["data"][key].get<std::string>());
  };
  std::string out;
  ASSERT_EQ(RunController(base + " --validity 2h --renew-before 1h", &out), 0) << out;
  EXPECT_NE(out.find("wd-grpc-ca: new CA (missing)"), std::string::npos) << out;
  EXPECT_NE(out.find("wd-grpc-controller: new certificate (missing)"), std::string::npos) << out;
  EXPECT_EQ(secret("wd-grpc-controller")["type"], "kubernetes.io/tls");
  auto ca = Cert(data("wd-grpc-ca", "tls.crt"));
  auto server = Cert(data("wd-grpc-controller", "tls.crt"));
  auto client = Cert(data("wd-grpc-proxy", "tls.crt"));
  ASSERT_TRUE(ca && server && client);
  EVP_PKEY* ca_key = X509_get0_pubkey(ca.get());
  EXPECT_EQ(X509_verify(server.get(), ca_key), 1);
  EXPECT_EQ(X509_verify(client.get(), ca_key), 1);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);
  EXPECT_EQ(X509_check_ca(server.get()), 0);
  const std::string host = "wd-kwd-controller.kwd.svc";
  EXPECT_EQ(X509_check_host(server.get(), host.data(), host.size(), 0, nullptr), 1);
  EXPECT_EQ(X509_check_purpose(server.get(), X509_PURPOSE_SSL_SERVER, 0), 1);
  EXPECT_EQ(X509_check_purpose(client.get(), X509_PURPOSE_SSL_CLIENT, 0), 1);
  EXPECT_NE(X509_check_purpose(client.get(), X509_PURPOSE_SSL_SERVER, 0), 1);
  EXPECT_EQ(data("wd-grpc-controller", "ca.crt"), data("wd-grpc-ca", "tls.crt"));
  EXPECT_EQ(data("wd-grpc-proxy", "ca.crt"), data("wd-grpc-ca", "tls.crt"));
  EXPECT_TRUE(secret("wd-grpc-controller")["data"].contains("tls.key"));
  EXPECT_EQ(out.find("PRIVATE KEY"), std::string::npos) << "no key in the output";

  // Again: everything kept, nothing written.
  std::string versions =
      secret("wd-grpc-ca")["metadata"]["resourceVersion"].get<std::string>() +
      secret("wd-grpc-controller")["metadata"]["resourceVersion"].get<std::string>() +
      secret("wd-grpc-proxy")["metadata"]["resourceVersion"].get<std::string>();
  out.clear();
  ASSERT_EQ(RunController(base + " --validity 2h --renew-before 1h", &out), 0) << out;
  EXPECT_NE(out.find("wd-grpc-ca: CA kept"), std::string::npos) << out;
  EXPECT_NE(out.find("wd-grpc-proxy: certificate kept"), std::string::npos) << out;
  EXPECT_EQ(secret("wd-grpc-ca")["metadata"]["resourceVersion"].get<std::string>() +
                secret("wd-grpc-controller")["metadata"]["resourceVersion"].get<std::string>() +
                secret("wd-grpc-proxy")["metadata"]["resourceVersion"].get<std::string>(),
            versions);

  // The leaves expire within 3h: renewed, with the same CA.
  std::string old_server_pem = data("wd-grpc-controller", "tls.crt");
  out.clear();
  ASSERT_EQ(RunController(base + " --validity 4h --renew-before 3h", &out), 0) << out;
  EXPECT_NE(out.find("wd-grpc-controller: new certificate (expires within --renew-before)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("wd-grpc-ca: CA kept"), std::string::npos) << out;
  EXPECT_NE(data("wd-grpc-controller", "tls.crt"), old_server_pem);
  auto renewed = Cert(data("wd-grpc-controller", "tls.crt"));
  EXPECT_EQ(X509_verify(renewed.get(), ca_key), 1) << "signed by the same CA";

  // A new Service name: the controller certificate is made anew, the proxy's kept.
  out.clear();
  ASSERT_EQ(RunController(base + " --validity 4h --renew-before 3h --dns-name "
                                 "wd-kwd-controller.kwd.svc.cluster.local",
                          &out),
            0)
      << out;
  EXPECT_NE(out.find("wd-grpc-controller: new certificate (does not name every --dns-name)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("wd-grpc-proxy: certificate kept"), std::string::npos) << out;

  // A broken Secret is replaced, not trusted.
  fake_->Upsert({{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "wd-grpc-proxy"}, {"namespace", "kwd"}}},
                 {"data", {{"tls.crt", "bm90IGEgY2VydA=="}}}});
  out.clear();
  ASSERT_EQ(RunController(base, &out), 0) << out;
  EXPECT_NE(out.find("wd-grpc-proxy: new certificate (unreadable or incomplete)"),
            std::string::npos)
      << out;
  EXPECT_EQ(X509_verify(Cert(data("wd-grpc-proxy", "tls.crt")).get(), ca_key), 1);
}

// A CA near its expiry is replaced; both leaves are made anew with the new
// CA, and ca.crt trusts the new CA and, while it is valid, the old one (peers
// that have not reloaded yet still present certificates of the old CA).
TEST_F(ControllerAgainstFakeTest, EnsureGrpcCertsReplacesAnExpiringCaAndTrustsBoth) {
  const std::string base =
      "ensure-grpc-certs --namespace kwd --ca-secret ca --controller-secret ctl "
      "--proxy-secret px --dns-name ctl.kwd.svc --kubeconfig " +
      kubeconfig_;
  auto data = [&](const std::string& name, const std::string& key) {
    return Unbase64(client_->Get("/api/v1/namespaces/kwd/secrets/" + name)
                        .body["data"][key]
                        .get<std::string>());
  };
  std::string out;
  ASSERT_EQ(RunController(base + " --ca-validity 2h --validity 90m --renew-before 1h", &out), 0)
      << out;
  std::string old_ca = data("ca", "tls.crt");
  out.clear();
  ASSERT_EQ(RunController(base + " --ca-validity 5h --validity 4h --renew-before 3h", &out), 0)
      << out;
  EXPECT_NE(out.find("ca: new CA (expires within --renew-before)"), std::string::npos) << out;
  EXPECT_NE(out.find("ctl: new certificate (not signed by the CA)"), std::string::npos) << out;
  std::string new_ca = data("ca", "tls.crt");
  EXPECT_NE(new_ca, old_ca);
  EXPECT_EQ(data("ctl", "ca.crt"), new_ca + old_ca);
  EXPECT_EQ(data("px", "ca.crt"), new_ca + old_ca);
  EXPECT_EQ(X509_verify(Cert(data("px", "tls.crt")).get(), X509_get0_pubkey(Cert(new_ca).get())),
            1);
}

TEST_F(ControllerAgainstFakeTest, EnsureGrpcCertsRefusesBadFlags) {
  std::string out;
  EXPECT_EQ(RunController("ensure-grpc-certs --namespace kwd --ca-secret a --controller-secret b "
                          "--proxy-secret c --kubeconfig " +
                              kubeconfig_,
                          &out),
            2)
      << out;
  EXPECT_NE(out.find("--dns-name"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunController("ensure-grpc-certs --namespace kwd --ca-secret a --controller-secret b "
                          "--proxy-secret c --dns-name x --validity 2h --renew-before 3h",
                          &out),
            2)
      << out;
  EXPECT_NE(out.find("--renew-before must be shorter"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunController("ensure-grpc-certs --validity 10", &out), 2) << out;
  // A name that would smuggle another subjectAltName entry in.
  out.clear();
  EXPECT_EQ(RunController("ensure-grpc-certs --namespace kwd --ca-secret a --controller-secret b "
                          "--proxy-secret c --dns-name 'x.svc,IP:10.0.0.1'",
                          &out),
            2)
      << out;
  EXPECT_NE(out.find("--dns-name: a DNS name"), std::string::npos) << out;
}

// Long names: the common name is cut to X.509's 64 characters, the
// subjectAltName keeps the whole DNS name.
TEST_F(ControllerAgainstFakeTest, EnsureGrpcCertsTakesLongNames) {
  std::string long_name(60, 'a');
  std::string dns = long_name + ".some-namespace-with-a-long-name.svc.cluster.local";
  std::string out;
  ASSERT_EQ(
      RunController("ensure-grpc-certs --namespace kwd --ca-secret " + long_name +
                        "-ca --controller-secret " + long_name + "-controller --proxy-secret " +
                        long_name + "-proxy --dns-name " + dns + " --kubeconfig " + kubeconfig_,
                    &out),
      0)
      << out;
  std::string pem =
      Unbase64(client_->Get("/api/v1/namespaces/kwd/secrets/" + long_name + "-controller")
                   .body["data"]["tls.crt"]
                   .get<std::string>());
  auto cert = Cert(pem);
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_host(cert.get(), dns.data(), dns.size(), 0, nullptr), 1);
}

}  // namespace
}  // namespace kwd
