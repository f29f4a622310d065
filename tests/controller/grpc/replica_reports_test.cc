#include "controller/grpc/replica_reports.h"

#include <gtest/gtest.h>

#include <memory>

#include "common/snapshot_io.h"
#include "controller/kube/kube_client.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"

namespace kwd::snapshot_server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kNamespace[] = "kwd-system";

class FakeClock : public kube::Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override { return now; }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
};

// A snapshot compiled from generation 1 of LogonGroup erp/public.
std::shared_ptr<const compile::CompileResult> Result() {
  auto result = std::make_shared<compile::CompileResult>();
  auto* group = result->snapshot.add_groups();
  group->set_key("erp/public");
  group->set_kind(v1::KIND_ABAP);
  auto* source = result->snapshot.add_sources();
  source->set_kind("LogonGroup");
  source->set_namespace_("erp");
  source->set_name("public");
  source->set_generation(1);
  StampSnapshotVersion(&result->snapshot);
  return result;
}

compile::ObjectStatus PublicGroup() {
  compile::ObjectStatus status;
  status.kind = "LogonGroup";
  status.namespace_ = "erp";
  status.name = "public";
  status.generation = 1;
  return status;
}

class ReplicaReportsTest : public ::testing::Test {
 protected:
  ReplicaReportsTest() : client_(api_.Config()) {
    SnapshotServerOptions options;
    options.listen = "127.0.0.1:0";
    server_ = std::make_unique<SnapshotServer>(options, nullptr);
    std::string error;
    EXPECT_TRUE(server_->Start(&error)) << error;
    result_ = Result();
    server_->Publish(result_);
  }

  // Another replica's report, as its ReplicaReports writes it.
  void WriteOtherReport(const std::string& identity, const std::vector<ProxyVersions>& proxies) {
    std::string name = ReplicaReports::LeaseName(identity);
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata",
                   {{"name", name},
                    {"namespace", kNamespace},
                    {"labels", {{std::string(kProxyReportLabel), "true"}}},
                    {"annotations",
                     {{std::string(kProxiesAnnotation), ReplicaReports::EncodeProxies(proxies)}}}}},
                  {"spec", {{"holderIdentity", identity}, {"leaseDurationSeconds", 15}}}};
    kube::ApiResult existing = client_.GetLease(kNamespace, name);
    kube::ApiResult written;
    if (existing.status.ok()) {
      lease["metadata"]["resourceVersion"] = existing.body["metadata"]["resourceVersion"];
      written = client_.UpdateLease(kNamespace, name, lease);
    } else {
      written = client_.CreateLease(kNamespace, lease);
    }
    ASSERT_TRUE(written.status.ok()) << written.status.ToString();
  }

  ReplicaReports MakeReports(std::string identity) {
    ReplicaReportsOptions options;
    options.lease_namespace = kNamespace;
    options.identity = std::move(identity);
    options.expiry = seconds(15);
    return ReplicaReports(client_, *server_, options, clock_);
  }

  testing::FakeApiServer api_;
  kube::KubeClient client_;
  std::unique_ptr<SnapshotServer> server_;
  std::shared_ptr<const compile::CompileResult> result_;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
};

TEST(ReplicaReportsCodec, RoundTripsAndRejectsOtherText) {
  std::vector<ProxyVersions> proxies = {{"proxy-a", "v2", "", ""},
                                        {"proxy-b", "v1", "v2", "group \"x\" rejected"}};
  auto decoded = ReplicaReports::DecodeProxies(ReplicaReports::EncodeProxies(proxies));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, proxies);
  EXPECT_EQ(ReplicaReports::DecodeProxies("[]")->size(), 0u);
  for (const char* bad : {"", "{}", "[1]", "[{\"node\":\"a\"}]", "[{\"node\":1,\"acked\":\"\","
                                                                 "\"nacked\":\"\",\"message\":\"\"}]",
                          "not json"}) {
    EXPECT_FALSE(ReplicaReports::DecodeProxies(bad).has_value()) << bad;
  }
}

TEST(ReplicaReportsCodec, LeaseNamesAreDnsLabels) {
  EXPECT_EQ(ReplicaReports::LeaseName("kwd-controller-5d8f9-x2x7q"),
            "kwd-controller-proxies-kwd-controller-5d8f9-x2x7q");
  EXPECT_EQ(ReplicaReports::LeaseName("Host.Example_00ab12"),
            "kwd-controller-proxies-host-example-00ab12");
  EXPECT_EQ(ReplicaReports::LeaseName(std::string(100, 'a')).size(), 23u + 63u);
  EXPECT_EQ(ReplicaReports::LeaseName("__"), "kwd-controller-proxies-unnamed");
}

// The leader counts a follower's proxies: Programmed follows what they run
// and reject, and forgets them once their replica stops renewing its report.
TEST_F(ReplicaReportsTest, OtherReplicasProxiesCountForProgrammed) {
  ReplicaReports reports = MakeReports("leader");
  const std::string version = result_->snapshot.version();
  reports.Sync();
  EXPECT_EQ(server_->ProgrammedFor(PublicGroup()).reason, kReasonNoProxies);

  WriteOtherReport("follower", {{"proxy-f1", version, "", ""}});
  reports.Sync();
  compile::Condition programmed = server_->ProgrammedFor(PublicGroup());
  EXPECT_EQ(programmed.status, "True");
  EXPECT_EQ(programmed.message, "1 of 1 connected proxies run generation 1");

  WriteOtherReport("follower", {{"proxy-f1", version, "", ""},
                                {"proxy-f2", "", version, "group erp/public rejected"}});
  reports.Sync();
  programmed = server_->ProgrammedFor(PublicGroup());
  EXPECT_EQ(programmed.status, "False");
  EXPECT_EQ(programmed.reason, kReasonRejected);
  EXPECT_NE(programmed.message.find("proxy proxy-f2 rejected the snapshot: group erp/public "
                                    "rejected (1 of 2 connected proxies"),
            std::string::npos)
      << programmed.message;

  // The follower stops renewing: its report counts until the expiry, then not.
  clock_->now += seconds(14);
  reports.Sync();
  EXPECT_EQ(server_->ProgrammedFor(PublicGroup()).reason, kReasonRejected);
  clock_->now += seconds(2);
  reports.Sync();
  EXPECT_EQ(server_->ProgrammedFor(PublicGroup()).reason, kReasonNoProxies);
  // Renewed again (a new resourceVersion): counted again.
  WriteOtherReport("follower", {{"proxy-f1", version, "", ""}});
  reports.Sync();
  EXPECT_EQ(server_->ProgrammedFor(PublicGroup()).status, "True");
  // Long dead: the stale report is deleted.
  clock_->now += seconds(61);
  reports.Sync();
  EXPECT_TRUE(client_.GetLease(kNamespace, ReplicaReports::LeaseName("follower"))
                  .status.IsNotFound());
}

TEST_F(ReplicaReportsTest, WritesItsOwnReportRenewsItAndWithdrawsIt) {
  ReplicaReports reports = MakeReports("replica-a");
  const std::string name = ReplicaReports::LeaseName("replica-a");
  reports.Sync();
  kube::ApiResult lease = client_.GetLease(kNamespace, name);
  ASSERT_TRUE(lease.status.ok()) << lease.status.ToString();
  EXPECT_EQ(lease.body["metadata"]["labels"][std::string(kProxyReportLabel)], "true");
  EXPECT_EQ(lease.body["metadata"]["annotations"][std::string(kProxiesAnnotation)], "[]");
  EXPECT_EQ(lease.body["spec"]["holderIdentity"], "replica-a");
  EXPECT_EQ(lease.body["spec"]["leaseDurationSeconds"], 15);
  std::string first_version = lease.body["metadata"]["resourceVersion"];

  reports.Sync();  // renewed: the resourceVersion moves even with nothing new
  lease = client_.GetLease(kNamespace, name);
  EXPECT_NE(lease.body["metadata"]["resourceVersion"], first_version);

  // Its own report never counts as another replica's.
  EXPECT_EQ(server_->ProgrammedFor(PublicGroup()).reason, kReasonNoProxies);

  // A new ReplicaReports for the same pod (a restarted container) takes the
  // existing Lease over instead of failing on AlreadyExists.
  ReplicaReports again = MakeReports("replica-a");
  again.Sync();
  kube::ApiResult taken = client_.GetLease(kNamespace, name);
  EXPECT_NE(taken.body["metadata"]["resourceVersion"], lease.body["metadata"]["resourceVersion"]);

  again.Withdraw();
  EXPECT_TRUE(client_.GetLease(kNamespace, name).status.IsNotFound());
}

}  // namespace
}  // namespace kwd::snapshot_server
