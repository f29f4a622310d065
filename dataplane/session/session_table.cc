#include "dataplane/session/session_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <new>
#include <unordered_set>

#include "common/string_hash.h"

namespace kwd::session {
namespace {

// Longer identifiers are not recorded: real JSESSIONID/sap-ext-sid values are
// well below this, and the cap bounds what one client can make us store.
constexpr size_t kMaxSessionIdLength = 1024;
constexpr size_t kMaxServerLength = 255;

struct LookupKey {
  TableKey kind;
  std::string_view id;
  size_t hash;  // HashKey(kind, id), computed once: it also picks the shard
};

size_t HashKey(TableKey kind, std::string_view id) {
  // The kind seeds the hash so a JSESSIONID and an sap-ext-sid with the same
  // text land in different slots. HashString reads words, std::hash bytes.
  return static_cast<size_t>(HashString(id, static_cast<uint64_t>(kind) + 1));
}

// One allocation per session: the header followed by the id and server
// bytes. The LRU links are intrusive so reordering never allocates.
struct Entry {
  Entry* lru_prev = nullptr;
  Entry* lru_next = nullptr;
  int64_t last_used_ms = 0;
  uint16_t id_length = 0;
  uint8_t server_length = 0;
  TableKey kind = TableKey::kJSessionId;

  char* Bytes() { return reinterpret_cast<char*>(this + 1); }
  const char* Bytes() const { return reinterpret_cast<const char*>(this + 1); }
  std::string_view Id() const { return {Bytes(), id_length}; }
  std::string_view Server() const { return {Bytes() + id_length, server_length}; }

  static Entry* Create(TableKey kind, std::string_view id, std::string_view server,
                       int64_t now_ms) {
    void* memory = ::operator new(sizeof(Entry) + id.size() + server.size());
    Entry* entry = new (memory) Entry();
    entry->kind = kind;
    entry->last_used_ms = now_ms;
    entry->id_length = static_cast<uint16_t>(id.size());
    entry->server_length = static_cast<uint8_t>(server.size());
    std::memcpy(entry->Bytes(), id.data(), id.size());
    std::memcpy(entry->Bytes() + id.size(), server.data(), server.size());
    return entry;
  }
  static void Destroy(Entry* entry) {
    entry->~Entry();
    ::operator delete(entry);
  }
};
static_assert(std::is_trivially_destructible_v<Entry>);

struct EntryHash {
  using is_transparent = void;
  size_t operator()(const Entry* e) const { return HashKey(e->kind, e->Id()); }
  size_t operator()(const LookupKey& k) const { return k.hash; }
};

struct EntryEqual {
  using is_transparent = void;
  bool operator()(const Entry* a, const Entry* b) const {
    return a->kind == b->kind && a->Id() == b->Id();
  }
  bool operator()(const LookupKey& k, const Entry* e) const {
    return k.kind == e->kind && k.id == e->Id();
  }
  bool operator()(const Entry* e, const LookupKey& k) const { return (*this)(k, e); }
};

bool IsExpired(const Entry& entry, int64_t now_ms, int64_t idle_timeout_ms) {
  // A non-positive timeout disables expiry.
  return idle_timeout_ms > 0 && now_ms - entry.last_used_ms >= idle_timeout_ms;
}

size_t ShardCountFor(const SessionTableOptions& options) {
  size_t shards = std::bit_ceil(std::max<size_t>(options.shards, 1));
  // More shards than entries would let the table exceed max_entries (each
  // shard holds at least one); fewer shards keep the bound exact.
  if (options.max_entries > 0) {
    shards = std::min(shards, std::bit_floor(options.max_entries));
  }
  return shards;
}

size_t PerShardLimit(size_t max_entries, size_t shard_count) {
  if (max_entries == 0) {
    return 0;
  }
  return std::max<size_t>(max_entries / shard_count, 1);
}

size_t ClientShardLimit(size_t shard_limit, size_t client_share_percent) {
  if (shard_limit == 0 || client_share_percent == 0) {
    return 0;
  }
  return std::max<size_t>(shard_limit * std::min<size_t>(client_share_percent, 100) / 100, 1);
}

// sap-ext-sid values are chosen by clients and recorded when first balanced;
// JSESSIONID values come from a backend's Set-Cookie.
bool IsClientCreated(TableKey kind) {
  return kind == TableKey::kSapExtSid;
}

// One least-recently-used list: most recently used at the head, eviction
// candidates at the tail.
struct Lru {
  Entry* head = nullptr;
  Entry* tail = nullptr;
  size_t size = 0;

  void Unlink(Entry* e) {
    (e->lru_prev ? e->lru_prev->lru_next : head) = e->lru_next;
    (e->lru_next ? e->lru_next->lru_prev : tail) = e->lru_prev;
    e->lru_prev = nullptr;
    e->lru_next = nullptr;
    --size;
  }
  void PushFront(Entry* e) {
    e->lru_prev = nullptr;
    e->lru_next = head;
    (head ? head->lru_prev : tail) = e;
    head = e;
    ++size;
  }
};

}  // namespace

struct SessionTable::Shard {
  std::mutex mu;
  std::unordered_set<Entry*, EntryHash, EntryEqual> entries;
  // Backend-learned and client-created entries age in separate lists so a
  // client entry can be made to evict only client entries.
  Lru backend;
  Lru client;
  uint64_t inserts = 0;
  uint64_t evictions = 0;
  uint64_t expirations = 0;
  uint64_t refused = 0;

  ~Shard() {
    for (Entry* e : entries) {
      Entry::Destroy(e);
    }
  }

  Lru& ListOf(const Entry* e) { return IsClientCreated(e->kind) ? client : backend; }
  void Touch(Entry* e) {
    Lru& list = ListOf(e);
    list.Unlink(e);
    list.PushFront(e);
  }
  void Remove(Entry* e) {
    ListOf(e).Unlink(e);
    entries.erase(e);
    Entry::Destroy(e);
  }
  void Evict(Entry* e) {
    Remove(e);
    ++evictions;
  }
  // The tails are the least recently used entries, so expired entries
  // collect there; stops at the first live one of each list.
  void DropExpiredTails(int64_t now_ms, int64_t idle_timeout_ms) {
    for (Lru* list : {&backend, &client}) {
      while (list->tail != nullptr && IsExpired(*list->tail, now_ms, idle_timeout_ms)) {
        Remove(list->tail);
        ++expirations;
      }
    }
  }
  // Makes room for one entry of `kind` under `limit` entries of which at
  // most `client_limit` are client-created. A client entry evicts only
  // client entries; a backend entry evicts the least recently used of all.
  // False when a client entry finds no room.
  bool MakeRoom(TableKey kind, size_t limit, size_t client_limit) {
    if (IsClientCreated(kind)) {
      if (client_limit == 0) {
        return false;
      }
      while ((client.size >= client_limit || entries.size() >= limit) && client.tail != nullptr) {
        Evict(client.tail);
      }
      return entries.size() < limit;
    }
    // A smaller limit from Reconfigure is applied here, lazily.
    while (entries.size() >= limit) {
      Entry* victim = client.tail;
      if (victim == nullptr ||
          (backend.tail != nullptr && backend.tail->last_used_ms < victim->last_used_ms)) {
        victim = backend.tail;
      }
      Evict(victim);
    }
    return true;
  }
};

SessionTable::SessionTable(SessionTableOptions options) {
  size_t shard_count = ShardCountFor(options);
  shard_mask_ = shard_count - 1;
  Reconfigure(options);
}

SessionTable::~SessionTable() {
  delete[] shards_.load(std::memory_order_acquire);
}

SessionTable::Shard* SessionTable::EnsureShards() {
  Shard* shards = shards_.load(std::memory_order_acquire);
  if (shards != nullptr) {
    return shards;
  }
  auto* made = new Shard[shard_mask_ + 1];
  if (shards_.compare_exchange_strong(shards, made, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
    return made;
  }
  delete[] made;  // another worker made them first: `shards` holds theirs
  return shards;
}

void SessionTable::Reconfigure(SessionTableOptions options) {
  // The shard count is fixed at construction (requests may be inside a
  // shard right now); only the limits change.
  size_t shard_limit = PerShardLimit(options.max_entries, shard_mask_ + 1);
  max_per_shard_.store(shard_limit, std::memory_order_relaxed);
  max_client_per_shard_.store(ClientShardLimit(shard_limit, options.client_share_percent),
                              std::memory_order_relaxed);
  idle_timeout_ms_.store(options.idle_timeout_ms, std::memory_order_relaxed);
}

int SessionTable::Find(TableKey kind, std::string_view session_id, int64_t now_ms, char* server_out,
                       size_t server_capacity, bool use) const {
  Shard* shards = shards_.load(std::memory_order_acquire);
  if (shards == nullptr) {
    return -1;  // nothing was ever recorded
  }
  size_t hash = HashKey(kind, session_id);
  LookupKey key{kind, session_id, hash};
  Shard& shard = shards[(hash >> 7) & shard_mask_];
  int64_t idle_timeout_ms = idle_timeout_ms_.load(std::memory_order_relaxed);
  std::lock_guard lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) {
    return -1;
  }
  Entry* entry = *it;
  if (IsExpired(*entry, now_ms, idle_timeout_ms)) {
    if (use) {
      shard.Remove(entry);
      ++shard.expirations;
    }
    return -1;
  }
  std::string_view server = entry->Server();
  if (server.size() > server_capacity) {
    return -1;
  }
  if (use) {
    entry->last_used_ms = std::max(entry->last_used_ms, now_ms);
    shard.Touch(entry);
  }
  std::memcpy(server_out, server.data(), server.size());
  return static_cast<int>(server.size());
}

int SessionTable::Lookup(TableKey kind, std::string_view session_id, int64_t now_ms,
                         char* server_out, size_t server_capacity) {
  return Find(kind, session_id, now_ms, server_out, server_capacity, /*use=*/true);
}

int SessionTable::Peek(TableKey kind, std::string_view session_id, int64_t now_ms, char* server_out,
                       size_t server_capacity) const {
  return Find(kind, session_id, now_ms, server_out, server_capacity, /*use=*/false);
}

void SessionTable::Record(TableKey kind, std::string_view session_id, std::string_view server,
                          int64_t now_ms) {
  if (session_id.empty() || session_id.size() > kMaxSessionIdLength || server.empty() ||
      server.size() > kMaxServerLength) {
    return;
  }
  size_t limit = max_per_shard_.load(std::memory_order_relaxed);
  size_t client_limit = max_client_per_shard_.load(std::memory_order_relaxed);
  if (limit == 0) {
    return;
  }
  size_t hash = HashKey(kind, session_id);
  LookupKey key{kind, session_id, hash};
  Shard& shard = EnsureShards()[(hash >> 7) & shard_mask_];
  int64_t idle_timeout_ms = idle_timeout_ms_.load(std::memory_order_relaxed);
  std::lock_guard lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it != shard.entries.end()) {
    Entry* existing = *it;
    if (existing->Server() == server) {
      existing->last_used_ms = std::max(existing->last_used_ms, now_ms);
      shard.Touch(existing);
      return;
    }
    shard.Remove(existing);
  }
  shard.DropExpiredTails(now_ms, idle_timeout_ms);
  if (!shard.MakeRoom(kind, limit, client_limit)) {
    ++shard.refused;
    return;
  }
  Entry* entry = Entry::Create(kind, session_id, server, now_ms);
  shard.entries.insert(entry);
  shard.ListOf(entry).PushFront(entry);
  ++shard.inserts;
}

void SessionTable::Erase(TableKey kind, std::string_view session_id) {
  Shard* shards = shards_.load(std::memory_order_acquire);
  if (shards == nullptr) {
    return;
  }
  size_t hash = HashKey(kind, session_id);
  LookupKey key{kind, session_id, hash};
  Shard& shard = shards[(hash >> 7) & shard_mask_];
  std::lock_guard lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it != shard.entries.end()) {
    shard.Remove(*it);
  }
}

SessionTableStats SessionTable::Stats() const {
  SessionTableStats stats;
  Shard* shards = shards_.load(std::memory_order_acquire);
  for (size_t i = 0; shards != nullptr && i <= shard_mask_; ++i) {
    Shard& shard = shards[i];
    std::lock_guard lock(shard.mu);
    stats.entries += shard.entries.size();
    stats.inserts += shard.inserts;
    stats.evictions += shard.evictions;
    stats.expirations += shard.expirations;
    stats.client_entries += shard.client.size;
    stats.refused += shard.refused;
  }
  return stats;
}

std::shared_ptr<SessionTable> SessionRegistry::TableFor(const std::string& group_key,
                                                        const SessionTableOptions& options) {
  std::lock_guard lock(mu_);
  auto it = tables_.find(group_key);
  if (it != tables_.end()) {
    it->second->Reconfigure(options);
    return it->second;
  }
  auto table = std::make_shared<SessionTable>(options);
  tables_.emplace(group_key, table);
  return table;
}

std::shared_ptr<ClientIpTable> SessionRegistry::ClientIpTableFor(
    const std::string& group_key, const ClientIpTableOptions& options) {
  std::lock_guard lock(mu_);
  auto it = client_ip_tables_.find(group_key);
  if (it != client_ip_tables_.end()) {
    it->second->Reconfigure(options);
    return it->second;
  }
  auto table = std::make_shared<ClientIpTable>(options);
  client_ip_tables_.emplace(group_key, table);
  return table;
}

void SessionRegistry::Retain(const std::vector<std::string>& live_group_keys) {
  std::lock_guard lock(mu_);
  const auto gone = [&](const auto& item) {
    return !std::binary_search(live_group_keys.begin(), live_group_keys.end(), item.first);
  };
  std::erase_if(tables_, gone);
  std::erase_if(client_ip_tables_, gone);
}

}  // namespace kwd::session
