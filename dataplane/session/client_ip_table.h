#pragma once

// Client-IP affinity for TLS passthrough (SAP: wdisp/ssl_cli_affinity): the
// server a masked client address (IPv4: `ipv4_mask`, IPv6: the first
// `ipv6_prefix_length` bits) was last sent to. One table per LogonGroup,
// shared by every worker (a connection from the same client may land on any
// worker) and kept across snapshot swaps by SessionRegistry. Bounded (the
// least recently used entry is evicted when full) and expiring (an entry not
// used within the idle timeout is gone). Connections are rare next to
// requests, so one mutex per table is enough.

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kwd::session {

struct ClientIpTableOptions {
  uint32_t ipv4_mask = 0xFFFFF000;  // 255.255.240.0
  uint32_t ipv6_prefix_length = 64;
  size_t max_entries = 50000;
  int64_t idle_timeout_ms = 3600 * 1000;
};

class ClientIpTable {
 public:
  explicit ClientIpTable(ClientIpTableOptions options) : options_(options) {}
  ClientIpTable(const ClientIpTable&) = delete;
  ClientIpTable& operator=(const ClientIpTable&) = delete;

  // The server recorded for the masked `client_address`, refreshing it;
  // "" when none (unknown, expired, or not an address).
  std::string Lookup(std::string_view client_address, int64_t now_ms);
  void Record(std::string_view client_address, std::string_view server, int64_t now_ms);
  void Erase(std::string_view client_address);
  void Reconfigure(const ClientIpTableOptions& options);
  size_t size() const;
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

  using Key = std::array<uint8_t, 16>;
  // The masked key of an address; false when it is not a numeric address.
  bool MakeKey(std::string_view client_address, Key* key) const;

 private:
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Entry {
    Key key;
    std::string server;
    int64_t last_used_ms = 0;
  };
  void EvictLocked(int64_t now_ms);

  mutable std::mutex mu_;
  ClientIpTableOptions options_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace kwd::session
