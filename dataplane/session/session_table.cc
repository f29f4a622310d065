#include "dataplane/session/session_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <memory>
#include <new>

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
  uint64_t hash;  // HashKey(kind, id), computed once: it also picks the shard
};

uint64_t HashKey(TableKey kind, std::string_view id) {
  // The kind seeds the hash so a JSESSIONID and an sap-ext-sid with the same
  // text land in different slots. HashString reads words, std::hash bytes.
  return HashString(id, static_cast<uint64_t>(kind) + 1);
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

// The entries of a shard by key: open addressing with linear probing over
// a power-of-two array of {hash, entry} slots, at most half full. A lookup
// hashes the key once, starts at a slot chosen by the hash's high half (the
// shard is chosen by bits 7 and up of its low half) and compares an entry's
// key only on a full hash match: one array read for most lookups, where
// std::unordered_set took a modulo by a prime, the bucket, the node before
// and the node. Removal shifts the entries after a hole back (no
// tombstones), so probes stay as short as after inserting alone.
class EntryIndex {
 public:
  EntryIndex() = default;
  EntryIndex(const EntryIndex&) = delete;
  EntryIndex& operator=(const EntryIndex&) = delete;

  size_t size() const { return size_; }

  Entry* Find(const LookupKey& key) const {
    if (size_ == 0) {
      return nullptr;
    }
    for (size_t i = Home(key.hash);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.entry == nullptr) {
        return nullptr;
      }
      if (slot.hash == key.hash && slot.entry->kind == key.kind &&
          slot.entry->id_length == key.id.size() &&
          BytesEqual(slot.entry->Bytes(), key.id.data(), key.id.size())) {
        return slot.entry;
      }
    }
  }

  // `entry` is not in the index yet. Allocates when the index grows.
  void Insert(Entry* entry, uint64_t hash) {
    if ((size_ + 1) * 2 > capacity_) {
      Grow();
    }
    Place(Slot{hash, entry});
    ++size_;
  }

  // Removes `entry` (which is in the index; `hash` is its key's hash).
  void Erase(const Entry* entry, uint64_t hash) {
    size_t hole = Home(hash);
    while (slots_[hole].entry != entry) {
      hole = (hole + 1) & mask_;
    }
    // Backward shift: an entry further on moves into the hole when the hole
    // lies on its probe path (its home is no nearer to it than the hole).
    for (size_t i = (hole + 1) & mask_; slots_[i].entry != nullptr; i = (i + 1) & mask_) {
      if (((i - Home(slots_[i].hash)) & mask_) >= ((i - hole) & mask_)) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

  template <typename F>
  void ForEach(F f) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].entry != nullptr) {
        f(slots_[i].entry);
      }
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    Entry* entry = nullptr;  // null: empty
  };

  size_t Home(uint64_t hash) const { return static_cast<size_t>(hash >> 32) & mask_; }

  void Place(Slot slot) {
    size_t i = Home(slot.hash);
    while (slots_[i].entry != nullptr) {
      i = (i + 1) & mask_;
    }
    slots_[i] = slot;
  }

  void Grow() {
    const size_t capacity = capacity_ == 0 ? 8 : capacity_ * 2;
    std::unique_ptr<Slot[]> old = std::move(slots_);
    const size_t old_capacity = capacity_;
    slots_ = std::make_unique<Slot[]>(capacity);
    capacity_ = capacity;
    mask_ = capacity - 1;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].entry != nullptr) {
        Place(old[i]);
      }
    }
  }

  std::unique_ptr<Slot[]> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
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

// A cache line of its own for the lock and the index's fields (workers on
// other cores take other shards' locks).
struct alignas(64) SessionTable::Shard {
  std::mutex mu;
  EntryIndex entries;
  // Backend-learned and client-created entries age in separate lists so a
  // client entry can be made to evict only client entries.
  Lru backend;
  Lru client;
  uint64_t inserts = 0;
  uint64_t evictions = 0;
  uint64_t expirations = 0;
  uint64_t refused = 0;

  ~Shard() {
    entries.ForEach([](Entry* e) { Entry::Destroy(e); });
  }

  Lru& ListOf(const Entry* e) { return IsClientCreated(e->kind) ? client : backend; }
  void Touch(Entry* e) {
    Lru& list = ListOf(e);
    list.Unlink(e);
    list.PushFront(e);
  }
  void Remove(Entry* e, uint64_t hash) {
    ListOf(e).Unlink(e);
    entries.Erase(e, hash);
    Entry::Destroy(e);
  }
  void Remove(Entry* e) { Remove(e, HashKey(e->kind, e->Id())); }
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
  const uint64_t hash = HashKey(kind, session_id);
  const LookupKey key{kind, session_id, hash};
  Shard& shard = shards[(hash >> 7) & shard_mask_];
  int64_t idle_timeout_ms = idle_timeout_ms_.load(std::memory_order_relaxed);
  std::lock_guard lock(shard.mu);
  Entry* entry = shard.entries.Find(key);
  if (entry == nullptr) {
    return -1;
  }
  if (IsExpired(*entry, now_ms, idle_timeout_ms)) {
    if (use) {
      shard.Remove(entry, hash);
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
  const uint64_t hash = HashKey(kind, session_id);
  const LookupKey key{kind, session_id, hash};
  Shard& shard = EnsureShards()[(hash >> 7) & shard_mask_];
  int64_t idle_timeout_ms = idle_timeout_ms_.load(std::memory_order_relaxed);
  std::lock_guard lock(shard.mu);
  if (Entry* existing = shard.entries.Find(key); existing != nullptr) {
    if (existing->Server() == server) {
      existing->last_used_ms = std::max(existing->last_used_ms, now_ms);
      shard.Touch(existing);
      return;
    }
    shard.Remove(existing, hash);
  }
  shard.DropExpiredTails(now_ms, idle_timeout_ms);
  if (!shard.MakeRoom(kind, limit, client_limit)) {
    ++shard.refused;
    return;
  }
  Entry* entry = Entry::Create(kind, session_id, server, now_ms);
  shard.entries.Insert(entry, hash);
  shard.ListOf(entry).PushFront(entry);
  ++shard.inserts;
}

void SessionTable::Erase(TableKey kind, std::string_view session_id) {
  Shard* shards = shards_.load(std::memory_order_acquire);
  if (shards == nullptr) {
    return;
  }
  const uint64_t hash = HashKey(kind, session_id);
  const LookupKey key{kind, session_id, hash};
  Shard& shard = shards[(hash >> 7) & shard_mask_];
  std::lock_guard lock(shard.mu);
  if (Entry* entry = shard.entries.Find(key); entry != nullptr) {
    shard.Remove(entry, hash);
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
