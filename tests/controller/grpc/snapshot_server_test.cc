#include "controller/grpc/snapshot_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/snapshot_io.h"
#include "dataplane/xds/snapshot_client.h"
#include "kwd/v1/discovery.grpc.pb.h"

namespace kwd::snapshot_server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Waits for server-side state through the server's change callback.
class ServerWatch {
 public:
  explicit ServerWatch(SnapshotServer& server) : server_(server) {
    server_.SetOnProxiesChanged([this] {
      std::lock_guard lock(mu_);
      ++changes_;
      changed_.notify_all();
    });
  }
  ~ServerWatch() { server_.SetOnProxiesChanged(nullptr); }

  bool Until(const std::function<bool()>& condition, milliseconds timeout = seconds(10)) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] {
      lock.unlock();
      bool holds = condition();
      lock.lock();
      return holds;
    });
  }

 private:
  SnapshotServer& server_;
  std::mutex mu_;
  std::condition_variable changed_;
  uint64_t changes_ = 0;
};

std::shared_ptr<const compile::CompileResult> Result(int capacity, int64_t generation) {
  auto result = std::make_shared<compile::CompileResult>();
  auto* group = result->snapshot.add_groups();
  group->set_key("erp/public");
  group->set_kind(v1::KIND_ABAP);
  auto* server = group->add_servers();
  server->set_name("erp0_ERP_00");
  server->set_address("127.0.0.1");
  server->set_port(3200);
  server->set_capacity(static_cast<uint32_t>(capacity));
  server->set_state(v1::SERVER_STATE_READY);
  auto* source = result->snapshot.add_sources();
  source->set_kind("LogonGroup");
  source->set_namespace_("erp");
  source->set_name("public");
  source->set_generation(generation);
  StampSnapshotVersion(&result->snapshot);
  compile::ObjectStatus status;
  status.kind = "LogonGroup";
  status.namespace_ = "erp";
  status.name = "public";
  status.generation = generation;
  result->statuses.push_back(status);
  return result;
}

std::unique_ptr<SnapshotServer> StartServer(MetricsRegistry* metrics, int port = 0,
                                            milliseconds ack_timeout = seconds(30)) {
  SnapshotServerOptions options;
  options.listen = "127.0.0.1:" + std::to_string(port);
  options.ack_timeout = ack_timeout;
  auto server = std::make_unique<SnapshotServer>(options, metrics);
  std::string error;
  EXPECT_TRUE(server->Start(&error)) << error;
  return server;
}

// A proxy stand-in: the real client with an apply function that records.
struct FakeProxy {
  explicit FakeProxy(int port, std::string node, std::string reject_capacity = "",
                     bool deltas = true) {
    xds::SnapshotClientOptions options;
    options.accept_deltas = deltas;
    options.target = "127.0.0.1:" + std::to_string(port);
    options.node_id = std::move(node);
    options.backoff.initial = milliseconds(20);
    options.backoff.max = milliseconds(200);
    client = std::make_unique<xds::SnapshotClient>(
        options,
        [this, reject_capacity](const v1::Snapshot& snapshot, std::string* error) {
          if (!reject_capacity.empty() &&
              std::to_string(snapshot.groups(0).servers(0).capacity()) == reject_capacity) {
            *error = "capacity " + reject_capacity + " is not allowed here";
            return false;
          }
          applies.fetch_add(1);
          std::lock_guard lock(mu);
          last_applied = snapshot;
          return true;
        },
        nullptr);
    client->Start();
  }
  v1::Snapshot LastApplied() {
    std::lock_guard lock(mu);
    return last_applied;
  }
  std::atomic<int> applies{0};
  std::mutex mu;
  v1::Snapshot last_applied;
  std::unique_ptr<xds::SnapshotClient> client;
};

// A stream driven by hand, for exchanges the real client would not make.
struct RawStream {
  explicit RawStream(int port)
      : stub(v1::SnapshotDiscovery::NewStub(grpc::CreateChannel(
            "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()))),
        stream(stub->StreamSnapshots(&context)) {}
  ~RawStream() { context.TryCancel(); }

  // Sends the first request as `node` and reads the answer into `first`.
  bool Hello(const std::string& node, v1::SnapshotResponse* first) {
    v1::SnapshotRequest hello;
    hello.set_node_id(node);
    return stream->Write(hello) && stream->Read(first);
  }

  std::unique_ptr<v1::SnapshotDiscovery::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SnapshotRequest, v1::SnapshotResponse>> stream;
};

// A stream that reads responses as the bytes on the wire.
struct BytesStream {
  explicit BytesStream(int port, const std::string& node, const std::string& running = "")
      : channel(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                          grpc::InsecureChannelCredentials(), Args(node))) {
    // A test waiting for a response that never comes fails instead of hanging.
    context.set_deadline(std::chrono::system_clock::now() + seconds(120));
    stream.reset(grpc::internal::ClientReaderWriterFactory<v1::SnapshotRequest, grpc::ByteBuffer>::
                     Create(channel.get(),
                            grpc::internal::RpcMethod("/kwd.v1.SnapshotDiscovery/StreamSnapshots",
                                                      grpc::internal::RpcMethod::BIDI_STREAMING),
                            &context));
    request.set_node_id(node);
    request.set_version_info(running);
    EXPECT_TRUE(stream->Write(request));
  }
  ~BytesStream() { context.TryCancel(); }

  static grpc::ChannelArguments Args(const std::string& node) {
    grpc::ChannelArguments args;
    args.SetString("kwd.test.node", node);  // a connection of its own, as each proxy has
    args.SetMaxReceiveMessageSize(-1);       // as kwd-proxy: snapshots of any size
    return args;
  }
  // The next response's bytes, and `decoded` from them; "" when the stream ended.
  std::string Read(v1::SnapshotResponse* decoded) {
    grpc::ByteBuffer buffer;
    if (!stream->Read(&buffer)) {
      return "";
    }
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(buffer.Dump(&slices).ok());
    std::string bytes;
    for (const auto& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    EXPECT_TRUE(decoded->ParseFromString(bytes));
    return bytes;
  }
  bool Ack(const v1::SnapshotResponse& response) {
    request.set_version_info(response.version_info());
    request.set_response_nonce(response.nonce());
    return stream->Write(request);
  }

  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SnapshotRequest, grpc::ByteBuffer>> stream;
  v1::SnapshotRequest request;
};

ProxyStatus Only(const SnapshotServer& server) {
  auto proxies = server.Proxies();
  return proxies.size() == 1 ? proxies[0] : ProxyStatus{};
}

TEST(SnapshotServerTest, PushesEachNewVersionAndTracksAcks) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  FakeProxy proxy(server->port(), "proxy-a");
  ASSERT_TRUE(proxy.client->WaitForVersion(v1->snapshot.version(), seconds(10)));
  ASSERT_TRUE(
      watch.Until([&] { return Only(*server).versions.acked_version == v1->snapshot.version(); }));
  EXPECT_EQ(Only(*server).versions.node_id, "proxy-a");
  EXPECT_TRUE(proxy.client->connected());

  auto v2 = Result(2, 2);
  server->Publish(v2);
  ASSERT_TRUE(proxy.client->WaitForVersion(v2->snapshot.version(), seconds(10)));
  ASSERT_TRUE(
      watch.Until([&] { return Only(*server).versions.acked_version == v2->snapshot.version(); }));
  EXPECT_EQ(proxy.applies.load(), 2);
  EXPECT_EQ(metrics.GetCounter("kwd_controller_snapshot_acks_total", "").Value(), 2u);
  EXPECT_EQ(metrics.GetGauge("kwd_controller_connected_proxies", "").Value(), 1.0);
  EXPECT_EQ(metrics.GetHistogram("kwd_controller_snapshot_push_to_ack_seconds", "").Count(), 2u);

  // The same content again is not pushed.
  uint64_t pushes = metrics.GetCounter("kwd_controller_snapshot_pushes_total", "").Value();
  server->Publish(Result(2, 2));
  EXPECT_EQ(metrics.GetCounter("kwd_controller_snapshot_pushes_total", "").Value(), pushes);

  auto programmed = server->ProgrammedConditions();
  ASSERT_EQ(programmed.size(), 1u);
  EXPECT_EQ(programmed[0].condition.status, "True") << programmed[0].condition.message;
}

TEST(SnapshotServerTest, NackKeepsTheLastGoodVersionAndSetsProgrammedFalse) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto good = Result(1, 1);
  server->Publish(good);
  FakeProxy proxy(server->port(), "proxy-a", /*reject_capacity=*/"7");
  ASSERT_TRUE(proxy.client->WaitForVersion(good->snapshot.version(), seconds(10)));

  auto bad = Result(7, 2);
  server->Publish(bad);
  ASSERT_TRUE(watch.Until([&] { return !Only(*server).versions.nacked_version.empty(); }));
  ProxyStatus status = Only(*server);
  EXPECT_EQ(status.versions.nacked_version, bad->snapshot.version());
  EXPECT_EQ(status.versions.acked_version, good->snapshot.version());
  EXPECT_EQ(status.versions.nack_message, "capacity 7 is not allowed here");
  EXPECT_EQ(proxy.client->version(), good->snapshot.version());
  EXPECT_EQ(proxy.client->nacks(), 1u);
  EXPECT_EQ(metrics.GetCounter("kwd_controller_snapshot_nacks_total", "").Value(), 1u);
  auto programmed = server->ProgrammedConditions();
  ASSERT_EQ(programmed.size(), 1u);
  EXPECT_EQ(programmed[0].condition.status, "False");
  EXPECT_EQ(programmed[0].condition.reason, "Rejected");
  EXPECT_NE(programmed[0].condition.message.find("capacity 7 is not allowed"), std::string::npos);

  // A fixed configuration is accepted and clears the NACK.
  auto fixed = Result(3, 3);
  server->Publish(fixed);
  ASSERT_TRUE(proxy.client->WaitForVersion(fixed->snapshot.version(), seconds(10)));
  ASSERT_TRUE(watch.Until(
      [&] { return Only(*server).versions.acked_version == fixed->snapshot.version(); }));
  EXPECT_TRUE(Only(*server).versions.nacked_version.empty());
  EXPECT_EQ(server->ProgrammedConditions()[0].condition.status, "True");
}

TEST(SnapshotServerTest, StaleNonceIsIgnored) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  RawStream raw(server->port());
  auto& stream = raw.stream;
  v1::SnapshotRequest hello;
  hello.set_node_id("raw");
  ASSERT_TRUE(stream->Write(hello));
  v1::SnapshotResponse first;
  ASSERT_TRUE(stream->Read(&first));
  EXPECT_EQ(first.version_info(), v1->snapshot.version());
  ASSERT_TRUE(first.has_snapshot());

  auto v2 = Result(2, 2);
  server->Publish(v2);
  v1::SnapshotResponse second;
  ASSERT_TRUE(stream->Read(&second));
  EXPECT_NE(second.nonce(), first.nonce());

  // A NACK for the replaced response: stale, ignored.
  v1::SnapshotRequest stale;
  stale.set_node_id("raw");
  stale.set_response_nonce(first.nonce());
  stale.mutable_error_detail()->set_code(3);
  stale.mutable_error_detail()->set_message("too late");
  ASSERT_TRUE(stream->Write(stale));
  v1::SnapshotRequest ack;
  ack.set_node_id("raw");
  ack.set_version_info(v2->snapshot.version());
  ack.set_response_nonce(second.nonce());
  ASSERT_TRUE(stream->Write(ack));
  ASSERT_TRUE(
      watch.Until([&] { return Only(*server).versions.acked_version == v2->snapshot.version(); }));
  EXPECT_TRUE(Only(*server).versions.nacked_version.empty());
  EXPECT_EQ(metrics.GetCounter("kwd_controller_snapshot_nacks_total", "").Value(), 0u);
}

TEST(SnapshotServerTest, ProxyThatRunsTheCurrentVersionGetsNoSnapshot) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  RawStream raw(server->port());
  auto& stream = raw.stream;
  v1::SnapshotRequest hello;
  hello.set_node_id("resync");
  hello.set_version_info(v1->snapshot.version());
  ASSERT_TRUE(stream->Write(hello));
  v1::SnapshotResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.version_info(), v1->snapshot.version());
  EXPECT_FALSE(response.has_snapshot());
  EXPECT_FALSE(response.nonce().empty());
}

TEST(SnapshotServerTest, RevertBeforeTheAckArrivesSendsTheFullSnapshot) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  RawStream raw(server->port());
  auto& stream = raw.stream;
  v1::SnapshotRequest hello;
  hello.set_node_id("slow");
  ASSERT_TRUE(stream->Write(hello));
  v1::SnapshotResponse response;
  ASSERT_TRUE(stream->Read(&response));
  v1::SnapshotRequest ack;
  ack.set_node_id("slow");
  ack.set_version_info(v1->snapshot.version());
  ack.set_response_nonce(response.nonce());
  ASSERT_TRUE(stream->Write(ack));
  ASSERT_TRUE(
      watch.Until([&] { return Only(*server).versions.acked_version == v1->snapshot.version(); }));

  // v2 is pushed (the proxy applies it, its ACK still on the way), then the
  // change is reverted: the server's view "runs v1" is stale, so v1 must
  // come with its snapshot.
  server->Publish(Result(2, 2));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_snapshot());
  server->Publish(v1);
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.version_info(), v1->snapshot.version());
  EXPECT_TRUE(response.has_snapshot());
}

// Each version is serialized once and its bytes go to every stream: the
// bytes are the same on every stream, they are what the generated code
// would serialize for that response, and the snapshot in them is the
// compiled one. A proxy that connects later, running an older version, gets
// the current version's same bytes.
TEST(SnapshotServerTest, EveryStreamGetsTheSameBytesOfAVersionAndALateProxyTheCurrentOne) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  std::vector<std::unique_ptr<BytesStream>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<BytesStream>(server->port(), "p" + std::to_string(i)));
  }
  std::string last_bytes;
  auto read_all = [&](const std::shared_ptr<const compile::CompileResult>& expected) {
    std::vector<std::string> bytes;
    v1::SnapshotResponse response;
    for (auto& stream : streams) {
      bytes.push_back(stream->Read(&response));
      EXPECT_EQ(response.version_info(), expected->snapshot.version());
      EXPECT_EQ(response.snapshot().SerializeAsString(), expected->snapshot.SerializeAsString());
      EXPECT_FALSE(response.has_delta());
      EXPECT_FALSE(response.nonce().empty());
      EXPECT_EQ(bytes.back(), bytes.front());
    }
    // What the generated code serializes for this response, per stream.
    v1::SnapshotResponse whole;
    whole.set_version_info(expected->snapshot.version());
    whole.set_nonce(response.nonce());
    *whole.mutable_snapshot() = expected->snapshot;
    EXPECT_EQ(bytes.front(), whole.SerializeAsString());
    last_bytes = bytes.front();
    return response;
  };
  v1::SnapshotResponse first = read_all(v1);
  for (auto& stream : streams) {
    ASSERT_TRUE(stream->Ack(first));
  }
  ASSERT_TRUE(watch.Until([&] {
    auto proxies = server->Proxies();
    return proxies.size() == 3 &&
           std::all_of(proxies.begin(), proxies.end(), [&](const ProxyStatus& proxy) {
             return proxy.versions.acked_version == v1->snapshot.version();
           });
  }));

  // A new generation: whole, with a new nonce, the same bytes everywhere.
  auto v2 = Result(2, 2);
  server->Publish(v2);
  v1::SnapshotResponse second = read_all(v2);
  EXPECT_NE(second.nonce(), first.nonce());

  // One proxy goes away; v3 is published; it comes back running v1 and
  // gets v3, byte for byte what the others got.
  streams.erase(streams.begin());
  ASSERT_TRUE(watch.Until([&] { return server->Proxies().size() == 2; }));
  auto v3 = Result(3, 3);
  server->Publish(v3);
  v1::SnapshotResponse third = read_all(v3);
  streams.push_back(std::make_unique<BytesStream>(server->port(), "p0", v1->snapshot.version()));
  v1::SnapshotResponse again;
  std::string late = streams.back()->Read(&again);
  EXPECT_EQ(again.version_info(), v3->snapshot.version());
  EXPECT_EQ(again.nonce(), third.nonce());
  EXPECT_EQ(again.snapshot().SerializeAsString(), v3->snapshot.SerializeAsString());
  EXPECT_EQ(late, last_bytes);
  ASSERT_TRUE(streams.back()->Ack(again));
  ASSERT_TRUE(watch.Until([&] {
    auto proxies = server->Proxies();
    return std::any_of(proxies.begin(), proxies.end(), [&](const ProxyStatus& proxy) {
      return proxy.versions.node_id == "p0" &&
             proxy.versions.acked_version == v3->snapshot.version();
    });
  }));
}

// A proxy that stops reading (a stalled connection, a paused pod) holds up
// no one: the others get every version meanwhile. Its queue holds one
// update, the newest: once it reads again it gets the response that was in
// flight and then the newest version, not every version it missed.
// Result(capacity, 1) with `servers` more servers in its group: about 40
// bytes each serialized. Versions with other capacities differ only in a
// server list (deltas).
std::shared_ptr<const compile::CompileResult> BigResult(int capacity, int servers) {
  auto base = Result(capacity, 1);
  auto result = std::make_shared<compile::CompileResult>();
  result->snapshot = base->snapshot;
  result->statuses = base->statuses;
  auto* group = result->snapshot.mutable_groups(0);
  for (int s = 1; s <= servers; ++s) {
    auto* server = group->add_servers();
    server->set_name("erp" + std::to_string(s) + "_ERP_00");
    server->set_address("10." + std::to_string(s / 62'500) + "." +
                        std::to_string(s / 250 % 250) + "." + std::to_string(s % 250));
    server->set_port(3200);
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
  }
  StampSnapshotVersion(&result->snapshot);
  return result;
}

TEST(SnapshotServerTest, StalledStreamDelaysNoOneAndGetsOnlyTheNewestVersion) {
  constexpr int kVersions = 24;
  // About 1.6 MB each, 38 MB in all: far more than loopback's socket
  // buffers and gRPC's flow-control windows take in for a stream that does
  // not read (a few MB).
  auto make = [](int k) { return BigResult(k, 40'000); };
  std::vector<std::string> versions;  // by publication
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto publish = [&](int k) {
    auto result = make(k);
    versions.push_back(result->snapshot.version());
    server->Publish(std::move(result));
  };
  publish(1);
  BytesStream stalled(server->port(), "stalled");  // says hello, then reads nothing for now
  FakeProxy steady(server->port(), "steady");
  ASSERT_TRUE(steady.client->WaitForVersion(versions[0], seconds(20)));
  ASSERT_TRUE(watch.Until([&] { return server->Proxies().size() == 2; }));
  for (int k = 2; k <= kVersions; ++k) {
    publish(k);
    ASSERT_TRUE(steady.client->WaitForVersion(versions.back(), seconds(20)))
        << "version " << k << " did not reach the proxy that reads";
  }
  // The stalled one reads again: what gRPC had taken in, then the newest.
  std::vector<int> received;  // indexes into versions
  v1::SnapshotResponse response;
  while (received.size() < kVersions && !stalled.Read(&response).empty()) {
    auto it = std::find(versions.begin(), versions.end(), response.version_info());
    ASSERT_NE(it, versions.end()) << response.version_info();
    received.push_back(static_cast<int>(it - versions.begin()));
    ASSERT_TRUE(stalled.Ack(response));
    if (received.back() == kVersions - 1) {
      break;
    }
  }
  ASSERT_FALSE(received.empty());
  RecordProperty("versions_received", static_cast<int>(received.size()));
  EXPECT_EQ(received.back(), kVersions - 1);
  EXPECT_TRUE(std::is_sorted(received.begin(), received.end()));
  // Without the one-update queue it would be sent all 24.
  EXPECT_LE(received.size(), static_cast<size_t>(kVersions / 2))
      << "versions sent to the stalled stream: " << received.size();
  ASSERT_TRUE(watch.Until([&] {
    auto proxies = server->Proxies();
    return std::all_of(proxies.begin(), proxies.end(), [&](const ProxyStatus& proxy) {
      return proxy.versions.acked_version == versions.back();
    });
  }));
}

// A snapshot several times larger than what loopback's socket buffers and
// gRPC's flow-control windows take in for a stream that does not read: a
// first send to such a stream stays in flight (and holds its place).
constexpr int kHoldingServers = 400'000;  // about 16 MB

SnapshotServerOptions CappedOptions(int max_initial_sends, milliseconds initial_send_timeout) {
  SnapshotServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_initial_sends = max_initial_sends;
  options.initial_send_timeout = initial_send_timeout;
  return options;
}

// Reads whole responses until one of `version`, ACKing each; false if the
// stream ends first.
bool ReadUntil(BytesStream& stream, const std::string& version, v1::SnapshotResponse* response) {
  while (!stream.Read(response).empty()) {
    if (!stream.Ack(*response)) {
      return false;
    }
    if (response->version_info() == version) {
      return true;
    }
  }
  return false;
}

// A reconnect storm: with max_initial_sends first snapshots in flight, the
// next new streams wait, and an update to a connected proxy goes out without
// waiting behind them. A stream that goes while it waits leaves the queue;
// one that goes while its first snapshot is written gives its place to the
// next; every stream that waited gets the newest version, whole.
TEST(SnapshotServerTest, FirstSnapshotsWaitTheirTurnButUpdatesToConnectedProxiesDoNot) {
  MetricsRegistry metrics;
  // No place times out in this test.
  SnapshotServer server(CappedOptions(2, seconds(3600)), &metrics);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  ServerWatch watch(server);
  Gauge& waiting = metrics.GetGauge("kwd_controller_first_snapshots_waiting", "");
  auto v1 = BigResult(1, kHoldingServers);
  server.Publish(v1);
  FakeProxy steady(server.port(), "steady");
  ASSERT_TRUE(steady.client->WaitForVersion(v1->snapshot.version(), seconds(60)));

  // Two new streams that do not read hold both places...
  std::vector<std::unique_ptr<BytesStream>> holders;
  for (int i = 0; i < 2; ++i) {
    holders.push_back(std::make_unique<BytesStream>(server.port(), "holder" + std::to_string(i)));
  }
  ASSERT_TRUE(watch.Until([&] { return server.Proxies().size() == 3; }));
  // ...so three more wait, in the order they came.
  std::vector<std::unique_ptr<BytesStream>> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(std::make_unique<BytesStream>(server.port(), "waiter" + std::to_string(i)));
    ASSERT_TRUE(watch.Until([&] { return server.Proxies().size() == 4 + static_cast<size_t>(i); }));
  }
  ASSERT_TRUE(watch.Until([&] { return waiting.Value() == 3; })) << waiting.Value();

  // An endpoint change reaches the connected proxy while all three wait.
  auto v2 = BigResult(2, kHoldingServers);
  server.Publish(v2);
  ASSERT_TRUE(steady.client->WaitForVersion(v2->snapshot.version(), seconds(60)));
  EXPECT_EQ(waiting.Value(), 3);
  EXPECT_EQ(steady.LastApplied().SerializeAsString(), v2->snapshot.SerializeAsString());

  // A waiting stream goes: it leaves the queue, and takes no place.
  waiters[1].reset();
  ASSERT_TRUE(watch.Until([&] { return server.Proxies().size() == 5; }));
  EXPECT_EQ(waiting.Value(), 2);
  // A holder goes in the middle of its send: the first waiter gets its place.
  holders[0].reset();
  ASSERT_TRUE(watch.Until([&] { return server.Proxies().size() == 4; }));
  ASSERT_TRUE(watch.Until([&] { return waiting.Value() == 1; })) << waiting.Value();
  // It gets the newest version, whole (it runs none), not the one it
  // connected on.
  v1::SnapshotResponse response;
  ASSERT_FALSE(waiters[0]->Read(&response).empty());
  EXPECT_EQ(response.version_info(), v2->snapshot.version());
  EXPECT_FALSE(response.has_delta());
  EXPECT_EQ(response.snapshot().SerializeAsString(), v2->snapshot.SerializeAsString());
  ASSERT_TRUE(waiters[0]->Ack(response));
  // Its send done, the last waiter gets the place.
  ASSERT_TRUE(watch.Until([&] { return waiting.Value() == 0; })) << waiting.Value();
  ASSERT_TRUE(ReadUntil(*waiters[2], v2->snapshot.version(), &response));
  EXPECT_EQ(response.snapshot().SerializeAsString(), v2->snapshot.SerializeAsString());
  // The holder left reads at last: what was in flight, then the newest.
  ASSERT_TRUE(ReadUntil(*holders[1], v2->snapshot.version(), &response));
  ASSERT_TRUE(watch.Until([&] {
    auto proxies = server.Proxies();
    return proxies.size() == 4 &&
           std::all_of(proxies.begin(), proxies.end(), [&](const ProxyStatus& proxy) {
             return proxy.versions.acked_version == v2->snapshot.version() &&
                    !proxy.awaiting_reply;
           });
  }));
  EXPECT_EQ(server.ProgrammedConditions()[0].condition.status, "True");
}

// A new stream that never reads holds its place for initial_send_timeout
// only: the streams behind it still get their snapshot.
TEST(SnapshotServerTest, ReaderThatNeverReadsGivesUpItsPlace) {
  MetricsRegistry metrics;
  SnapshotServer server(CappedOptions(1, milliseconds(200)), &metrics);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  ServerWatch watch(server);
  Gauge& waiting = metrics.GetGauge("kwd_controller_first_snapshots_waiting", "");
  auto v1 = BigResult(1, kHoldingServers);
  server.Publish(v1);
  BytesStream never_reads(server.port(), "never-reads");
  ASSERT_TRUE(watch.Until([&] { return server.Proxies().size() == 1; }));
  std::vector<std::unique_ptr<BytesStream>> behind;
  for (int i = 0; i < 3; ++i) {
    behind.push_back(std::make_unique<BytesStream>(server.port(), "behind" + std::to_string(i)));
  }
  ASSERT_TRUE(watch.Until([&] { return server.Proxies().size() == 4; }));
  // The first send to never_reads cannot complete (see the test above): each
  // stream behind it gets its place when the one before times out or is done.
  v1::SnapshotResponse response;
  for (auto& stream : behind) {
    ASSERT_TRUE(ReadUntil(*stream, v1->snapshot.version(), &response));
  }
  EXPECT_EQ(waiting.Value(), 0);
  // Their ACKs are counted; never_reads still has not answered.
  ASSERT_TRUE(watch.Until([&] {
    auto proxies = server.Proxies();
    return proxies.size() == 4 &&
           std::count_if(proxies.begin(), proxies.end(), [&](const ProxyStatus& proxy) {
             return proxy.versions.acked_version == v1->snapshot.version();
           }) == 3;
  }));
}

// Many proxies at once with room for two first snapshots at a time, and a
// new version while they connect: every one ends on the newest version.
TEST(SnapshotServerTest, ManyNewProxiesAtOnceAllEndOnTheNewestVersion) {
  MetricsRegistry metrics;
  SnapshotServer server(CappedOptions(2, seconds(3600)), &metrics);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  ServerWatch watch(server);
  auto v1 = BigResult(1, 20'000);
  server.Publish(v1);
  std::vector<std::unique_ptr<FakeProxy>> proxies;
  for (int i = 0; i < 40; ++i) {
    proxies.push_back(std::make_unique<FakeProxy>(server.port(), "proxy" + std::to_string(i)));
    if (i == 20) {
      server.Publish(BigResult(2, 20'000));
    }
  }
  auto v3 = BigResult(3, 20'000);
  server.Publish(v3);
  for (auto& proxy : proxies) {
    ASSERT_TRUE(proxy->client->WaitForVersion(v3->snapshot.version(), seconds(60)));
  }
  ASSERT_TRUE(watch.Until([&] {
    auto connected = server.Proxies();
    return connected.size() == proxies.size() &&
           std::all_of(connected.begin(), connected.end(), [&](const ProxyStatus& proxy) {
             return proxy.versions.acked_version == v3->snapshot.version();
           });
  }));
  EXPECT_EQ(metrics.GetGauge("kwd_controller_first_snapshots_waiting", "").Value(), 0);
}

TEST(SnapshotServerTest, EndpointOnlyChangeGoesOutAsADeltaToProxiesThatTakeDeltas) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  FakeProxy with_deltas(server->port(), "deltas");
  FakeProxy whole_only(server->port(), "whole", "", /*deltas=*/false);
  ASSERT_TRUE(with_deltas.client->WaitForVersion(v1->snapshot.version(), seconds(10)));
  ASSERT_TRUE(whole_only.client->WaitForVersion(v1->snapshot.version(), seconds(10)));
  Counter& deltas = metrics.GetCounter("kwd_controller_snapshot_delta_pushes_total", "");
  EXPECT_EQ(deltas.Value(), 0u);

  // Same generation, another capacity: only a server list changed.
  auto v2 = Result(2, 1);
  server->Publish(v2);
  ASSERT_TRUE(with_deltas.client->WaitForVersion(v2->snapshot.version(), seconds(10)));
  ASSERT_TRUE(whole_only.client->WaitForVersion(v2->snapshot.version(), seconds(10)));
  EXPECT_EQ(deltas.Value(), 1u);
  // Both applied the same whole snapshot, whichever way it travelled.
  EXPECT_EQ(with_deltas.LastApplied().SerializeAsString(), v2->snapshot.SerializeAsString());
  EXPECT_EQ(whole_only.LastApplied().SerializeAsString(), v2->snapshot.SerializeAsString());

  // A new generation changes the sources: not endpoint-only, sent whole.
  auto v3 = Result(3, 2);
  server->Publish(v3);
  ASSERT_TRUE(with_deltas.client->WaitForVersion(v3->snapshot.version(), seconds(10)));
  EXPECT_EQ(deltas.Value(), 1u);
  EXPECT_EQ(with_deltas.LastApplied().SerializeAsString(), v3->snapshot.SerializeAsString());
  ASSERT_TRUE(watch.Until([&] {
    auto proxies = server->Proxies();
    return proxies.size() == 2 && proxies[0].versions.acked_version == v3->snapshot.version() &&
           proxies[1].versions.acked_version == v3->snapshot.version();
  }));
  EXPECT_EQ(metrics.GetCounter("kwd_controller_snapshot_nacks_total", "").Value(), 0u);
}

// A proxy that cannot apply a delta (it runs another version) NACKs it; the
// controller answers once with the whole snapshot, and never again with a
// delta on a base the proxy does not run.
TEST(SnapshotServerTest, NackedDeltaIsAnsweredOnceWithTheWholeSnapshot) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto v1 = Result(1, 1);
  server->Publish(v1);
  RawStream raw(server->port());
  auto& stream = raw.stream;
  v1::SnapshotRequest request;
  request.set_node_id("raw");
  request.set_version_info(v1->snapshot.version());
  request.set_accepts_deltas(true);
  ASSERT_TRUE(stream->Write(request));
  v1::SnapshotResponse response;
  ASSERT_TRUE(stream->Read(&response));  // "you are current"
  ASSERT_FALSE(response.has_snapshot());
  request.set_accepts_deltas(false);
  request.set_response_nonce(response.nonce());
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(watch.Until([&] { return !Only(*server).awaiting_reply; }));

  auto v2 = Result(2, 1);
  server->Publish(v2);
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_delta());
  EXPECT_FALSE(response.has_snapshot());
  EXPECT_EQ(response.version_info(), v2->snapshot.version());
  EXPECT_EQ(response.delta().base_version(), v1->snapshot.version());
  ASSERT_EQ(response.delta().groups_size(), 1);
  EXPECT_EQ(response.delta().groups(0).servers(0).capacity(), 2u);

  // NACK it as a proxy that lost its base would.
  request.set_response_nonce(response.nonce());
  request.mutable_error_detail()->set_code(9);
  request.mutable_error_detail()->set_message("delta applies to another version");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.version_info(), v2->snapshot.version());
  ASSERT_TRUE(response.has_snapshot());
  EXPECT_FALSE(response.has_delta());
  EXPECT_EQ(response.snapshot().SerializeAsString(), v2->snapshot.SerializeAsString());

  // NACK the whole snapshot too: nothing more is pushed for v2 ...
  request.set_response_nonce(response.nonce());
  request.mutable_error_detail()->set_code(3);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(watch.Until([&] {
    auto proxy = Only(*server);
    return !proxy.awaiting_reply && proxy.versions.nacked_version == v2->snapshot.version();
  }));
  // ... so the next response is v3, and whole: the proxy still runs v1, not
  // the v2 that v3's delta is based on.
  auto v3 = Result(3, 1);
  server->Publish(v3);
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.version_info(), v3->snapshot.version());
  EXPECT_TRUE(response.has_snapshot());
  EXPECT_FALSE(response.has_delta());
  EXPECT_EQ(metrics.GetCounter("kwd_controller_snapshot_delta_pushes_total", "").Value(), 1u);
}

TEST(SnapshotServerTest, ProxyKeepsItsSnapshotAcrossAControllerRestartAndResyncs) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  const int port = server->port();
  auto v1 = Result(1, 1);
  server->Publish(v1);
  FakeProxy proxy(port, "proxy-a");
  ASSERT_TRUE(proxy.client->WaitForVersion(v1->snapshot.version(), seconds(10)));
  server->Stop();
  server.reset();
  ASSERT_TRUE(proxy.client->WaitForConnected(false, seconds(10)));
  EXPECT_EQ(proxy.client->version(), v1->snapshot.version());

  // Restarted with the same content: the proxy reconnects and is current
  // without applying again; then a change reaches it.
  MetricsRegistry metrics2;
  auto restarted = StartServer(&metrics2, port);
  ServerWatch restarted_watch(*restarted);
  restarted->Publish(Result(1, 1));
  ASSERT_TRUE(proxy.client->WaitForConnected(true, seconds(10)));
  ASSERT_TRUE(restarted_watch.Until(
      [&] { return Only(*restarted).versions.acked_version == v1->snapshot.version(); }));
  EXPECT_EQ(proxy.applies.load(), 1);
  auto v2 = Result(2, 2);
  restarted->Publish(v2);
  ASSERT_TRUE(proxy.client->WaitForVersion(v2->snapshot.version(), seconds(10)));
  EXPECT_EQ(proxy.applies.load(), 2);
}

TEST(SnapshotServerTest, DisconnectedProxiesLeaveTheCount) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  server->Publish(Result(1, 1));
  {
    FakeProxy a(server->port(), "a");
    FakeProxy b(server->port(), "b");
    ASSERT_TRUE(watch.Until([&] { return server->Proxies().size() == 2; }));
    EXPECT_EQ(metrics.GetGauge("kwd_controller_connected_proxies", "").Value(), 2.0);
  }
  ASSERT_TRUE(watch.Until([&] { return server->Proxies().empty(); }));
  EXPECT_EQ(metrics.GetGauge("kwd_controller_connected_proxies", "").Value(), 0.0);
  EXPECT_EQ(server->ProgrammedConditions()[0].condition.reason, "NoProxies");
}

bool Printable(std::string_view text) {
  return std::none_of(text.begin(), text.end(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
  });
}

// Issue 23 item 7: a fake proxy's NACK text was copied unbounded into every
// object's Programmed condition (40,119 bytes measured; the CRDs allow
// 32,768, so the API server refused the whole status patch).
TEST(SnapshotServerTest, HostileNackTextIsBoundedAndPrintable) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics);
  ServerWatch watch(*server);
  auto good = Result(1, 1);
  server->Publish(good);
  RawStream raw(server->port());
  v1::SnapshotResponse response;
  // (protobuf itself refuses strings that are not UTF-8)
  ASSERT_TRUE(raw.Hello(
      "proxy-a\n\x1b[31mlevel=error msg=forged\xe2\x80\xae" + std::string(500, 'n'), &response));
  v1::SnapshotRequest nack;
  nack.set_response_nonce(response.nonce());
  nack.mutable_error_detail()->set_message(std::string("\r\n\x00\x7f", 4) + std::string(40'000, 'x'));
  ASSERT_TRUE(raw.stream->Write(nack));
  ASSERT_TRUE(watch.Until([&] { return !Only(*server).versions.nacked_version.empty(); }));
  ProxyStatus status = Only(*server);
  EXPECT_LE(status.versions.node_id.size(), kMaxNodeIdBytes);
  EXPECT_TRUE(Printable(status.versions.node_id)) << status.versions.node_id;
  EXPECT_TRUE(status.versions.node_id.starts_with("proxy-a\\n\\x1b[31m")) << status.versions.node_id;
  EXPECT_LE(status.versions.nack_message.size(), kMaxNackMessageBytes);
  EXPECT_TRUE(status.versions.nack_message.starts_with("\\r\\n\\x00\\x7fx"))
      << status.versions.nack_message.substr(0, 40);
  EXPECT_TRUE(status.versions.nack_message.ends_with("xxx...")) ;
  auto programmed = server->ProgrammedConditions();
  ASSERT_EQ(programmed.size(), 1u);
  EXPECT_EQ(programmed[0].condition.reason, "Rejected");
  EXPECT_LE(programmed[0].condition.message.size(), kMaxProgrammedMessageBytes);
  EXPECT_TRUE(Printable(programmed[0].condition.message));
}

TEST(PrintableTextTest, EscapesAndCutsOnCharacterBoundaries) {
  EXPECT_EQ(PrintableText("plain", 100), "plain");
  EXPECT_EQ(PrintableText("a\nb\x01", 100), "a\\nb\\x01");
  EXPECT_EQ(PrintableText("caf\xc3\xa9", 100), "caf\xc3\xa9");    // UTF-8 kept
  EXPECT_EQ(PrintableText("bad\xc3(", 100), "bad\\xc3(");         // not UTF-8
  // Right-to-left override, isolate, line separator, C1 NEL: shown, not obeyed.
  EXPECT_EQ(PrintableText("a\xe2\x80\xae" "b\xe2\x81\xa6" "c\xe2\x80\xa8" "d\xc2\x85", 100),
            "a\\u202eb\\u2066c\\u2028d\\u0085");
  EXPECT_EQ(PrintableText("abcdefghij", 10), "abcdefghij");         // exactly fits
  EXPECT_EQ(PrintableText("abcdefghijk", 10), "abcdefg...");
  EXPECT_EQ(PrintableText("abcdef\xc3\xa9zzz", 9), "abcdef...");   // never half a character
  EXPECT_EQ(PrintableText("a\nbcdefgh", 5), "a...");
  EXPECT_EQ(PrintableText(std::string(10, '\n'), 2), "");
  // Idempotent: printable text passes unchanged.
  std::string once = PrintableText("x\x1b\xff", 100);
  EXPECT_EQ(PrintableText(once, 100), once);
}

// Issue 23 item 7: a client that never ACKs held every object at
// Programmed=False Pending. After --proxy-ack-timeout it is listed and
// counted as unresponsive, but no longer holds Programmed.
TEST(SnapshotServerTest, SilentClientDoesNotHoldProgrammedForever) {
  MetricsRegistry metrics;
  auto server = StartServer(&metrics, 0, milliseconds(300));
  ServerWatch watch(*server);
  auto good = Result(1, 1);
  server->Publish(good);
  FakeProxy proxy(server->port(), "proxy-a");
  ASSERT_TRUE(proxy.client->WaitForVersion(good->snapshot.version(), seconds(10)));
  RawStream silent(server->port());
  v1::SnapshotResponse response;
  ASSERT_TRUE(silent.Hello("silent", &response));  // ... and never answered
  ASSERT_TRUE(watch.Until([&] { return server->Proxies().size() == 2; }));
  // After the timeout, without anything else happening, it stops counting.
  ASSERT_TRUE(watch.Until(
      [&] { return server->ProgrammedConditions()[0].condition.status == "True"; }, seconds(10)));
  auto programmed = server->ProgrammedConditions();
  EXPECT_EQ(programmed[0].condition.reason, "Programmed");
  EXPECT_NE(programmed[0].condition.message.find(
                "1 of 1 connected proxies run generation 1; 1 more proxy does not answer"),
            std::string::npos)
      << programmed[0].condition.message;
  EXPECT_EQ(metrics.GetGauge("kwd_controller_unresponsive_proxies", "").Value(), 1.0);
  bool listed = false;
  for (const ProxyStatus& proxy_status : server->Proxies()) {
    if (proxy_status.versions.node_id == "silent") {
      listed = true;
      EXPECT_TRUE(proxy_status.versions.unresponsive);
      EXPECT_TRUE(proxy_status.awaiting_reply);
    }
  }
  EXPECT_TRUE(listed);

  // It answers: counted again.
  v1::SnapshotRequest ack;
  ack.set_node_id("silent");
  ack.set_version_info(response.version_info());
  ack.set_response_nonce(response.nonce());
  ASSERT_TRUE(silent.stream->Write(ack));
  ASSERT_TRUE(watch.Until([&] {
    return server->ProgrammedConditions()[0].condition.message.find("2 of 2") != std::string::npos;
  }));
  ASSERT_TRUE(watch.Until(
      [&] { return metrics.GetGauge("kwd_controller_unresponsive_proxies", "").Value() == 0.0; }));

  // The only proxy silent: no proxy answers, Programmed False NoProxies.
  proxy.client.reset();
  auto next = Result(2, 2);
  server->Publish(next);
  ASSERT_TRUE(watch.Until(
      [&] { return server->ProgrammedConditions()[0].condition.reason == "NoProxies"; }, seconds(10)))
      << server->ProgrammedConditions()[0].condition.message;
}

TEST(SnapshotServerTest, SecondServerOnTheSameAddressFailsToStart) {
  auto server = StartServer(nullptr);
  SnapshotServerOptions options;
  options.listen = "127.0.0.1:" + std::to_string(server->port());
  SnapshotServer second(options, nullptr);
  std::string error;
  EXPECT_FALSE(second.Start(&error));
  EXPECT_NE(error.find("cannot serve"), std::string::npos);
}

}  // namespace
}  // namespace kwd::snapshot_server
