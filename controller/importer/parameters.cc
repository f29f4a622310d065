#include "controller/importer/parameters.h"

namespace kwd::importer {
namespace {

constexpr std::string_view kInstance =
    "instance and process setting of the SAP installation: Kubernetes runs kwd's pods";
constexpr std::string_view kThreads =
    "sizing of SAP's threads, queues and buffers: kwd-proxy is event-driven (--workers, chart "
    "proxy.workers and proxy.resources)";
constexpr std::string_view kTables =
    "size of a shared-memory table in SAP: kwd's tables are not sized in advance";
constexpr std::string_view kTrace = "SAP trace setting: kwd-proxy --log-level";

}  // namespace

const std::string_view kInstanceSetting = kInstance;

const std::map<std::string, Known>& KnownParameters() {
  static const std::map<std::string, Known> known = {
      {"sapsystem", {Kind::kNotNeeded, kInstance}},
      {"sapsystemname", {Kind::kNotNeeded, kInstance}},
      {"sapglobalhost", {Kind::kNotNeeded, kInstance}},
      {"saplocalhost", {Kind::kNotNeeded, kInstance}},
      {"instance_name", {Kind::kNotNeeded, kInstance}},
      {"_pf", {Kind::kNotNeeded, kInstance}},
      {"autostart", {Kind::kNotNeeded, kInstance}},
      {"icm/min_threads", {Kind::kNotNeeded, kThreads}},
      {"icm/max_threads", {Kind::kNotNeeded, kThreads}},
      {"icm/min_spare_threads", {Kind::kNotNeeded, kThreads}},
      {"icm/req_queue_len", {Kind::kNotNeeded, kThreads}},
      {"icm/listen_queue_len", {Kind::kNotNeeded, kThreads}},
      {"icm/max_services", {Kind::kNotNeeded, kThreads}},
      {"icm/max_sockets", {Kind::kNotNeeded, kThreads}},
      {"icm/max_conn", {Kind::kNotNeeded, kThreads}},
      {"mpi/total_size_mb", {Kind::kNotNeeded, kThreads}},
      {"mpi/buffer_size", {Kind::kNotNeeded, kThreads}},
      {"mpi/max_pipes", {Kind::kNotNeeded, kThreads}},
      {"wdisp/max_servers", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_server_name_len", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_server_groups", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_server_group_name_len", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_url_map_entries", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_url_map_path_len", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_systems", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_permission_table_size", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_permission_table_entry_size", {Kind::kNotNeeded, kTables}},
      {"wdisp/max_permitted_uri_len", {Kind::kNotNeeded, kTables}},
      {"wdisp/http/max_session_tab_logon_groups", {Kind::kNotNeeded, kTables}},
      {"wdisp/https/max_pooled_con", {Kind::kNotNeeded, kTables}},
      {"wdisp/https/min_pooled_con", {Kind::kNotNeeded, kTables}},
      {"icm/log_level", {Kind::kNotNeeded, kTrace}},
      {"rdisp/trace", {Kind::kNotNeeded, kTrace}},
      {"icm/trace_secured_data", {Kind::kNotNeeded, kTrace}},
      {"icm/accept_remote_trace_level", {Kind::kNotNeeded, kTrace}},
      {"ssl/ssl_lib", {Kind::kNotNeeded, "kwd uses OpenSSL (TLS 1.2 and 1.3)"}},
      {"icm/host_name_full",
       {Kind::kNotNeeded, "kwd forwards the client's Host header; no own host name is needed"}},
      {"wdisp/system_conflict_resolution",
       {Kind::kNotNeeded,
        "kwd resolves overlaps itself: an exact virtual host before the catch-all, then the "
        "longest URL prefix"}},
      {"icm/https/client_sni_enabled",
       {Kind::kNotNeeded, "kwd always sends SNI when it re-encrypts (upstreamTLS.serverName)"}},
      {"icm/https/trust_client_with_subject",
       {Kind::kNotNeeded, "an application-server (ICM) setting, not the dispatcher's"}},
      {"icm/https/trust_client_with_issuer",
       {Kind::kNotNeeded, "an application-server (ICM) setting, not the dispatcher's"}},
      {"is/http/show_server_header",
       {Kind::kNotNeeded, "kwd passes the server's own Server header through"}},
      {"wdisp/permitted_uri_char_range",
       {Kind::kUnsupported,
        "kwd accepts RFC 3986 request targets only; no configurable character range"}},
      {"icm/authfile",
       {Kind::kUnsupported,
        "kwd's admin actions use a bearer token (--admin-token-file), not an SAP user file"}},
      {"icm/http/error_templ_path",
       {Kind::kUnsupported, "kwd answers its own error pages (with SAP's error codes)"}},
      {"icm/security_log",
       {Kind::kUnsupported, "no separate security log: kwd's logs and access log record denials"}},
      {"icm/traffic_control",
       {Kind::kUnsupported,
        "no request network timeout of that name: see --header-timeout and --idle-timeout"}},
      {"icm/https/client_certificate_chain_header_prefix", {Kind::kHandled, ""}},
      {"icm/https/client_certificate_header_name", {Kind::kHandled, ""}},
      {"icm/https/client_cipher_suite_header_name", {Kind::kHandled, ""}},
      {"icm/https/client_key_size_header_name", {Kind::kHandled, ""}},
      {"icm/https/forward_ccert_as_header", {Kind::kHandled, ""}},
      {"icm/https/verify_client", {Kind::kHandled, ""}},
      {"icm/keep_alive_timeout", {Kind::kHandled, ""}},
      {"icm/conn_timeout", {Kind::kHandled, ""}},
      {"icm/http/max_request_size_kb", {Kind::kHandled, ""}},
      {"ssl/server_pse", {Kind::kHandled, ""}},
      {"ssl/client_pse", {Kind::kHandled, ""}},
      {"rdisp/mshost", {Kind::kHandled, ""}},
      {"ms/http_port", {Kind::kHandled, ""}},
      {"ms/https_port", {Kind::kHandled, ""}},
      {"wdisp/server_info_location", {Kind::kHandled, ""}},
      {"wdisp/server_info_protocol", {Kind::kHandled, ""}},
      {"wdisp/group_info_location", {Kind::kHandled, ""}},
      {"wdisp/url_map_location", {Kind::kHandled, ""}},
      {"wdisp/auto_refresh", {Kind::kHandled, ""}},
      {"wdisp/info_timeout", {Kind::kHandled, ""}},
      {"wdisp/load_balancing_strategy", {Kind::kHandled, ""}},
      {"wdisp/http/esid_support", {Kind::kHandled, ""}},
      {"wdisp/http/jsessionid_tab_support", {Kind::kHandled, ""}},
      {"wdisp/http/max_session_tab_entries", {Kind::kHandled, ""}},
      {"wdisp/http/context_timeout", {Kind::kHandled, ""}},
      {"wdisp/ping_abap_url", {Kind::kHandled, ""}},
      {"wdisp/permission_table", {Kind::kHandled, ""}},
      {"wdisp/ssl_encrypt", {Kind::kHandled, ""}},
      {"wdisp/ssl_auth", {Kind::kHandled, ""}},
      {"wdisp/ssl_cred", {Kind::kHandled, ""}},
      {"wdisp/ssl_certhost", {Kind::kHandled, ""}},
      {"wdisp/https/dest_logon_group", {Kind::kHandled, ""}},
      {"wdisp/https/sticky_mask", {Kind::kHandled, ""}},
      {"wdisp/https/max_client_ip_entries", {Kind::kHandled, ""}},
      {"wdisp/https/context_timeout", {Kind::kHandled, ""}},
      {"wdisp/add_client_protocol_header", {Kind::kHandled, ""}},
      {"wdisp/add_clientprotocol_header", {Kind::kHandled, ""}},
      {"wdisp/handle_webdisp_ap_header", {Kind::kHandled, ""}},
      {"wdisp/add_xforwardedfor_header", {Kind::kHandled, ""}},
      {"is/http/default_root_hdl", {Kind::kHandled, ""}},
  };
  return known;
}

// Vector parameters <base>_<xx>, by lower-case base.
const std::map<std::string, Known>& KnownVectors() {
  static const std::map<std::string, Known> known = {
      {"wdisp/system", {Kind::kHandled, ""}},
      {"icm/server_port", {Kind::kHandled, ""}},
      {"icm/http/mod", {Kind::kHandled, ""}},
      {"icm/http/logging", {Kind::kHandled, ""}},
      {"icm/http/admin", {Kind::kHandled, ""}},
      {"icm/http/redirect", {Kind::kHandled, ""}},
      {"icm/redirect", {Kind::kHandled, ""}},
      {"icm/http/auth",
       {Kind::kUnsupported,
        "no authentication filter (PERMFILE/AUTHFILE) in kwd: URL filtering is "
        "UrlMapping.spec.permissions; authenticate in the application"}},
      {"icm/http/server_cache",
       {Kind::kUnsupported, "kwd does not cache responses; put a cache in front if needed"}},
      {"icm/http/file_access",
       {Kind::kUnsupported, "kwd serves no static files; serve them from a web server pod"}},
      {"icm/ssl_config", {Kind::kHandled, ""}},
      {"is/http/virt_host",
       {Kind::kUnsupported,
        "an ICM virtual-host setting of the application server; kwd selects by "
        "UrlMapping.spec.hosts"}},
      {"setenv", {Kind::kNotNeeded, kInstance}},
      {"execute", {Kind::kNotNeeded, kInstance}},
      {"start_program", {Kind::kNotNeeded, kInstance}},
      {"restart_program", {Kind::kNotNeeded, kInstance}},
  };
  return known;
}

}  // namespace kwd::importer
