#pragma once

// A SapSystem's spec, checked: what the compile reports in Accepted and what
// the poller polls. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "controller/model/model.h"
#include "controller/sapsystem/address_policy.h"

namespace kwd::sapsystem {

inline constexpr std::string_view kDefaultServerListPath = "/msgserver/text/logon";
inline constexpr std::string_view kDefaultGroupInfoPath = "/sap/public/icf_info/icr_groups";
// wdisp/url_map_location (7.x; the 2004s default was /sap/public/icf_info/icr/urlprefix).
inline constexpr std::string_view kDefaultUrlMapPath = "/sap/public/icf_info/icr_urlprefix";
inline constexpr std::int64_t kDefaultRefreshIntervalSeconds = 25;  // wdisp/auto_refresh
inline constexpr std::int64_t kMinRefreshIntervalSeconds = 1;
inline constexpr std::int64_t kMaxRefreshIntervalSeconds = 86400;
inline constexpr std::size_t kMaxAllowedNetworks = 64;

struct SapSystemConfig {
  std::string sid;
  std::string host;
  std::uint32_t port = 0;
  bool https = false;
  std::string ca_bundle;  // PEM; empty: the system's CAs
  std::string server_list_path;
  std::int64_t refresh_interval_seconds = kDefaultRefreshIntervalSeconds;
  bool logon_groups = false;
  std::string group_info_path;
  bool url_map = false;
  std::string url_map_path;
  std::vector<Cidr> allowed_networks;  // spec.allowedNetworks (address_policy.h)

  bool operator==(const SapSystemConfig&) const = default;
};

struct SpecCheck {
  std::optional<SapSystemConfig> config;  // set when the spec is valid
  std::vector<std::string> errors;        // "spec.messageServer.host: ...", unescaped
};

SpecCheck CheckSapSystem(const model::SapSystem& system);

// "http://host:port/msgserver/text/logon?version=1.2" (IPv6 hosts bracketed;
// a path that already asks for a version is left as it is).
std::string ServerListUrl(const SapSystemConfig& config);
// "http://address:port/path" of an application server.
std::string ServerUrl(bool https, const std::string& address, std::uint32_t port,
                      const std::string& path);

}  // namespace kwd::sapsystem
