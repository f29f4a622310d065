#include "controller/sapsystem/spec.h"

#include <algorithm>

#include "common/log.h"
#include "common/snapshot_io.h"

namespace kwd::sapsystem {
namespace {

std::string HostForUrl(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

SpecCheck CheckSapSystem(const model::SapSystem& system) {
  SpecCheck check;
  for (const std::string& error : system.field_errors) {
    check.errors.push_back(error);
  }
  const model::SapSystemSpec& spec = system.spec;
  SapSystemConfig config;
  if (spec.sid) {
    if (!IsSapSid(*spec.sid)) {
      check.errors.push_back("spec.sid: \"" + *spec.sid +
                             "\" is not a SAP system ID (3 upper-case letters or digits, a "
                             "letter first)");
    }
    config.sid = *spec.sid;
  }
  const model::MessageServerSpec& ms = spec.message_server;
  if (ms.host.empty()) {
    check.errors.push_back("spec.messageServer.host: missing");
  } else if (!IsServerAddress(ms.host)) {
    check.errors.push_back("spec.messageServer.host: \"" + ms.host +
                           "\" is not a host name or IP address");
  }
  config.host = ms.host;
  if (ms.http_port.has_value() == ms.https_port.has_value()) {
    check.errors.push_back(std::string("spec.messageServer: exactly one of httpPort or ") +
                           "httpsPort must be set, got " + (ms.http_port ? "both" : "neither"));
  } else {
    std::int64_t port = ms.http_port ? *ms.http_port : *ms.https_port;
    if (port < 1 || port > 65535) {
      check.errors.push_back(std::string("spec.messageServer.") +
                             (ms.http_port ? "httpPort" : "httpsPort") + ": " +
                             std::to_string(port) + " is not 1 to 65535");
    }
    config.port = static_cast<std::uint32_t>(std::clamp<std::int64_t>(port, 0, 65535));
    config.https = ms.https_port.has_value();
  }
  if (ms.ca_bundle) {
    if (!ms.https_port) {
      check.errors.push_back("spec.messageServer.caBundle: only with httpsPort");
    } else if (ms.ca_bundle->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      check.errors.push_back("spec.messageServer.caBundle: no PEM certificate in it");
    }
    config.ca_bundle = *ms.ca_bundle;
  }
  config.server_list_path = spec.server_list_path.value_or(std::string(kDefaultServerListPath));
  if (!IsOriginForm(config.server_list_path)) {
    check.errors.push_back("spec.serverListPath: \"" + config.server_list_path +
                           "\" is not an origin-form path (starts with /, RFC 3986 characters)");
  }
  config.group_info_path = spec.group_info_path.value_or(std::string(kDefaultGroupInfoPath));
  if (!IsOriginForm(config.group_info_path)) {
    check.errors.push_back("spec.groupInfoPath: \"" + config.group_info_path +
                           "\" is not an origin-form path (starts with /, RFC 3986 characters)");
  }
  config.url_map_path = spec.url_map_path.value_or(std::string(kDefaultUrlMapPath));
  if (!IsOriginForm(config.url_map_path)) {
    check.errors.push_back("spec.urlMapPath: \"" + config.url_map_path +
                           "\" is not an origin-form path (starts with /, RFC 3986 characters)");
  }
  config.refresh_interval_seconds =
      spec.refresh_interval_seconds.value_or(kDefaultRefreshIntervalSeconds);
  if (config.refresh_interval_seconds < kMinRefreshIntervalSeconds ||
      config.refresh_interval_seconds > kMaxRefreshIntervalSeconds) {
    check.errors.push_back("spec.refreshIntervalSeconds: " +
                           std::to_string(config.refresh_interval_seconds) + " is not " +
                           std::to_string(kMinRefreshIntervalSeconds) + " to " +
                           std::to_string(kMaxRefreshIntervalSeconds));
  }
  if (spec.allowed_networks.size() > kMaxAllowedNetworks) {
    check.errors.push_back("spec.allowedNetworks: " + std::to_string(spec.allowed_networks.size()) +
                           " entries, at most " + std::to_string(kMaxAllowedNetworks));
  }
  for (std::size_t i = 0; i < spec.allowed_networks.size() && i < kMaxAllowedNetworks; ++i) {
    std::string why;
    if (auto cidr = ParseCidr(spec.allowed_networks[i], &why)) {
      config.allowed_networks.push_back(*cidr);
    } else {
      check.errors.push_back("spec.allowedNetworks[" + std::to_string(i) + "]: \"" +
                             EscapeControlCharacters(spec.allowed_networks[i].substr(0, 64)) +
                             "\" " + why);
    }
  }
  config.logon_groups = spec.logon_groups.value_or(false);
  config.url_map = spec.url_map.value_or(false);
  if (check.errors.empty()) {
    check.config = std::move(config);
  }
  return check;
}

std::string ServerListUrl(const SapSystemConfig& config) {
  std::string url = std::string(config.https ? "https" : "http") + "://" +
                    HostForUrl(config.host) + ":" + std::to_string(config.port) +
                    config.server_list_path;
  if (url.find("version=") == std::string::npos) {
    url += url.find('?') == std::string::npos ? "?version=1.2" : "&version=1.2";
  }
  return url;
}

std::string ServerUrl(bool https, const std::string& address, std::uint32_t port,
                      const std::string& path) {
  return std::string(https ? "https" : "http") + "://" + HostForUrl(address) + ":" +
         std::to_string(port) + path;
}

}  // namespace kwd::sapsystem
