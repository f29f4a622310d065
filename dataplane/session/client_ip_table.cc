#include "dataplane/session/client_ip_table.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace kwd::session {

bool ClientIpTable::MakeKey(std::string_view client_address, Key* key) const {
  if (client_address.empty() || client_address.size() > 45) {
    return false;
  }
  std::array<char, 48> text{};
  std::memcpy(text.data(), client_address.data(), client_address.size());
  key->fill(0);
  uint32_t prefix_bits;
  std::array<uint8_t, 4> v4{};
  if (inet_pton(AF_INET, text.data(), v4.data()) == 1) {
    uint32_t value =
        (uint32_t{v4[0]} << 24) | (uint32_t{v4[1]} << 16) | (uint32_t{v4[2]} << 8) | v4[3];
    value &= options_.ipv4_mask;
    (*key)[10] = 0xFF;
    (*key)[11] = 0xFF;
    (*key)[12] = static_cast<uint8_t>(value >> 24);
    (*key)[13] = static_cast<uint8_t>(value >> 16);
    (*key)[14] = static_cast<uint8_t>(value >> 8);
    (*key)[15] = static_cast<uint8_t>(value);
    return true;
  }
  if (inet_pton(AF_INET6, text.data(), key->data()) != 1) {
    return false;
  }
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(key->data(), kMapped, 12) == 0) {
    // An IPv4 client on a dual-stack socket: the IPv4 mask applies.
    char v4_text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, key->data() + 12, v4_text, sizeof v4_text);
    return MakeKey(v4_text, key);
  }
  prefix_bits = std::min<uint32_t>(options_.ipv6_prefix_length, 128);
  for (uint32_t i = 0; i < 16; ++i) {
    const uint32_t bit = i * 8;
    if (bit >= prefix_bits) {
      (*key)[i] = 0;
    } else if (prefix_bits - bit < 8) {
      (*key)[i] &= static_cast<uint8_t>(0xFF << (8 - (prefix_bits - bit)));
    }
  }
  return true;
}

size_t ClientIpTable::KeyHash::operator()(const Key& key) const {
  uint64_t a, b;
  std::memcpy(&a, key.data(), 8);
  std::memcpy(&b, key.data() + 8, 8);
  return std::hash<uint64_t>{}(a * 0x9E3779B97F4A7C15ull ^ b);
}

std::string ClientIpTable::Lookup(std::string_view client_address, int64_t now_ms) {
  Key key;
  std::lock_guard lock(mu_);
  if (!MakeKey(client_address, &key)) {
    return {};
  }
  auto it = index_.find(key);
  if (it == index_.end()) {
    return {};
  }
  if (now_ms - it->second->last_used_ms >= options_.idle_timeout_ms) {
    lru_.erase(it->second);
    index_.erase(it);
    return {};
  }
  it->second->last_used_ms = now_ms;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->server;
}

void ClientIpTable::Record(std::string_view client_address, std::string_view server,
                           int64_t now_ms) {
  Key key;
  std::lock_guard lock(mu_);
  if (options_.max_entries == 0 || !MakeKey(client_address, &key)) {
    return;
  }
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->server.assign(server);
    it->second->last_used_ms = now_ms;
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(Entry{key, std::string(server), now_ms});
  index_.emplace(key, lru_.begin());
  EvictLocked(now_ms);
}

void ClientIpTable::Erase(std::string_view client_address) {
  Key key;
  std::lock_guard lock(mu_);
  if (!MakeKey(client_address, &key)) {
    return;
  }
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
}

void ClientIpTable::EvictLocked(int64_t now_ms) {
  // Expired entries sit at the back (least recently used): drop them first,
  // then whatever exceeds the limit.
  while (!lru_.empty() && (lru_.size() > options_.max_entries ||
                           now_ms - lru_.back().last_used_ms >= options_.idle_timeout_ms)) {
    if (lru_.size() > options_.max_entries) {
      evictions_.fetch_add(1, std::memory_order_relaxed);
    }
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

void ClientIpTable::Reconfigure(const ClientIpTableOptions& options) {
  std::lock_guard lock(mu_);
  const bool rekey = options.ipv4_mask != options_.ipv4_mask ||
                     options.ipv6_prefix_length != options_.ipv6_prefix_length;
  options_ = options;
  if (rekey) {
    lru_.clear();
    index_.clear();
  }
  while (lru_.size() > options_.max_entries) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

size_t ClientIpTable::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace kwd::session
