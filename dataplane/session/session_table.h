#pragma once

// The session table of identifiers that do not name their server
// (JSESSIONID learned from Set-Cookie, sap-ext-sid recorded when first
// balanced): SAP's shared-memory session ID table (wdisp/HTTP/
// max_session_tab_entries, context_timeout). One table per LogonGroup; it
// outlives routing-table swaps (SessionRegistry hands the same table to the
// next RoutingTable for the same group key).
//
// Entries have two origins: JSESSIONID values are learned from a backend's
// Set-Cookie (the backend made the session), sap-ext-sid values are created
// by clients (any value is recorded when first balanced). Client-created
// entries get a budget inside max_entries (client_share_percent) and make
// room only by evicting each other, so a client sending many distinct
// sap-ext-sid values never pushes out a backend's session; when the table is
// full of backend sessions a new sap-ext-sid is not recorded (`refused`).
// Backend entries evict the least recently used entry of either origin.
//
// Bounded (least recently used entry evicted when full), expiring (idle
// timeout, checked on lookup and while inserting), sharded (a mutex per shard,
// no global lock; the shard is chosen by the key hash). Lookups of existing
// keys never allocate. Time is passed in by the caller (injected clock).

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dataplane/session/client_ip_table.h"

namespace kwd::session {

enum class TableKey : uint8_t { kJSessionId = 0, kSapExtSid = 1 };

struct SessionTableOptions {
  size_t max_entries = 50000;
  int64_t idle_timeout_ms = 3600 * 1000;
  size_t shards = 16;  // rounded up to a power of two
  // Client-created entries (sap-ext-sid) may hold at most this share of
  // max_entries, and make room only by evicting each other.
  size_t client_share_percent = 50;
};

struct SessionTableStats {
  size_t entries = 0;
  uint64_t inserts = 0;
  uint64_t evictions = 0;  // removed to make room
  uint64_t expirations = 0;
  size_t client_entries = 0;  // of `entries`, created by clients (sap-ext-sid)
  uint64_t refused = 0;       // client ids not recorded: the rest is backend sessions
};

class SessionTable {
 public:
  explicit SessionTable(SessionTableOptions options);
  ~SessionTable();
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // Copies the server name into `server_out` (capacity `server_capacity`) and
  // returns its length, refreshing the entry's idle time; returns -1 when the
  // key is unknown or expired.
  int Lookup(TableKey kind, std::string_view session_id, int64_t now_ms, char* server_out,
             size_t server_capacity);
  // Like Lookup, but changes nothing: the entry keeps its idle time and LRU
  // place, and an expired entry is missed without being removed. For
  // explaining a decision on the live tables (admin port).
  int Peek(TableKey kind, std::string_view session_id, int64_t now_ms, char* server_out,
           size_t server_capacity) const;
  // Inserts or overwrites.
  void Record(TableKey kind, std::string_view session_id, std::string_view server, int64_t now_ms);
  void Erase(TableKey kind, std::string_view session_id);
  // Applies new limits (entries beyond a smaller max are evicted lazily).
  void Reconfigure(SessionTableOptions options);

  SessionTableStats Stats() const;

 private:
  struct Shard;
  // Lookup (`use`: refresh the idle time and LRU place, drop an expired entry)
  // and Peek (`!use`: change nothing). Shards are mutable under their lock.
  int Find(TableKey kind, std::string_view session_id, int64_t now_ms, char* server_out,
           size_t server_capacity, bool use) const;
  // The shards, made by the first Record: a group whose requests never
  // record a session (most ABAP groups: sap-contextid names its server)
  // holds none; 100 groups' 16 shards each were 280 KiB of an idle proxy.
  // Null until then: lookups miss.
  Shard* EnsureShards();
  std::atomic<Shard*> shards_{nullptr};
  size_t shard_mask_ = 0;
  // Per-shard limits derived from the options.
  std::atomic<size_t> max_per_shard_{0};
  std::atomic<size_t> max_client_per_shard_{0};
  std::atomic<int64_t> idle_timeout_ms_{0};
};

// Keeps one SessionTable per group key across snapshot swaps. Thread-safe;
// called when a routing table is built, never per request.
class SessionRegistry {
 public:
  std::shared_ptr<SessionTable> TableFor(const std::string& group_key,
                                         const SessionTableOptions& options);
  // The group's client-IP affinity table (TLS passthrough), kept likewise.
  std::shared_ptr<ClientIpTable> ClientIpTableFor(const std::string& group_key,
                                                  const ClientIpTableOptions& options);
  // Drops the tables of groups that are not in `live_group_keys` (sorted).
  void Retain(const std::vector<std::string>& live_group_keys);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<SessionTable>> tables_;
  std::unordered_map<std::string, std::shared_ptr<ClientIpTable>> client_ip_tables_;
};

}  // namespace kwd::session
