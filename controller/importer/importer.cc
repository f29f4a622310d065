#include "controller/importer/importer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <set>
#include <tuple>

#include "common/log.h"
#include "common/modification/program.h"
#include "common/modification/rules.h"
#include "common/snapshot_io.h"
#include "controller/importer/parameters.h"
#include "controller/importer/profile.h"
#include "controller/sapsystem/address_policy.h"
#include "controller/sapsystem/server_list.h"

namespace kwd::importer {
namespace {

using Json = nlohmann::ordered_json;
using Level = Diagnostic::Level;

constexpr std::string_view kApiVersion = "dispatch.kwd.io/v1alpha1";
constexpr std::string_view kTlsCertDir = "/etc/kwd/tls";

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string Upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string Shown(std::string_view value) {
  constexpr std::size_t kMax = 80;
  std::string out = "\"" + EscapeControlCharacters(value.substr(0, kMax)) + "\"";
  return value.size() > kMax ? out + "..." : out;
}

std::optional<std::int64_t> ParseInt(std::string_view text) {
  std::int64_t value = 0;
  if (text.empty()) {
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<bool> ParseBool(std::string_view text) {
  std::string value = Lower(text);
  if (value == "true" || value == "1" || value == "yes" || value == "on") {
    return true;
  }
  if (value == "false" || value == "0" || value == "no" || value == "off") {
    return false;
  }
  return std::nullopt;
}

std::optional<std::int64_t> ParsePort(std::string_view text) {
  auto port = ParseInt(text);
  if (!port || *port < 1 || *port > 65535) {
    return std::nullopt;
  }
  return port;
}

std::vector<std::string> SplitList(std::string_view text, char separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(separator, start);
    std::string_view item =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) {
      item.remove_prefix(1);
    }
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) {
      item.remove_suffix(1);
    }
    if (!item.empty()) {
      out.emplace_back(item);
    }
    if (end == std::string_view::npos) {
      break;
    }
    start = end + 1;
  }
  return out;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Text read from a file as UTF-8; bytes that are not UTF-8 are taken as
// ISO-8859-1 (SAP files often carry German comments in Latin-1).
bool ToUtf8(std::string* text) {
  bool valid = true;
  try {
    (void)Json(*text).dump();
  } catch (const Json::exception&) {
    valid = false;
  }
  if (valid) {
    return false;
  }
  std::string out;
  out.reserve(text->size() + text->size() / 8);
  for (unsigned char c : *text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  *text = std::move(out);
  return true;
}

// ---- The import ----

struct Param {
  const ProfileEntry* entry = nullptr;
  std::string key;    // lower-case name
  std::string value;  // after $(...) substitution
  std::vector<std::string> unresolved;
  bool warned = false;
  bool noted = false;
};

struct Listener {
  Param* param = nullptr;
  std::string prot;  // HTTP, HTTPS, ROUTER
  std::int64_t port = 0;
  std::string host;  // bind address; "" all
  std::optional<std::int64_t> timeout;
  std::optional<std::int64_t> proc_timeout;
  std::optional<std::string> vclient;
};

struct System {
  Param* param = nullptr;  // wdisp/system_<xx>, or rdisp/mshost
  int index = 0;
  std::string name;  // Kubernetes name
  std::string sid;
  std::string ms_host;
  std::int64_t http_port = 0;
  std::int64_t https_port = 0;
  std::vector<std::string> vhosts;
  std::vector<std::string> urls;
  bool by_port = false;  // SRCSRV restricts to some listeners
  std::optional<int> ssl_encrypt;
  std::string siloc;   // server info file reference
  std::string prefix;  // of its LogonGroup names ("" for one system)
};

struct Group {
  std::string name;
  std::string kind;    // abap | java
  std::string system;  // SapSystem name ("" for static servers)
  std::string smlg;    // SMLG group name ("" for the internal groups)
  bool is_static = false;
  Json static_servers = Json::array();
  bool reencrypt = false;
  bool passthrough = false;
};

class Importer {
 public:
  Importer(const std::string& profile_name, const FileReader& read_file,
           const ImportOptions& options, ImportResult* result)
      : profile_name_(profile_name), read_file_(read_file), options_(options), result_(*result) {}

  void Run(std::string_view text) {
    if (text.size() > kMaxProfileBytes) {
      Error(profile_name_, 0, "",
            "larger than " + std::to_string(kMaxProfileBytes) + " bytes: not an SAP profile");
      return;
    }
    if (text.find('\0') != std::string_view::npos) {
      Error(profile_name_, 0, "", "holds NUL bytes: not an SAP profile");
      return;
    }
    // Every value may end up in an object: UTF-8 only (Kubernetes' rule).
    std::string utf8(text);
    if (ToUtf8(&utf8)) {
      Add(Level::kNote, profile_name_, 0, "", "not UTF-8; read as ISO-8859-1");
    }
    parsed_ = ParseProfile(utf8);
    for (const auto& problem : parsed_.problems) {
      Add(Level::kWarn, profile_name_, problem.line, "", problem.message + "; line left out");
    }
    if (!CollectParameters()) {
      return;
    }
    for (Param& param : params_) {
      Dispatch(param);
    }
    BuildSystems();
    BuildListeners();
    BuildGroupsAndMappings();
    if (over_output_bound_) {
      result_.objects.clear();
      return;
    }
    Finish();
  }

 private:
  // ---- diagnostics ----

  void Add(Level level, const std::string& file, int line, const std::string& parameter,
           const std::string& message) {
    result_.diagnostics.push_back({level, file, line, 0, parameter, message});
  }
  void Error(const std::string& file, int line, const std::string& parameter,
             const std::string& message) {
    Add(Level::kError, file, line, parameter, message);
  }
  void Warn(Param& param, const std::string& message) {
    param.warned = true;
    Add(Level::kWarn, profile_name_, param.entry->line, param.entry->name, message);
  }
  void Note(Param& param, const std::string& message) {
    param.noted = true;
    Add(Level::kNote, profile_name_, param.entry->line, param.entry->name, message);
  }
  // A diagnostic about a line of a named file, charged to `param`.
  void FileWarn(Param& param, const std::string& file, int line, const std::string& message) {
    param.warned = true;
    Add(Level::kWarn, file, line, param.entry->name, message);
  }

  // ---- reading the profile ----

  // False (with an ERROR) when the `$(...)` expansion budget is spent.
  bool CollectParameters() {
    std::map<std::string, std::size_t> last;  // key -> index in entries
    const auto& entries = parsed_.entries;
    std::vector<std::string> keys(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      keys[i] = Lower(entries[i].name);
      // "icm/server_port_01" and "icm/server_port_1" are the same vector entry.
      std::string base;
      int index = 0;
      bool leading_zero = false;
      if (SplitIndexed(keys[i], &base, &index, &leading_zero) && leading_zero) {
        keys[i] = base + "_" + std::to_string(index);
      }
      last[keys[i]] = i;
    }
    std::map<std::string, std::string> variables = options_.variables;
    variables.try_emplace("DIR_SEP", "/");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      variables[entries[i].name] = entries[i].raw_value;
    }
    params_.reserve(entries.size());
    ValueExpander expander(std::move(variables));
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Param param;
      param.entry = &entries[i];
      param.key = keys[i];
      param.value = expander.Expand(entries[i].raw_value, &param.unresolved);
      if (expander.exhausted()) {
        Error(profile_name_, entries[i].line, entries[i].name,
              "expanding its $(...) references takes more than " +
                  std::to_string(kMaxExpansionSteps) + " references or " +
                  std::to_string(kMaxExpandedTotalBytes) +
                  " bytes (for the whole profile): not an SAP profile");
        return false;
      }
      params_.push_back(std::move(param));
      if (last[keys[i]] != i) {
        Warn(params_.back(), "defined again at line " +
                                 std::to_string(entries[last[keys[i]]].line) +
                                 "; that later value is the one SAP uses, this one is left out");
        params_.back().key.clear();  // not dispatched
      }
    }
    result_.parameters = static_cast<int>(params_.size());
    return true;
  }

  // True when the value is usable; else the parameter is reported.
  bool Resolved(Param& param) {
    if (param.unresolved.empty()) {
      return true;
    }
    std::string list;
    for (const auto& name : param.unresolved) {
      list += (list.empty() ? "" : ", ") + name;
    }
    Warn(param, "unresolved " + list + " (define it in the profile or pass --var NAME=VALUE)");
    return false;
  }

  Param* FindParam(std::string_view key) {
    for (Param& param : params_) {
      if (param.key == key) {
        return &param;
      }
    }
    return nullptr;
  }

  void Dispatch(Param& param) {
    if (param.key.empty()) {
      return;  // an overridden duplicate, already reported
    }
    const std::string& key = param.key;
    if (key.rfind("dir_", 0) == 0) {
      Note(param, std::string("not needed: ") + std::string(kInstanceSetting));
      return;
    }
    if (auto it = KnownParameters().find(key); it != KnownParameters().end()) {
      if (it->second.kind == Kind::kNotNeeded) {
        Note(param, "not needed: " + std::string(it->second.why));
      } else if (it->second.kind == Kind::kUnsupported) {
        Warn(param, "not translated: " + std::string(it->second.why));
      } else {
        Handle(param);
      }
      return;
    }
    std::string base;
    int index = 0;
    bool leading_zero = false;
    if (SplitIndexed(key, &base, &index, &leading_zero)) {
      if (auto it = KnownVectors().find(base); it != KnownVectors().end()) {
        if (it->second.kind == Kind::kNotNeeded) {
          Note(param, "not needed: " + std::string(it->second.why));
        } else if (it->second.kind == Kind::kUnsupported) {
          Warn(param, "not translated: " + std::string(it->second.why));
        } else {
          HandleIndexed(param, base, index);
        }
        return;
      }
    }
    Warn(param, "unknown parameter, not translated" + Suggestion(key));
  }

  // The nearest known name within an edit distance of 2 (a length
  // difference is a lower bound of the distance, so most names cost nothing);
  // only for the first kMaxSuggestions unknown names, so a profile of
  // thousands of junk lines stays fast.
  std::string Suggestion(const std::string& key) {
    constexpr int kMaxSuggestions = 200;
    if (++suggestions_ > kMaxSuggestions) {
      return "";
    }
    auto far = [](std::string_view a, std::string_view b) {
      return (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > 2;
    };
    std::string best;
    std::size_t best_distance = 3;
    for (const auto& [name, known] : KnownParameters()) {
      if (far(key, name)) {
        continue;
      }
      std::size_t d = EditDistance(key, name);
      if (d < best_distance) {
        best_distance = d;
        best = name;
      }
    }
    std::string base;
    int index = 0;
    bool leading_zero = false;
    if (SplitIndexed(key, &base, &index, &leading_zero)) {
      for (const auto& [name, known] : KnownVectors()) {
        if (far(base, name)) {
          continue;
        }
        std::size_t d = EditDistance(base, name);
        if (d < best_distance) {
          best_distance = d;
          best = name + "_" + std::to_string(index);
        }
      }
    }
    return best.empty() ? "" : " (did you mean \"" + best + "\"?)";
  }

  // ---- single parameters ----

  void Handle(Param& param) {
    const std::string& key = param.key;
    // A file location may keep an unknown $(DIR_...): files are looked up
    // by name in --files DIR.
    static const std::set<std::string> kFileParameters = {"wdisp/permission_table",
                                                          "wdisp/url_map_location",
                                                          "wdisp/group_info_location",
                                                          "wdisp/server_info_location",
                                                          "ssl/server_pse",
                                                          "ssl/client_pse",
                                                          "wdisp/ssl_cred"};
    if (kFileParameters.count(key) == 0 && !Resolved(param)) {
      return;
    }
    const std::string& value = param.value;
    if (key == "rdisp/mshost") {
      ms_host_ = &param;
    } else if (key == "ms/http_port" || key == "ms/https_port") {
      (key == "ms/http_port" ? ms_http_ : ms_https_) = &param;
    } else if (key == "wdisp/server_info_location" || key == "wdisp/group_info_location" ||
               key == "wdisp/url_map_location") {
      (key == "wdisp/server_info_location"  ? server_info_
       : key == "wdisp/group_info_location" ? group_info_
                                            : url_map_) = &param;
    } else if (key == "wdisp/server_info_protocol") {
      std::string protocol = Lower(value);
      if (protocol != "http" && protocol != "https") {
        Warn(param, Shown(value) + " is not HTTP or HTTPS; not translated");
      } else {
        server_info_https_ = protocol == "https";
      }
    } else if (key == "wdisp/auto_refresh") {
      SetSeconds(param, 1, 86400, &auto_refresh_);
    } else if (key == "wdisp/info_timeout") {
      SetSeconds(param, 1, 3600, &info_timeout_);
    } else if (key == "wdisp/load_balancing_strategy") {
      std::string strategy = Lower(value);
      if (strategy == "weighted_round_robin" || strategy == "simple_weighted_round_robin") {
        strategy_ = strategy;
      } else {
        Warn(param, Shown(value) +
                        " is not weighted_round_robin or simple_weighted_round_robin; the "
                        "default weighted_round_robin is used");
      }
    } else if (key == "wdisp/http/esid_support" || key == "wdisp/http/jsessionid_tab_support") {
      auto on = ParseBool(value);
      if (!on) {
        Warn(param, Shown(value) + " is not true or false; not translated");
      } else if (!*on) {
        (key == "wdisp/http/esid_support" ? no_ext_sid_ : no_jsessionid_) = true;
      }
    } else if (key == "wdisp/http/max_session_tab_entries") {
      SetNumber(param, 1, 10000000, &session_entries_);
    } else if (key == "wdisp/http/context_timeout") {
      SetSeconds(param, 1, 86400 * 7, &session_timeout_);
    } else if (key == "wdisp/ping_abap_url") {
      if (value.empty() || value.front() != '/' || !IsPathText(value)) {
        Warn(param, Shown(value) + " is not a URL path; not translated");
      } else {
        ping_path_ = value;
      }
    } else if (key == "wdisp/permission_table") {
      permission_table_ = &param;
    } else if (key == "wdisp/ssl_encrypt") {
      auto mode = ParseInt(value);
      if (!mode || *mode < 0 || *mode > 2) {
        Warn(param, Shown(value) + " is not 0, 1 or 2; not translated");
      } else {
        ssl_encrypt_ = static_cast<int>(*mode);
        ssl_encrypt_param_ = &param;
      }
    } else if (key == "wdisp/ssl_auth") {
      ssl_auth_ = &param;
      client_cert_ = value == "2";
    } else if (key == "wdisp/ssl_cred" || key == "ssl/client_pse") {
      client_pse_.push_back(&param);
    } else if (key == "wdisp/ssl_certhost") {
      std::string host = Lower(value);
      if (!IsObjectName(host)) {
        Warn(param, Shown(value) + " is not a DNS name; not translated");
      } else {
        ssl_certhost_ = host;
      }
    } else if (key == "wdisp/https/dest_logon_group") {
      dest_logon_group_ = &param;
    } else if (key == "wdisp/https/sticky_mask") {
      if (!IsDottedMask(value)) {
        Warn(param, Shown(value) + " is not a dotted IPv4 mask; not translated");
      } else {
        sticky_mask_ = value;
      }
    } else if (key == "wdisp/https/max_client_ip_entries") {
      SetNumber(param, 1, 10000000, &client_ip_entries_);
    } else if (key == "wdisp/https/context_timeout") {
      SetSeconds(param, 1, 86400 * 7, &client_ip_timeout_);
    } else if (key == "wdisp/add_client_protocol_header" ||
               key == "wdisp/add_clientprotocol_header" ||
               key == "wdisp/handle_webdisp_ap_header") {
      auto on = ParseBool(value);
      if (!on) {
        Warn(param, Shown(value) + " is not true or false; not translated");
      } else {
        (key == "wdisp/handle_webdisp_ap_header" ? access_points_ : client_protocol_) = *on;
      }
    } else if (key == "wdisp/add_xforwardedfor_header") {
      auto on = ParseBool(value);
      if (!on) {
        Warn(param, Shown(value) + " is not true or false; not translated");
      } else if (!*on) {
        Warn(param,
             "kwd-proxy always sends X-Forwarded-For (and X-Forwarded-Proto); it cannot be "
             "switched off");
      }
    } else if (key == "is/http/default_root_hdl") {
      std::string handler = Lower(value);
      if (handler == "abap") {
        root_handler_ = "abap";
      } else if (handler == "j2ee" || handler == "java") {
        root_handler_ = "java";
      } else {
        Warn(param, Shown(value) + " is not abap or j2ee; not translated");
      }
    } else if (key == "icm/keep_alive_timeout") {
      auto seconds = ParseInt(value);
      if (seconds && *seconds == -1) {
        Warn(param, "-1 (never close) has no kwd equivalent: --idle-timeout keeps its default");
      } else {
        SetSeconds(param, 1, 86400, &idle_timeout_);
      }
    } else if (key == "icm/conn_timeout") {
      auto ms = ParseInt(value);
      if (!ms || *ms < 1 || *ms > 3600000) {
        Warn(param, Shown(value) + " is not a number of milliseconds; not translated");
      } else {
        connect_timeout_ms_ = *ms;
      }
    } else if (key == "icm/http/max_request_size_kb") {
      auto kb = ParseInt(value);
      if (kb && *kb == -1) {
        Warn(param,
             "-1 (no limit) has no kwd equivalent: --max-body-size keeps its default (100 MB); "
             "raise it as needed");
      } else if (!kb || *kb < 1 || *kb > 1024LL * 1024 * 1024) {
        Warn(param, Shown(value) + " is not a size in KB; not translated");
      } else {
        max_body_bytes_ = *kb * 1024;
      }
    } else if (key == "icm/https/verify_client") {
      auto mode = ParseInt(value);
      if (!mode || *mode < 0 || *mode > 2) {
        Warn(param, Shown(value) + " is not 0, 1 or 2; not translated");
      } else {
        verify_client_ = &param;
      }
    } else if (key == "icm/https/forward_ccert_as_header") {
      auto on = ParseBool(value);
      if (!on) {
        Warn(param, Shown(value) + " is not true or false; not translated");
      } else if (!*on) {
        Warn(param,
             "kwd always forwards a verified client certificate (SSL_CLIENT_CERT); it cannot be "
             "switched off, only by not asking for certificates (--tls-verify-client none)");
      }
    } else if (key == "icm/https/client_certificate_header_name" ||
               key == "icm/https/client_cipher_suite_header_name" ||
               key == "icm/https/client_key_size_header_name" ||
               key == "icm/https/client_certificate_chain_header_prefix") {
      static const std::map<std::string, std::string> kDefaults = {
          {"icm/https/client_certificate_header_name", "SSL_CLIENT_CERT"},
          {"icm/https/client_cipher_suite_header_name", "SSL_CIPHER_SUITE"},
          {"icm/https/client_key_size_header_name", "SSL_CIPHER_USEKEYSIZE"},
          {"icm/https/client_certificate_chain_header_prefix", "SSL_CLIENT_CERT_CHAIN_"}};
      const std::string& expected = kDefaults.at(key);
      if (Upper(value) != expected) {
        Warn(param, "kwd sends the header as " + expected + "; another name (" + Shown(value) +
                        ") cannot be configured");
      }
    } else if (key == "ssl/server_pse") {
      server_pse_ = &param;
    }
  }

  static bool IsDottedMask(const std::string& text) {
    auto parts = SplitList(text, '.');
    if (parts.size() != 4 || std::count(text.begin(), text.end(), '.') != 3) {
      return false;
    }
    for (const auto& part : parts) {
      auto n = ParseInt(part);
      if (!n || *n < 0 || *n > 255) {
        return false;
      }
    }
    return true;
  }

  void SetNumber(Param& param, std::int64_t low, std::int64_t high,
                 std::optional<std::int64_t>* out) {
    auto n = ParseInt(param.value);
    if (!n || *n < low || *n > high) {
      Warn(param, Shown(param.value) + " is not a number from " + std::to_string(low) + " to " +
                      std::to_string(high) + "; not translated");
      return;
    }
    *out = *n;
  }
  void SetSeconds(Param& param, std::int64_t low, std::int64_t high,
                  std::optional<std::int64_t>* out) {
    SetNumber(param, low, high, out);
  }

  // ---- vector parameters ----

  void HandleIndexed(Param& param, const std::string& base, int index) {
    if (base == "icm/http/redirect" || base == "icm/redirect") {
      if (Resolved(param)) {
        redirects_.emplace_back(index, &param);
      }
      return;
    }
    if (base == "icm/http/mod") {
      mods_.emplace_back(index, &param);
      return;  // resolved when read: only the FILE path may hold unknown $(...)
    }
    if (!Resolved(param)) {
      return;
    }
    if (base == "wdisp/system") {
      system_params_.emplace_back(index, &param);
    } else if (base == "icm/server_port") {
      port_params_.emplace_back(index, &param);
    } else if (base == "icm/http/logging") {
      OptionList options = ParseOptions(param.value);
      const std::string* active = options.Find("ACTIVE");
      if (active != nullptr && ParseBool(*active) == std::optional<bool>(false)) {
        Note(param, "inactive (ACTIVE=FALSE): kwd-proxy --access-log off");
        access_log_off_ = true;
      } else {
        access_log_ = true;
        Note(param,
             "kwd-proxy --access-log - (one line per request on stdout, session ids and "
             "passwords masked; chart proxy.accessLog); LOGFILE, LOGFORMAT and PREFIX are not "
             "kept");
      }
    } else if (base == "icm/http/admin") {
      Note(param,
           "the admin page is on kwd-proxy's admin port (--admin-listen, /admin), never on the "
           "traffic port; PREFIX, DOCROOT and AUTHFILE are not kept");
    } else if (base == "icm/ssl_config") {
      Warn(param,
           "a TLS configuration with SAP PSE credentials: kwd takes certificates from "
           "--tls-cert-dir (chart proxy.service.https.certificateSecrets); export them "
           "from the PSE (see " +
               std::string("ssl/server_pse") + ")");
    }
  }

  // The KEY=VALUE options of `param`, with what is wrong in them reported.
  OptionList Options(Param& param) {
    OptionList options = ParseOptions(param.value);
    for (const auto& item : options.malformed) {
      Warn(param, "option " + Shown(item) + " is not KEY=VALUE; ignored");
    }
    for (const auto& key : options.duplicates) {
      Warn(param, key + "= given twice; the first value is used");
    }
    return options;
  }

  // ---- systems ----

  void BuildSystems() {
    std::sort(system_params_.begin(), system_params_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::set<std::string> names;
    for (auto& [index, param] : system_params_) {
      System system;
      system.param = param;
      system.index = index;
      OptionList options = Options(*param);
      bool usable = true;
      for (const auto& [key, value] : options.options) {
        if (key == "SID") {
          std::string sid = Upper(value);
          if (sid.size() != 3 || !std::isalpha(static_cast<unsigned char>(sid[0])) ||
              !std::all_of(sid.begin(), sid.end(),
                           [](char c) { return std::isalnum(static_cast<unsigned char>(c)); })) {
            Warn(*param, "SID=" + Shown(value) + " is not a three-character SAP system ID");
            usable = false;
          }
          system.sid = sid;
        } else if (key == "MSHOST") {
          system.ms_host = Lower(value);
        } else if (key == "MSPORT" || key == "MSSPORT") {
          auto port = ParsePort(value);
          if (!port) {
            Warn(*param, key + "=" + Shown(value) + " is not a port number");
            usable = false;
          } else {
            (key == "MSPORT" ? system.http_port : system.https_port) = *port;
          }
        } else if (key == "SRCVHOST") {
          for (const auto& host : SplitList(value, ';')) {
            std::string lower = Lower(host);
            if (lower.find(':') != std::string::npos) {
              Note(*param, "SRCVHOST " + Shown(host) +
                               ": the port is dropped; kwd matches the host name only");
              lower = lower.substr(0, lower.find(':'));
            }
            if (!IsVirtualHost(lower)) {
              Warn(*param, "SRCVHOST " + Shown(host) + " is not a host name or *.suffix; left out");
            } else if (auto [it, fresh] = vhost_owner_.try_emplace(lower, param->entry->name);
                       !fresh) {
              Warn(*param, "SRCVHOST " + Shown(host) + " already selects the system of " +
                               it->second + "; left out here (kwd gives a host to one system)");
            } else {
              system.vhosts.push_back(lower);
            }
          }
        } else if (key == "SRCURL") {
          for (const auto& url : SplitList(value, ';')) {
            std::string prefix = url;
            if (prefix.back() != '/') {
              prefix.push_back('/');
            }
            if (prefix == "/") {
              continue;  // every URL: no restriction
            }
            if (prefix.front() != '/' || !IsPathText(prefix)) {
              Warn(*param, "SRCURL " + Shown(url) + " is not a URL path prefix; left out");
            } else {
              system.urls.push_back(prefix);
            }
          }
        } else if (key == "SRCSRV") {
          srcsrv_.emplace_back(param, value);
        } else if (key == "SSL_ENCRYPT") {
          auto mode = ParseInt(value);
          if (!mode || *mode < 0 || *mode > 2) {
            Warn(*param, "SSL_ENCRYPT=" + Shown(value) + " is not 0, 1 or 2; ignored");
          } else {
            system.ssl_encrypt = static_cast<int>(*mode);
          }
        } else if (key == "SILOC") {
          system.siloc = value;
        } else if (key == "SSL_CERTHOST") {
          if (IsObjectName(Lower(value))) {
            ssl_certhost_ = Lower(value);
          } else {
            Warn(*param, "SSL_CERTHOST=" + Shown(value) + " is not a DNS name; ignored");
          }
        } else if (key == "NR" || key == "SCSHOST" || key == "CLIENT" || key == "CONFIG_PROTOCOL") {
          Note(*param, key +
                           "= not needed: kwd reads the system's servers from its message "
                           "server");
        } else {
          Warn(*param, key + "= is not translated (kwd has no equivalent of it)");
        }
      }
      if (!usable) {
        Warn(*param, "system left out");
        continue;
      }
      if (system.ms_host.empty() && system.siloc.empty()) {
        Warn(*param,
             "neither MSHOST= nor SILOC=: kwd reads a system's servers from its message "
             "server (or a server info file); system left out (XSSRV=/EXTSRV= are not "
             "supported)");
        continue;
      }
      if (!system.ms_host.empty() && (system.http_port == 0) == (system.https_port == 0)) {
        Warn(*param, "needs exactly one of MSPORT= or MSSPORT=; system left out");
        continue;
      }
      if (!system.ms_host.empty() && !IsServerAddress(system.ms_host)) {
        Warn(*param, "MSHOST=" + Shown(system.ms_host) + " is not a host name; system left out");
        continue;
      }
      system.name = UniqueName(
          system.sid.empty() ? "system-" + std::to_string(index) : KubernetesName(system.sid),
          &names);
      systems_.push_back(std::move(system));
    }
    if (!systems_.empty()) {
      for (Param* p : {ms_host_, ms_http_, ms_https_}) {
        if (p != nullptr) {
          Note(*p,
               "not used: wdisp/system_<xx> defines the systems (SAP does not read it "
               "either then)");
        }
      }
    } else if (ms_host_ != nullptr ||
               (server_info_ != nullptr && IsFileLocation(server_info_->value))) {
      System system;
      system.param = ms_host_ != nullptr ? ms_host_ : server_info_;
      system.name = KubernetesName(options_.system_name);
      if (system.name.empty()) {
        system.name = "sap";
      }
      if (ms_host_ != nullptr) {
        system.ms_host = Lower(ms_host_->value);
        if (!IsServerAddress(system.ms_host)) {
          Warn(*ms_host_, Shown(ms_host_->value) + " is not a host name; no SapSystem");
          system.ms_host.clear();
        }
        Param* port_param = server_info_https_ && ms_https_ != nullptr ? ms_https_
                            : ms_http_ != nullptr                      ? ms_http_
                                                                       : ms_https_;
        if (port_param == nullptr) {
          Warn(*ms_host_,
               "no ms/http_port or ms/https_port: the message server's port is "
               "unknown; no SapSystem");
          system.ms_host.clear();
        } else if (auto port = ParsePort(port_param->value); !port) {
          Warn(*port_param, Shown(port_param->value) + " is not a port number; no SapSystem");
          system.ms_host.clear();
        } else {
          (port_param == ms_https_ ? system.https_port : system.http_port) = *port;
          Param* other = port_param == ms_http_ ? ms_https_ : ms_http_;
          if (other != nullptr) {
            Note(*other, "not used: the message server is read over " +
                             std::string(port_param == ms_https_ ? "HTTPS" : "HTTP"));
          }
        }
      }
      systems_.push_back(std::move(system));
    } else {
      for (Param* p : {ms_http_, ms_https_, server_info_}) {
        if (p != nullptr) {
          Warn(*p, "no rdisp/mshost: the message server host is unknown; not translated");
        }
      }
    }
    if (systems_.size() > 1) {
      for (auto& system : systems_) {
        system.prefix = system.name + "-";
      }
    }
  }

  std::string UniqueName(std::string name, std::set<std::string>* used) {
    if (name.empty()) {
      name = "group";
    }
    std::string candidate = name;
    for (int n = 2; !used->insert(candidate).second; ++n) {
      candidate = name + "-" + std::to_string(n);
    }
    return candidate;
  }

  // ---- listeners ----

  void BuildListeners() {
    std::sort(port_params_.begin(), port_params_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [index, param] : port_params_) {
      OptionList options = Options(*param);
      Listener listener;
      listener.param = param;
      bool usable = true;
      for (const auto& [key, value] : options.options) {
        if (key == "PROT") {
          listener.prot = Upper(value);
        } else if (key == "PORT") {
          auto port = ParsePort(value);
          if (!port) {
            Warn(*param, "PORT=" + Shown(value) +
                             " is not a port number (service names are not supported)");
            usable = false;
          } else {
            listener.port = *port;
          }
        } else if (key == "HOST") {
          if (!IsServerAddress(value)) {
            Warn(*param, "HOST=" + Shown(value) + " is not a host name or address; ignored");
          } else {
            listener.host = value;
          }
        } else if (key == "TIMEOUT" || key == "PROCTIMEOUT") {
          auto seconds = ParseInt(value);
          if (!seconds || *seconds < -1 || *seconds > 86400) {
            Warn(*param, key + "=" + Shown(value) + " is not a number of seconds; ignored");
          } else if (*seconds == -1) {
            Warn(*param, key + "=-1 (no timeout) has no kwd equivalent; the default is kept");
          } else if (*seconds > 0) {
            (key == "TIMEOUT" ? listener.timeout : listener.proc_timeout) = *seconds;
          }
        } else if (key == "EXTBIND") {
          Note(*param,
               "EXTBIND= not needed: in Kubernetes the Service maps the public port "
               "to the container's");
        } else if (key == "VCLIENT") {
          listener.vclient = value;
        } else if (key == "SSLCONFIG") {
          Warn(*param,
               "SSLCONFIG= names SAP PSE credentials: export the certificate into "
               "--tls-cert-dir (see ssl/server_pse)");
        } else if (key == "ACLFILE") {
          Warn(*param,
               "ACLFILE= (client IP access list) is not translated: use a "
               "NetworkPolicy or proxy.service.loadBalancerSourceRanges");
        } else if (key == "MIN_RECEIVE_RATE" || key == "CHECK_RECEIVE_RATE_AFTER" ||
                   key == "MAX_RECEIVE_TIMEOUT") {
          Note(*param, key +
                           "= is not kept: kwd bounds slow clients with --header-timeout "
                           "(whole request head) and --idle-timeout");
        } else {
          Warn(*param, key + "= is not translated (kwd has no equivalent of it)");
        }
      }
      if (listener.prot.empty()) {
        listener.prot = "HTTP";
      }
      if (listener.port == 0) {
        if (usable) {
          Warn(*param, "no PORT=; listener left out");
        }
        continue;
      }
      if (listener.prot != "HTTP" && listener.prot != "HTTPS" && listener.prot != "ROUTER") {
        Warn(*param, "PROT=" + Shown(listener.prot) +
                         " is not served by kwd (HTTP, HTTPS and ROUTER are); listener left out");
        continue;
      }
      listeners_.push_back(listener);
    }

    auto address = [](const Listener& l) {
      std::string host = l.host.empty() ? "0.0.0.0" : l.host;
      if (host.find(':') != std::string::npos) {
        host = "[" + host + "]";
      }
      return host + ":" + std::to_string(l.port);
    };
    Json service = Json::object();
    const Listener* http = nullptr;
    const Listener* https = nullptr;
    const Listener* router = nullptr;
    for (const Listener& l : listeners_) {
      const Listener** slot = l.prot == "HTTP" ? &http : l.prot == "HTTPS" ? &https : &router;
      if (*slot != nullptr) {
        Warn(*l.param, "kwd-proxy has one " + l.prot + " listener (" + (*slot)->param->entry->name +
                           " is it); this port is left out: add it to the Service in front "
                           "(or use a second Service port to the same target)");
        continue;
      }
      *slot = &l;
      if (l.timeout) {
        if (idle_timeout_ && *idle_timeout_ != *l.timeout && idle_from_port_) {
          Warn(*l.param, "TIMEOUT=" + std::to_string(*l.timeout) +
                             " differs from another listener's; kwd has one --idle-timeout");
        } else {
          idle_timeout_ = *l.timeout;
          idle_from_port_ = true;
        }
      }
      if (l.proc_timeout) {
        if (response_timeout_ && *response_timeout_ != *l.proc_timeout) {
          Warn(*l.param, "PROCTIMEOUT=" + std::to_string(*l.proc_timeout) +
                             " differs from another listener's; kwd has one --response-timeout");
        } else {
          response_timeout_ = *l.proc_timeout;
        }
      }
    }
    if (http != nullptr) {
      Flag("--listen", address(*http));
      service["httpPort"] = http->port;
    }
    if (https != nullptr) {
      Flag("--tls-listen", address(*https));
      Flag("--tls-cert-dir", std::string(kTlsCertDir));
      service["https"] = Json{{"enabled", true},
                              {"port", https->port},
                              {"certificateSecrets", Json::array({options_.tls_secret})}};
      Param& pse_param = server_pse_ != nullptr ? *server_pse_ : *https->param;
      Warn(pse_param,
           "the server certificate and key are in an SAP PSE, which kwd cannot read: export "
           "them (sapgenpse export_p12 -p SAPSSLS.pse out.p12; openssl pkcs12 -in out.p12 "
           "-nodes) and store them as the kubernetes.io/tls Secret " +
               Shown(options_.tls_secret) + " (or NAME.crt + NAME.key in --tls-cert-dir)");
      std::string mode;
      Param* mode_param = nullptr;
      if (https->vclient) {
        mode = *https->vclient;
        mode_param = https->param;
      } else if (verify_client_ != nullptr) {
        mode = verify_client_->value;
        mode_param = verify_client_;
      }
      if (mode == "1" || mode == "2") {
        Flag("--tls-verify-client", mode == "1" ? "optional" : "required");
        Flag("--tls-client-ca", std::string(kTlsCertDir) + "/client-ca.crt");
        Warn(*mode_param,
             "client certificates are checked against --tls-client-ca: export the trusted CAs "
             "from the PSE's certificate list into that file (chart: mount it with "
             "proxy.extraVolumes and set the flags in proxy.extraArgs)");
        extra_args_.push_back("--tls-verify-client");
        extra_args_.push_back(mode == "1" ? "optional" : "required");
        extra_args_.push_back("--tls-client-ca");
        extra_args_.push_back(std::string(kTlsCertDir) + "/client-ca.crt");
      } else if (!mode.empty() && mode != "0") {
        Warn(*mode_param, "client-certificate mode " + Shown(mode) + " is not 0, 1 or 2");
      }
    } else if (verify_client_ != nullptr) {
      Note(*verify_client_, "not needed: no HTTPS listener");
    }
    if (router != nullptr) {
      Flag("--passthrough-listen", address(*router));
      service["passthrough"] = Json{{"enabled", true}, {"port", router->port}};
      passthrough_ = true;
    }
    for (Param* p : {dest_logon_group_}) {
      if (p != nullptr && router == nullptr) {
        Note(*p, "not needed: no PROT=ROUTER listener");
      }
    }
    if (idle_timeout_) {
      ExtraFlag("--idle-timeout", std::to_string(*idle_timeout_) + "s");
    }
    if (response_timeout_) {
      ExtraFlag("--response-timeout", std::to_string(*response_timeout_) + "s");
    }
    if (connect_timeout_ms_) {
      ExtraFlag("--connect-timeout", std::to_string(*connect_timeout_ms_) + "ms");
    }
    if (max_body_bytes_) {
      ExtraFlag("--max-body-size", std::to_string(*max_body_bytes_));
    }
    Json proxy = Json::object();
    if (!service.empty()) {
      proxy["service"] = service;
    }
    if (access_log_ || access_log_off_) {
      Flag("--access-log", access_log_ ? "-" : "off");
      proxy["accessLog"] = access_log_ ? "-" : "off";
    }
    if (!extra_args_.empty()) {
      proxy["extraArgs"] = extra_args_;
    }
    chart_proxy_ = proxy;
  }

  void Flag(const std::string& flag, const std::string& value) {
    result_.proxy_flags.push_back(flag);
    result_.proxy_flags.push_back(value);
  }
  void ExtraFlag(const std::string& flag, const std::string& value) {
    Flag(flag, value);
    extra_args_.push_back(flag);
    extra_args_.push_back(value);
  }

  // ---- files ----

  // Reads the file `param` names; reports an ERROR when it cannot.
  bool ReadNamed(Param& param, std::string reference, std::string* text, std::string* shown) {
    if (reference.rfind("file://", 0) == 0) {
      reference = reference.substr(7);
    }
    if (auto cached = files_read_.find(reference); cached != files_read_.end()) {
      *text = cached->second.first;
      *shown = cached->second.second;
    } else {
      std::string error;
      ReadStatus status = read_file_(reference, text, shown, &error);
      if (status == ReadStatus::kRefused) {
        Warn(param, "cannot read " + Shown(reference) + ": " + error + "; left out");
        return false;
      }
      if (status != ReadStatus::kRead) {
        param.warned = true;
        Error(profile_name_, param.entry->line, param.entry->name,
              "cannot read " + Shown(reference) + ": " + error);
        return false;
      }
      if (text->size() > kMaxReferencedFileBytes) {
        param.warned = true;
        Error(*shown, 0, param.entry->name,
              "larger than " + std::to_string(kMaxReferencedFileBytes) + " bytes");
        return false;
      }
      referenced_bytes_ += text->size();
      if (referenced_bytes_ > kMaxReferencedTotalBytes) {
        param.warned = true;
        Error(*shown, 0, param.entry->name,
              "the files named by the profile are together larger than " +
                  std::to_string(kMaxReferencedTotalBytes) + " bytes");
        return false;
      }
      files_read_.emplace(reference, std::make_pair(*text, *shown));
    }
    if (ToUtf8(text)) {
      Note(param, *shown + " is not UTF-8; read as ISO-8859-1");
    }
    return true;
  }

  static bool IsFileLocation(const std::string& value) { return value.rfind("file://", 0) == 0; }

  // Turns "line 4: reason" messages of the sapsystem parsers into WARNs.
  void SkipWarnings(Param& param, const std::string& file, const sapsystem::Skips& skips,
                    const std::string& what) {
    for (const std::string& message : skips.messages) {
      int line = 0;
      std::string text = message;
      if (message.rfind("line ", 0) == 0) {
        std::size_t colon = message.find(": ");
        if (auto n = ParseInt(message.substr(5, colon - 5)); n && colon != std::string::npos) {
          line = static_cast<int>(*n);
          text = message.substr(colon + 2);
        }
      }
      FileWarn(param, file, line, what + " left out: " + text);
    }
    if (skips.total() > skips.messages.size()) {
      FileWarn(param, file, 0,
               std::to_string(skips.total() - skips.messages.size()) + " more " + what +
                   "s left out (the first " + std::to_string(skips.messages.size()) +
                   " are named above)");
    }
  }

  // ---- groups and mappings ----

  Group& AddGroup(const std::string& name, const std::string& kind, const System& system,
                  const std::string& smlg) {
    groups_.push_back({});
    Group& group = groups_.back();
    group.name = UniqueName(name, &group_names_);
    group.kind = kind;
    group.system = system.name;
    group.smlg = smlg;
    int encrypt = system.ssl_encrypt.value_or(ssl_encrypt_);
    group.reencrypt = encrypt > 0;
    return group;
  }

  void BuildGroupsAndMappings() {
    if (systems_.empty()) {
      std::string why =
          "no back end: the profile has neither rdisp/mshost nor wdisp/system_<xx> nor a server "
          "info file";
      Add(Level::kWarn, profile_name_, 0, "", why + "; no LogonGroup or UrlMapping written");
      for (Param* p : {permission_table_, url_map_, group_info_}) {
        if (p != nullptr && !p->warned) {
          Warn(*p, "not translated: no system to apply it to");
        }
      }
      for (auto& [index, param] : mods_) {
        Warn(*param, "not translated: no system to apply it to");
      }
      for (auto& [index, param] : redirects_) {
        Warn(*param, "not translated: no system to apply it to");
      }
      return;
    }
    // The primary system: the one without a URL or host selector (SAP's
    // "every other request"), else the first. Global files apply to it.
    System* primary = nullptr;
    for (System& system : systems_) {
      if (system.vhosts.empty() && system.urls.empty()) {
        if (primary == nullptr) {
          primary = &system;
        } else if (systems_.size() > 1) {
          // A second mapping without hosts would take the catch-all's host:
          // kwd cannot tell two mappings for every host apart by the SID
          // header alone, so none is written for it.
          Warn(*system.param,
               "no SRCURL= or SRCVHOST= selects this system (SRCSRV= is not used by kwd), and "
               "the first such system takes every other request: its SapSystem and LogonGroups "
               "are written, no UrlMapping; give it hosts (SRCVHOST=, UrlMapping.spec.hosts "
               "with spec.system.sid: " +
                   (system.sid.empty() ? std::string("<SID>") : system.sid) +
                   ") or prefixes (SRCURL=)");
        }
      }
    }
    for (auto& [param, value] : srcsrv_) {
      CheckSrcSrv(*param, value);
    }
    bool catch_all_has_default = primary != nullptr;
    if (primary == nullptr) {
      primary = &systems_.front();
    }

    // Server info file: static servers instead of the message server.
    for (System& system : systems_) {
      std::vector<model::SapInstance> instances;
      Param* info_param = nullptr;
      std::string reference;
      if (!system.siloc.empty()) {
        info_param = system.param;
        reference = system.siloc;
      } else if (&system == primary && server_info_ != nullptr) {
        info_param = server_info_;
        reference = server_info_->value;
      }
      if (info_param != nullptr && !IsFileLocation(reference) && !system.siloc.empty()) {
        Warn(*info_param, "SILOC=" + Shown(reference) + " is not a file:// location; ignored");
        info_param = nullptr;
      }
      if (info_param != nullptr && IsFileLocation(reference)) {
        std::string text;
        std::string shown;
        if (ReadNamed(*info_param, reference, &text, &shown)) {
          auto parsed = sapsystem::ParseServerList(text);
          if (!parsed.ok) {
            FileWarn(*info_param, shown, 0, "not a server list: " + parsed.error);
          } else {
            SkipWarnings(*info_param, shown, parsed.skips, "entry");
            sapsystem::Skips skips;
            // The operator's own file becomes staticServers, which the
            // operator writes anyway: no address policy (the discovery trust
            // boundary is for what a message server says at run time).
            instances = sapsystem::BuildInstances(
                parsed, [](const std::string& host) { return std::vector<std::string>{host}; },
                nullptr, nullptr, &skips);
            SkipWarnings(*info_param, shown, skips, "instance");
            // Kept as written, but what kwd refuses from a message server
            // (loopback, link-local/cloud metadata, unspecified, multicast)
            // is said, instance by instance.
            for (const model::SapInstance& instance : instances) {
              if (!sapsystem::ParseIpAddress(instance.address)) {
                continue;  // a host name: resolved by the proxies at run time
              }
              std::string reason = sapsystem::RefusalReason(sapsystem::AddressPolicy{},
                                                            instance.address);
              if (!reason.empty()) {
                FileWarn(*info_param, shown, 0,
                         "instance " + instance.name + " at " + instance.address + ": " + reason +
                             ": kept in LogonGroup.spec.backend.staticServers as the file says "
                             "(kwd refuses such an address from a message server); check that "
                             "it is meant");
              }
            }
            system_instances_[system.name] = instances;
            Note(*info_param, "the servers of " + shown +
                                  " become LogonGroup.spec.backend.staticServers (" +
                                  std::to_string(instances.size()) +
                                  " instances); kwd does not re-read the file");
          }
        }
      } else if (info_param != nullptr && &system == primary && server_info_ != nullptr) {
        // A path on the message server.
        if (server_info_->value.empty() || server_info_->value.front() != '/' ||
            !IsPathText(server_info_->value)) {
          Warn(*server_info_, Shown(server_info_->value) + " is not a path or file:// location");
        } else {
          server_list_path_ = server_info_->value;
        }
      }
    }

    // Internal groups per system.
    for (System& system : systems_) {
      bool static_servers = system_instances_.count(system.name) > 0;
      if (!static_servers && system.ms_host.empty()) {
        continue;  // reported above
      }
      Group& diag = AddGroup(system.prefix + "diag", "abap", system, "");
      system_diag_[system.name] = diag.name;
      Group& j2ee = AddGroup(system.prefix + "j2ee", "java", system, "");
      system_j2ee_[system.name] = j2ee.name;
      if (static_servers) {
        FillStatic(system, "diag");
        FillStatic(system, "j2ee");
      }
    }

    // Files that apply to the primary system.
    GroupFile(*primary);
    Json primary_rules = UrlMapFile(*primary);
    // A system whose servers come from a file and that has no URL map file:
    // kwd reads the ICF URL map only through a SapSystem's message server.
    for (System& system : systems_) {
      bool has_url_map_file =
          &system == primary && url_map_ != nullptr && IsFileLocation(url_map_->value);
      if (system.ms_host.empty() && system_diag_.count(system.name) > 0 && !has_url_map_file) {
        Warn(*system.param,
             "no URL map for this system: kwd fetches the ICF URL map only through a message "
             "server (MSHOST=, rdisp/mshost); without one every path but the root goes to the "
             "Java group. Give wdisp/url_map_location = file://... or add "
             "UrlMapping.spec.rules");
      }
    }
    Json permissions = PermissionTable();
    // Every UrlMapping carries the rule files: the catch-all and one per
    // SRCVHOST system with groups (below).
    int carriers = 1;
    for (const System& system : systems_) {
      carriers += system_diag_.count(system.name) > 0 && !system.vhosts.empty() ? 1 : 0;
    }
    Json modifications = Modifications(carriers);

    // Passthrough group.
    std::string passthrough_group;
    if (passthrough_ && system_diag_.count(primary->name) > 0) {
      std::string smlg;
      if (dest_logon_group_ != nullptr) {
        smlg = dest_logon_group_->value;
      }
      Group& group =
          AddGroup(primary->prefix + (smlg.empty() ? "diags" : KubernetesName(smlg) + "-https"),
                   "abap", *primary, smlg);
      group.reencrypt = true;  // the HTTPS ports of the servers
      group.passthrough = true;
      if (system_instances_.count(primary->name) > 0) {
        FillStaticGroup(group, *primary);
      }
      passthrough_group = group.name;
    } else if (passthrough_) {
      Add(Level::kWarn, profile_name_, 0, "icm/server_port_<xx>",
          "PROT=ROUTER: no system to pass connections to");
    }

    // LogonGroups.
    std::vector<const Group*> sorted;
    for (const Group& group : groups_) {
      sorted.push_back(&group);
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const Group* a, const Group* b) { return a->name < b->name; });
    for (const Group* group : sorted) {
      Json object = Object("LogonGroup", group->name, GroupSpec(*group));
      if (!Charge(JsonBytes(object), "LogonGroup " + group->name)) {
        return;
      }
      result_.objects.push_back(std::move(object));
    }
    // Every UrlMapping carries these (SAP applies them to every request):
    // with many SRCVHOST systems, the bulk of the output.
    std::size_t shared_bytes = JsonBytes(permissions) + JsonBytes(modifications);

    // UrlMappings: the catch-all (no hosts), then one per SRCVHOST system.
    std::vector<std::pair<std::string, Json>> mappings;
    {
      Json spec = Json::object();
      if (root_handler_) {
        spec["defaultRootHandler"] = *root_handler_;
      }
      Json rules = Json::array();
      if (catch_all_has_default) {
        AddDefaults(*primary, &spec);
        for (const auto& rule : primary_rules) {
          rules.push_back(rule);
        }
      }
      // Other systems chosen by URL prefix.
      for (const System& system : systems_) {
        if (!system.vhosts.empty() || system_diag_.count(system.name) == 0) {
          continue;
        }
        for (const std::string& url : system.urls) {
          rules.push_back(
              Json{{"prefix", url}, {"kind", "abap"}, {"logonGroup", system_diag_[system.name]}});
        }
        if (!system.urls.empty()) {
          Note(*system.param, "SRCURL= prefixes become abap rules to LogonGroup " +
                                  system_diag_[system.name] +
                                  "; kwd does not consult that system's ICF URL map below them");
        }
      }
      if (!rules.empty()) {
        spec["rules"] = SortRules(rules);
      }
      if (catch_all_has_default && UsesUrlMapFromSystem(*primary, *primary)) {
        spec["fromSapSystem"] = primary->name;
      }
      if (!passthrough_group.empty()) {
        spec["passthroughGroup"] = passthrough_group;
      }
      std::string name = catch_all_has_default ? primary->name : "dispatcher";
      if (!Fits(JsonBytes(spec) + shared_bytes, "UrlMapping " + name)) {
        return;
      }
      AddShared(permissions, modifications, &spec);
      if (catch_all_has_default && !primary->sid.empty() && systems_.size() > 1) {
        spec["system"] = Json{{"sid", primary->sid}};
      }
      if (!Charge(ObjectBytes("UrlMapping", name, spec), "UrlMapping " + name)) {
        return;
      }
      mappings.emplace_back(name, std::move(spec));
    }
    for (System& system : systems_) {
      bool has_groups = system_diag_.count(system.name) > 0;
      bool vhost_system = !system.vhosts.empty();
      if (!has_groups || !vhost_system) {
        continue;
      }
      Json spec = Json::object();
      if (vhost_system) {
        spec["hosts"] = system.vhosts;
        if (!system.urls.empty()) {
          Warn(*system.param,
               "SRCURL= together with SRCVHOST=: kwd sends every request for "
               "these hosts to this system");
        }
      }
      if (root_handler_) {
        spec["defaultRootHandler"] = *root_handler_;
      }
      AddDefaults(system, &spec);
      if (&system == primary && !primary_rules.empty()) {
        spec["rules"] = primary_rules;
      }
      if (UsesUrlMapFromSystem(system, *primary)) {
        spec["fromSapSystem"] = system.name;
      }
      std::string name = system.name;
      if (name == mappings.front().first) {
        name += "-vhost";
      }
      // Checked before the copy: S systems x M rule files is quadratic.
      if (!Fits(JsonBytes(spec) + shared_bytes, "UrlMapping " + name)) {
        return;
      }
      AddShared(permissions, modifications, &spec);
      if (!system.sid.empty() && systems_.size() > 1) {
        spec["system"] = Json{{"sid", system.sid}};
      }
      if (!Charge(ObjectBytes("UrlMapping", name, spec), "UrlMapping " + name)) {
        return;
      }
      mappings.emplace_back(name, std::move(spec));
    }
    std::set<std::string> url_map_users;
    for (const auto& [name, spec] : mappings) {
      if (spec.contains("fromSapSystem")) {
        url_map_users.insert(spec["fromSapSystem"].get<std::string>());
      }
    }
    // SapSystems.
    std::vector<const System*> by_name;
    for (const System& system : systems_) {
      by_name.push_back(&system);
    }
    std::sort(by_name.begin(), by_name.end(),
              [](const System* a, const System* b) { return a->name < b->name; });
    std::vector<Json> sap_systems;
    for (const System* system_ptr : by_name) {
      const System& system = *system_ptr;
      if (system.ms_host.empty()) {
        continue;
      }
      Json spec = Json::object();
      if (!system.sid.empty()) {
        spec["sid"] = system.sid;
      }
      Json ms = {{"host", system.ms_host}};
      if (system.https_port != 0) {
        ms["httpsPort"] = system.https_port;
      } else {
        ms["httpPort"] = system.http_port;
      }
      spec["messageServer"] = ms;
      if (&system == primary && !server_list_path_.empty()) {
        spec["serverListPath"] = server_list_path_;
      }
      if (auto_refresh_) {
        spec["refreshIntervalSeconds"] = *auto_refresh_;
      }
      bool uses_groups = std::any_of(groups_.begin(), groups_.end(), [&](const Group& g) {
        return g.system == system.name && !g.smlg.empty() && !g.is_static;
      });
      if (uses_groups) {
        spec["logonGroups"] = true;
        if (&system == primary && !group_info_path_.empty()) {
          spec["groupInfoPath"] = group_info_path_;
        }
      }
      if (url_map_users.count(system.name) > 0) {
        spec["urlMap"] = true;
        if (&system == primary && !url_map_path_.empty()) {
          spec["urlMapPath"] = url_map_path_;
        }
      }
      Json object = Object("SapSystem", system.name, spec);
      if (!Charge(JsonBytes(object), "SapSystem " + system.name)) {
        return;
      }
      sap_systems.push_back(std::move(object));
    }

    result_.objects.insert(result_.objects.begin(), sap_systems.begin(), sap_systems.end());
    std::sort(mappings.begin() + 1, mappings.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [name, spec] : mappings) {
      result_.objects.push_back(Object("UrlMapping", name, spec));  // charged above
    }
  }

  bool UsesUrlMapFromSystem(const System& system, const System& primary) const {
    if (system.ms_host.empty()) {
      return false;
    }
    return &system != &primary || url_map_ == nullptr || !IsFileLocation(url_map_->value);
  }

  void CheckSrcSrv(Param& param, const std::string& value) {
    bool all = true;
    std::vector<std::int64_t> ports;
    for (const Listener& l : listeners_) {
      ports.push_back(l.port);
    }
    bool matches_any = false;
    for (const auto& item : SplitList(value, ';')) {
      std::string port =
          item.substr(item.rfind(':') == std::string::npos ? 0 : item.rfind(':') + 1);
      if (port == "*") {
        matches_any = true;
        continue;
      }
      auto number = ParsePort(port);
      int matched = 0;
      for (auto p : ports) {
        matched += number && *number == p ? 1 : 0;
      }
      matches_any = matches_any || matched > 0;
      all = all && matched == static_cast<int>(ports.size());
    }
    if (value.find("*:*") != std::string::npos || all) {
      return;  // every listener: no restriction
    }
    if (!matches_any) {
      Warn(param, "SRCSRV=" + Shown(value) +
                      " names no listener of this profile (a typo?); kwd does not select "
                      "systems by listener and ignores it");
    } else {
      Warn(param, "SRCSRV=" + Shown(value) +
                      ": kwd does not select systems by listener port; use a host name "
                      "(SRCVHOST=, UrlMapping.spec.hosts) or a URL prefix instead");
    }
  }

  void AddDefaults(const System& system, Json* spec) {
    Json defaults = Json::object();
    if (system_diag_.count(system.name) > 0) {
      defaults["abap"] = system_diag_[system.name];
      defaults["java"] = system_j2ee_[system.name];
    }
    if (!defaults.empty()) {
      (*spec)["defaultGroups"] = defaults;
    }
  }

  void AddShared(const Json& permissions, const Json& modifications, Json* spec) {
    if (!permissions.empty()) {
      (*spec)["permissions"] = permissions;
    }
    if (client_protocol_ || access_points_) {
      Json headers = Json::object();
      if (client_protocol_) {
        headers["clientProtocol"] = *client_protocol_;
      }
      if (access_points_) {
        headers["accessPoints"] = *access_points_;
      }
      (*spec)["sapHeaders"] = headers;
    }
    if (!modifications.empty()) {
      (*spec)["modifications"] = modifications;
    }
  }

  static Json SortRules(Json rules) {
    std::vector<Json> list(rules.begin(), rules.end());
    std::stable_sort(list.begin(), list.end(), [](const Json& a, const Json& b) {
      return a["prefix"].get<std::string>() < b["prefix"].get<std::string>();
    });
    return Json(list);
  }

  void FillStatic(const System& system, const std::string& which) {
    for (Group& group : groups_) {
      if (group.system == system.name && group.smlg.empty() &&
          group.name == system.prefix + which) {
        FillStaticGroup(group, system);
      }
    }
  }

  void FillStaticGroup(Group& group, const System& system) {  // NOLINT: reports on system.param
    group.is_static = true;
    std::set<std::string> members;
    if (!group.smlg.empty()) {
      auto it = smlg_members_.find(group.smlg);
      if (it != smlg_members_.end()) {
        members.insert(it->second.begin(), it->second.end());
      }
    }
    for (const model::SapInstance& instance : system_instances_[system.name]) {
      bool stack = group.kind == "abap" ? instance.abap : instance.java;
      std::uint32_t port = group.reencrypt ? instance.https_port : instance.http_port;
      if ((group.smlg.empty() && !stack) ||
          (!group.smlg.empty() && members.count(instance.name) == 0)) {
        continue;
      }
      if (port == 0) {
        Add(Level::kWarn, profile_name_, system.param->entry->line, system.param->entry->name,
            "instance " + instance.name + " has no " + (group.reencrypt ? "HTTPS" : "HTTP") +
                " port in the server info file: left out of LogonGroup " + group.name);
        system.param->warned = true;
        continue;
      }
      Json server = {{"name", instance.name}, {"address", instance.address}, {"port", port}};
      if (instance.capacity > 0) {
        server["capacity"] = instance.capacity;
      }
      group.static_servers.push_back(server);
    }
  }

  // wdisp/group_info_location: a file's SMLG groups become LogonGroups.
  void GroupFile(const System& primary) {
    if (group_info_ == nullptr) {
      return;
    }
    if (!IsFileLocation(group_info_->value)) {
      if (group_info_->value.empty() || group_info_->value.front() != '/' ||
          !IsPathText(group_info_->value)) {
        Warn(*group_info_, Shown(group_info_->value) + " is not a path or file:// location");
      } else {
        group_info_path_ = group_info_->value;
      }
      return;
    }
    std::string text;
    std::string shown;
    if (!ReadNamed(*group_info_, group_info_->value, &text, &shown)) {
      return;
    }
    auto parsed = sapsystem::ParseGroupInfo(text);
    if (!parsed.ok) {
      FileWarn(*group_info_, shown, 0, "not a group file: " + parsed.error);
      return;
    }
    SkipWarnings(*group_info_, shown, parsed.skips, "group line");
    if (system_diag_.count(primary.name) == 0) {
      return;
    }
    bool is_static = system_instances_.count(primary.name) > 0;
    for (const auto& [smlg, members] : parsed.groups) {
      smlg_members_[smlg] = members;
      Group& group = AddGroup(primary.prefix + KubernetesName(smlg), "abap", primary, smlg);
      smlg_groups_[smlg] = group.name;
      if (is_static) {
        FillStaticGroup(group, primary);
      }
    }
    if (!is_static) {
      Note(*group_info_, "the groups of " + shown +
                             " become LogonGroups with backend.sapSystem.logonGroup; their "
                             "members come from the system's ICF group service "
                             "(SapSystem.spec.logonGroups), not from the file");
    }
  }

  // wdisp/url_map_location: a file's prefixes become rules; else the
  // system's ICF URL map (SapSystem.spec.urlMap, UrlMapping.spec.fromSapSystem).
  Json UrlMapFile(System& primary) {
    Json rules = Json::array();
    if (url_map_ == nullptr) {
      return rules;
    }
    if (!IsFileLocation(url_map_->value)) {
      if (url_map_->value.empty() || url_map_->value.front() != '/' ||
          !IsPathText(url_map_->value)) {
        Warn(*url_map_, Shown(url_map_->value) + " is not a path or file:// location");
      } else {
        url_map_path_ = url_map_->value;
      }
      return rules;
    }
    std::string text;
    std::string shown;
    if (!ReadNamed(*url_map_, url_map_->value, &text, &shown)) {
      return rules;
    }
    auto parsed = sapsystem::ParseUrlMap(text);
    if (!parsed.ok) {
      FileWarn(*url_map_, shown, 0, "not a URL map: " + parsed.error);
      return rules;
    }
    SkipWarnings(*url_map_, shown, parsed.skips, "URL map entry");
    if (system_diag_.count(primary.name) == 0) {
      return rules;
    }
    bool is_static = system_instances_.count(primary.name) > 0;
    for (const model::SapUrlPrefix& entry : parsed.prefixes) {
      std::string kind = entry.java ? "java" : "abap";
      Json rule = {{"prefix", entry.prefix}, {"kind", kind}};
      if (!entry.logon_group.empty()) {
        auto it = smlg_groups_.find(entry.logon_group);
        if (it == smlg_groups_.end()) {
          Group& group = AddGroup(primary.prefix + KubernetesName(entry.logon_group), kind, primary,
                                  entry.logon_group);
          it = smlg_groups_.emplace(entry.logon_group, group.name).first;
          if (is_static) {
            FillStaticGroup(group, primary);
          }
        }
        const Group* group = FindGroup(it->second);
        if (group != nullptr && group->kind != kind) {
          FileWarn(*url_map_, shown, 0,
                   "prefix " + entry.prefix + ": group " + entry.logon_group + " is " +
                       group->kind + " elsewhere; this " + kind +
                       " prefix goes to the default group instead");
        } else {
          rule["logonGroup"] = it->second;
        }
      }
      rules.push_back(rule);
    }
    return rules;
  }

  const Group* FindGroup(const std::string& name) const {
    for (const Group& group : groups_) {
      if (group.name == name) {
        return &group;
      }
    }
    return nullptr;
  }

  // wdisp/permission_table: "P|D|S pattern" lines.
  Json PermissionTable() {
    Json out = Json::array();
    if (permission_table_ == nullptr || permission_table_->value.empty()) {
      return out;  // empty: SAP's way to switch the table off
    }
    std::string text;
    std::string shown;
    if (!ReadNamed(*permission_table_, permission_table_->value, &text, &shown)) {
      return out;
    }
    int number = 0;
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      std::string line =
          text.substr(start, end == std::string::npos ? std::string::npos : end - start);
      start = end == std::string::npos ? text.size() : end + 1;
      ++number;
      for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
          line.resize(i);
          break;
        }
      }
      std::vector<std::string> words;
      for (auto& word : SplitList(line, ' ')) {
        for (auto& part : SplitList(word, '\t')) {
          if (!part.empty() && part != "\r") {
            if (part.back() == '\r') {
              part.pop_back();
            }
            words.push_back(part);
          }
        }
      }
      if (words.empty()) {
        continue;
      }
      std::string action = Upper(words[0]);
      std::string kwd_action = action == "P"   ? "permit"
                               : action == "D" ? "deny"
                               : action == "S" ? "secure"
                                               : "";
      if (kwd_action.empty() || words.size() != 2) {
        FileWarn(*permission_table_, shown, number,
                 "not a \"P|D|S pattern\" line; entry left out" +
                     std::string(kwd_action == "deny" || kwd_action == "secure"
                                     ? " (a denial is lost: review the table)"
                                     : ""));
        continue;
      }
      const std::string& pattern = words[1];
      std::size_t star = pattern.find('*', 1);
      if ((star != std::string::npos && star != pattern.size() - 1) ||
          !IsPathText(Lower(pattern))) {
        FileWarn(*permission_table_, shown, number,
                 "pattern " + Shown(pattern) +
                     " is not a URL path with * only at the start or the end; entry left out" +
                     (kwd_action != "permit" ? " (a denial is lost: review the table)" : ""));
        continue;
      }
      out.push_back(Json{{"action", kwd_action}, {"pattern", pattern}});
    }
    return out;
  }

  // icm/HTTP/redirect_<xx> = PREFIX=/p[, FROM=glob][, FROMPROT=http|https]
  // [, TO=/t][, PROT=, HOST=, PORT=]: SAP answers 301 when the path is
  // exactly PREFIX (no FROM=), never reaching a server. Written as one rule
  // per entry:
  //   [if %{SERVER_PROTOCOL} stricmp "http"]
  //   RegRedirectUrl ^/p$ TARGET [CODE=permanent]
  // With FROM= (SAP documents only "a URL pattern with * and ?"; kwd's
  // choice, docs/migrating-from-sap-web-dispatcher.md): the whole path must
  // begin with PREFIX and match the pattern (`*` any run of characters, `/`
  // included, `?` one), with case; TARGET is TO= or else the path itself:
  //   [if %{SERVER_PROTOCOL} stricmp "http" [and]]
  //   if %{PATH} regmatch ^/p
  //   RegRedirectUrl ^(GLOB)$ TARGET-or-$1 [CODE=permanent]
  // `budget` and `mappings` as for Modifications; `*instructions` is set to
  // what the patterns of the returned rules cost.
  std::string RedirectRules(int64_t budget, int mappings, int64_t* instructions) {
    std::string rules;
    *instructions = 0;  // of the patterns in `rules`
    const int64_t limit = std::min(budget, modification::kMaxProgramInstructions);
    std::stable_sort(redirects_.begin(), redirects_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [index, param] : redirects_) {
      OptionList options = ParseOptions(param->value);
      const std::string* prefix = options.Find("PREFIX");
      if (!options.malformed.empty() || !options.duplicates.empty() || prefix == nullptr ||
          prefix->empty() || prefix->front() != '/' || !IsPathText(*prefix)) {
        Warn(*param, "not a PREFIX=/path[, TO=...] redirect; not translated");
        continue;
      }
      bool usable = true;
      for (const auto& [key, value] : options.options) {
        bool known = key == "PREFIX" || key == "TO" || key == "FROMPROT" || key == "PROT" ||
                     key == "HOST" || key == "PORT" || key == "FROM";
        bool blank = value.find_first_of(" \t") != std::string::npos;
        if (!known || blank || value.empty() || HasControl(value)) {
          Warn(*param, key + "=" + Shown(value) + (known ? " is not usable" : " is not known") +
                           "; redirect not translated");
          usable = false;
        }
      }
      if (!usable) {
        continue;
      }
      const std::string* to = options.Find("TO");
      const std::string* prot = options.Find("PROT");
      const std::string* host = options.Find("HOST");
      const std::string* port = options.Find("PORT");
      const std::string* from_prot = options.Find("FROMPROT");
      const std::string* from = options.Find("FROM");
      if ((prot != nullptr || port != nullptr) && host == nullptr) {
        Warn(*param, "PROT= and PORT= need HOST= (as in SAP); redirect not translated");
        continue;
      }
      std::string from_probe = from != nullptr ? *from : std::string();
      std::replace(from_probe.begin(), from_probe.end(), '?', 'x');  // a wildcard, not a query
      if (from != nullptr && !IsPathText(from_probe)) {
        Warn(*param, "FROM=" + Shown(*from) + " is not a path pattern; redirect not translated");
        continue;
      }
      if (from != nullptr && from->find('%') != std::string::npos) {
        // The rule matches the decoded path: "%20" there never matches.
        Warn(*param, "FROM=" + Shown(*from) +
                         " holds %-escapes (kwd matches the decoded path); redirect not "
                         "translated");
        continue;
      }
      if (from != nullptr && !GlobMatchesUnder(*prefix, *from)) {
        // The rule asks for both: it would never fire.
        Warn(*param, "FROM=" + Shown(*from) + " matches no path that begins with PREFIX=" +
                         Shown(*prefix) + " (a path must do both); redirect not translated");
        continue;
      }
      // The target is written into a rule as it is: nothing in it may read as
      // a back reference ($0-$9), a variable (%{...}), options ([...]) or a
      // quoted argument, and HOST= and PORT= stay a host name and a port.
      if (to != nullptr && !IsLiteralRuleText(*to)) {
        Warn(*param, "TO=" + Shown(*to) +
                         " holds $<digit>, %{, [, \" or \\ that a rule would not take as "
                         "text; redirect not translated");
        continue;
      }
      if (host != nullptr && !IsRedirectHost(Lower(*host))) {
        Warn(*param, "HOST=" + Shown(*host) + " is not a host name; redirect not translated");
        continue;
      }
      if (port != nullptr && (port->size() > 5 || !ParsePort(*port))) {
        Warn(*param, "PORT=" + Shown(*port) + " is not a port number; redirect not translated");
        continue;
      }
      if (from != nullptr && to == nullptr && host == nullptr) {
        // The same path, scheme and host: every matching request again.
        Warn(*param,
             "FROM= without TO= or HOST= redirects each path to itself (a loop); redirect not "
             "translated");
        continue;
      }
      if (from == nullptr && host == nullptr && (to == nullptr || *to == *prefix)) {
        // PREFIX itself, on the same scheme and host: the answer is asked again.
        Warn(*param, "PREFIX=" + Shown(*prefix) +
                         " redirects to itself without another TO= or a HOST= (a loop); "
                         "redirect not translated");
        continue;
      }
      std::string target = to != nullptr ? *to : from != nullptr ? "$1" : *prefix;
      if (host != nullptr) {
        std::string scheme = prot != nullptr ? Lower(*prot) : "http";
        if (scheme != "http" && scheme != "https") {
          Warn(*param, "PROT=" + Shown(*prot) + " is not http or https; not translated");
          continue;
        }
        target = scheme + "://" + *host + (port != nullptr ? ":" + *port : "") + target;
      }
      std::string conditions;
      if (from_prot != nullptr) {
        std::string scheme = Lower(*from_prot);
        if (scheme != "http" && scheme != "https") {
          Warn(*param, "FROMPROT=" + Shown(*from_prot) + " is not http or https; not translated");
          continue;
        }
        conditions += "if %{SERVER_PROTOCOL} stricmp \"" + scheme + "\"";
      }
      std::string entry;
      if (from == nullptr) {
        entry += conditions.empty() ? "" : conditions + "\n";
        entry += "RegRedirectUrl ^" + RegexLiteral(*prefix) + "$ " + target + " [CODE=permanent]\n";
      } else {
        entry += conditions.empty() ? "" : conditions + " [and]\n";
        entry += "if %{PATH} regmatch ^" + RegexLiteral(*prefix) + "\n";
        std::string glob;
        for (char c : *from) {
          glob += c == '*'   ? std::string(".*")
                  : c == '?' ? std::string(".")
                             : RegexLiteral(std::string(1, c));
        }
        entry += "RegRedirectUrl ^(" + glob + ")$ " + target + " [CODE=permanent]\n";
      }
      // The controller compiles the rule file whole, within a bound on its
      // patterns' size (kMaxProgramInstructions, and the UrlMapping's files
      // together `budget`): an entry that would not compile, or take the
      // file past the bound, is left out rather than have the UrlMapping
      // refused.
      modification::ParseError error;
      auto program = modification::Program::CompileText(entry, &error);
      if (program == nullptr || *instructions + program->regex_instructions() > limit) {
        Warn(*param, (program == nullptr ? "its rule does not compile (" + error.message + ")"
                      : limit == modification::kMaxProgramInstructions
                          ? std::string("its rule's patterns take the redirects past what one "
                                        "rule file may compile")
                          : "its rule's patterns take the redirects past " +
                                BudgetText(limit, mappings)) +
                         "; redirect not translated");
        continue;
      }
      *instructions += program->regex_instructions();
      rules += entry;
      Note(*param,
           "written as a RegRedirectUrl rule (301) in UrlMapping.spec.modifications, before the "
           "rule files" +
               std::string(from == nullptr ? ""
                                           : std::string("; FROM= is matched against the whole "
                                                         "path, with case") +
                                                 (to == nullptr ? ", and the redirect keeps the path"
                                                                : "")));
    }
    return rules;
  }

  // Whether some path both begins with `prefix` and matches the whole of
  // `glob` as the redirect rule reads it: `*` any run of characters (`/`
  // included), `?` any one character (`/` included), anything else itself,
  // with case. With a `*` in the glob, whatever follows the part before the
  // first `*` is taken by that `*`, so only that part and `prefix` must agree
  // character by character where both have one; without, `prefix` must agree
  // with the start of the glob and be no longer. Linear in their lengths.
  static bool GlobMatchesUnder(std::string_view prefix, std::string_view glob) {
    std::size_t star = glob.find('*');
    std::string_view head = glob.substr(0, star);
    if (star == std::string_view::npos && prefix.size() > glob.size()) {
      return false;
    }
    for (std::size_t i = 0; i < prefix.size() && i < head.size(); ++i) {
      if (head[i] != '?' && head[i] != prefix[i]) {
        return false;
      }
    }
    return true;
  }

  // Whether a rule's destination takes `text` as it is (common/modification
  // rules.cc: back references, variables, options, quoting).
  static bool IsLiteralRuleText(std::string_view text) {
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if ((c == '$' && i + 1 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '9') ||
          (c == '%' && i + 1 < text.size() && text[i + 1] == '{') || c == '[' || c == ']' ||
          c == '"' || c == '\\') {
        return false;
      }
    }
    return true;
  }

  // A host name (letters, digits, '-', '.') or an IPv6 literal in brackets.
  static bool IsRedirectHost(std::string_view host) {
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      return std::all_of(host.begin() + 1, host.end() - 1, [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == ':' || c == '.';
      });
    }
    return !host.empty() && host.front() != '*' && IsVirtualHost(host);
  }

  // `text` as a regular expression that matches it literally.
  static std::string RegexLiteral(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (std::string_view("\\.^$|?*+()[]{}").find(c) != std::string_view::npos) {
        out.push_back('\\');
      }
      out.push_back(c);
    }
    return out;
  }

  static bool HasControl(std::string_view text) {
    return std::any_of(text.begin(), text.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  }

  // icm/HTTP/mod_<xx>: each rule file pasted as it is.
  // What one UrlMapping's rule files may cost together (RE2 instructions)
  // when `mappings` UrlMappings each carry them: the controller's bound on
  // one UrlMapping, and its share of the bound on all of them.
  static int64_t RuleFileBudget(int mappings) {
    return std::min(modification::kMaxMappingInstructions,
                    modification::kMaxClusterInstructions / std::max(mappings, 1));
  }
  static std::string BudgetText(int64_t budget, int mappings) {
    if (budget == modification::kMaxMappingInstructions) {
      return "what one UrlMapping's rule files may compile together (" +
             std::to_string(budget) + " regex instructions)";
    }
    return std::to_string(budget) + " regex instructions (all UrlMappings' rule files may " +
           "compile " + std::to_string(modification::kMaxClusterInstructions) +
           " together, and each of the " + std::to_string(mappings) + " UrlMappings carries them)";
  }

  // spec.modifications of every UrlMapping (`mappings` of them carry it):
  // the redirects' rule file, then the rule files in profile order, within
  // what the controller compiles (RuleFileBudget).
  Json Modifications(int mappings) {
    Json out = Json::array();
    const int64_t budget = RuleFileBudget(mappings);
    int64_t used = 0;
    if (std::string redirects = RedirectRules(budget, mappings, &used); !redirects.empty()) {
      out.push_back(Json{{"prefix", "/"}, {"rules", redirects}});
    }
    std::sort(mods_.begin(), mods_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [index, param] : mods_) {
      OptionList options = ParseOptions(param->value);
      const std::string* prefix = options.Find("PREFIX");
      const std::string* file = options.Find("FILE");
      for (const auto& [key, value] : options.options) {
        if (key != "PREFIX" && key != "FILE") {
          Warn(*param, key + "= is not translated");
        }
      }
      if (prefix == nullptr || prefix->empty() || prefix->front() != '/' || !IsPathText(*prefix)) {
        Warn(*param, "PREFIX= is missing or not a URL path; left out");
        continue;
      }
      if (file == nullptr || file->empty()) {
        continue;  // SAP's default `PREFIX=/` without a file does nothing
      }
      std::string text;
      std::string shown;
      if (!ReadNamed(*param, *file, &text, &shown)) {
        continue;
      }
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        Note(*param, shown + " is empty: nothing to translate");
        continue;
      }
      // Pasted as it is, but read as the controller will: a file kwd's rule
      // parser refuses (or whose patterns RE2 does not compile) makes the
      // UrlMapping rejected, which the import must say. Once per file.
      auto verdict = rule_file_verdicts_.find(shown);
      if (verdict == rule_file_verdicts_.end()) {
        modification::ParseError error;
        auto program = modification::Program::CompileText(text, &error);
        RuleFileVerdict checked;
        if (program == nullptr) {
          checked.error = error;
        } else {
          checked.instructions = program->regex_instructions();
        }
        verdict = rule_file_verdicts_.emplace(shown, std::move(checked)).first;
      }
      if (verdict->second.error) {
        const modification::ParseError& error = *verdict->second.error;
        param->warned = true;
        result_.diagnostics.push_back(
            {Level::kWarn, shown, error.line, error.column, param->entry->name,
             "not a rule file kwd reads: " + error.message +
                 "; the controller rejects the UrlMapping until it is fixed"});
      } else if (used + verdict->second.instructions > budget) {
        // Past the controller's bound on a UrlMapping's files together, the
        // whole UrlMapping would be refused: this file is left out instead
        // (the ones after it still go in when they fit).
        Warn(*param, shown + ": its patterns (" + std::to_string(verdict->second.instructions) +
                         " regex instructions) take the rule files past " +
                         BudgetText(budget, mappings) + "; left out");
        continue;
      } else {
        used += verdict->second.instructions;
      }
      out.push_back(Json{{"prefix", *prefix}, {"rules", text}});
    }
    return out;
  }

  Json GroupSpec(const Group& group) const {
    Json spec = {{"kind", group.kind}};
    if (strategy_) {
      spec["strategy"] = *strategy_;
    }
    Json backend = Json::object();
    if (group.is_static) {
      backend["staticServers"] = group.static_servers;
    } else {
      Json sap = {{"name", group.system}};
      if (!group.smlg.empty()) {
        sap["logonGroup"] = group.smlg;
      }
      backend["sapSystem"] = sap;
    }
    spec["backend"] = backend;
    Json health = Json::object();
    if (ping_path_ && group.kind == "abap") {
      health["path"] = *ping_path_;
    }
    if (auto_refresh_) {
      health["intervalSeconds"] = *auto_refresh_;
    }
    if (info_timeout_) {
      health["timeoutSeconds"] = *info_timeout_;
    }
    if (!health.empty() && !group.passthrough) {
      spec["healthCheck"] = health;
    }
    Json affinity = Json::object();
    if (no_ext_sid_ || no_jsessionid_) {
      Json identifiers = Json::array({"sap-contextid", "saplb"});
      if (!no_jsessionid_) {
        identifiers.push_back("jsessionid");
      }
      if (!no_ext_sid_) {
        identifiers.push_back("sap-ext-sid");
      }
      affinity["identifiers"] = identifiers;
    }
    Json table = Json::object();
    if (session_entries_) {
      table["maxEntries"] = *session_entries_;
    }
    if (session_timeout_) {
      table["idleTimeoutSeconds"] = *session_timeout_;
    }
    if (!table.empty()) {
      affinity["sessionTable"] = table;
    }
    if (group.passthrough) {
      Json client_ip = Json::object();
      client_ip["mask"] = sticky_mask_.value_or("255.255.240.0");
      if (client_ip_entries_) {
        client_ip["maxEntries"] = *client_ip_entries_;
      }
      if (client_ip_timeout_) {
        client_ip["idleTimeoutSeconds"] = *client_ip_timeout_;
      }
      affinity["clientIP"] = client_ip;
    }
    if (!affinity.empty()) {
      spec["sessionAffinity"] = affinity;
    }
    // A static passthrough group lists the HTTPS ports itself; a sapSystem
    // group takes them with upstreamTLS reencrypt.
    if (group.reencrypt && !(group.passthrough && group.is_static)) {
      Json tls = {{"mode", "reencrypt"}};
      if (ssl_certhost_) {
        tls["serverName"] = *ssl_certhost_;
      }
      if (client_cert_ && !group.passthrough) {
        tls["clientCertSecret"] = "kwd-upstream-client";
      }
      spec["upstreamTLS"] = tls;
    }
    return spec;
  }

  // ---- the bound on the output ----

  static std::size_t JsonBytes(const Json& json) {
    return json.dump(-1, ' ', false, Json::error_handler_t::replace).size();
  }
  // The compact JSON size of Object(kind, name, spec), without building it.
  std::size_t ObjectBytes(std::string_view kind, const std::string& name, const Json& spec) const {
    return JsonBytes(Object(kind, name, Json::object())) - 2 + JsonBytes(spec);
  }
  // False (with one ERROR) once the objects would pass kMaxOutputBytes.
  bool Fits(std::size_t bytes, const std::string& what) {
    if (result_.output_bytes + bytes <= kMaxOutputBytes) {
      return !over_output_bound_;
    }
    return Charge(bytes, what);
  }
  bool Charge(std::size_t bytes, const std::string& what) {
    result_.output_bytes += bytes;
    if (result_.output_bytes > kMaxOutputBytes && !over_output_bound_) {
      over_output_bound_ = true;
      Error(profile_name_, 0, "",
            what + " takes the objects past " + std::to_string(kMaxOutputBytes) +
                " bytes; nothing is written. Every UrlMapping (one per SRCVHOST system) carries "
                "all icm/HTTP/mod_<xx> rule files, icm/HTTP/redirect_<xx> rules and the "
                "permission table: import fewer systems or rule files at a time");
    }
    return !over_output_bound_;
  }

  Json Object(std::string_view kind, const std::string& name, const Json& spec) const {
    return Json{{"apiVersion", kApiVersion},
                {"kind", kind},
                {"metadata", Json{{"name", name}, {"namespace", options_.namespace_}}},
                {"spec", spec}};
  }

  void Finish() {
    // Re-encryption and its client credentials.
    bool any_reencrypt = std::any_of(groups_.begin(), groups_.end(),
                                     [](const Group& g) { return g.reencrypt && !g.passthrough; });
    if (ssl_encrypt_param_ != nullptr && ssl_encrypt_ == 1) {
      bool plain = std::any_of(listeners_.begin(), listeners_.end(),
                               [](const Listener& l) { return l.prot == "HTTP"; });
      if (plain) {
        Note(*ssl_encrypt_param_,
             "1 keeps the client's protocol in SAP; kwd re-encrypts every request of the "
             "groups (upstreamTLS.mode reencrypt), also those that came in over plain HTTP");
      }
    }
    if (ssl_auth_ != nullptr) {
      auto mode = ParseInt(ssl_auth_->value);
      if (mode && *mode == 2 && any_reencrypt) {
        Warn(*ssl_auth_,
             "the client certificate for re-encryption is in an SAP PSE (wdisp/ssl_cred): "
             "export it into the kubernetes.io/tls Secret \"kwd-upstream-client\" (chart "
             "proxy.upstreamTLS.clientCertSecrets) that upstreamTLS.clientCertSecret names");
      } else if (!mode || *mode < 0 || *mode > 2) {
        Warn(*ssl_auth_, Shown(ssl_auth_->value) + " is not 0, 1 or 2; not translated");
      }
    }
    for (Param* p : client_pse_) {
      if (!p->warned && !p->noted) {
        Note(*p, any_reencrypt && client_cert_
                     ? "see wdisp/ssl_auth: the PSE's certificate goes into a Secret"
                     : "not needed: no client certificate is presented to the servers");
      }
    }
    if (server_pse_ != nullptr && !server_pse_->warned) {
      Note(*server_pse_, "not needed: no HTTPS listener");
    }
    if (!ssl_certhost_) {
      for (const Group& group : groups_) {
        if (!group.reencrypt || !group.is_static || group.passthrough) {
          continue;
        }
        for (const auto& server : group.static_servers) {
          const std::string address = server["address"].get<std::string>();
          // An address literal (IPv4 digits and dots, or IPv6 with colons).
          if (address.find_first_not_of("0123456789.") == std::string::npos ||
              address.find(':') != std::string::npos) {
            Add(Level::kWarn, profile_name_,
                ssl_encrypt_param_ != nullptr ? ssl_encrypt_param_->entry->line : 0,
                "wdisp/ssl_encrypt",
                "LogonGroup " + group.name +
                    ": re-encryption to IP addresses needs the name on the servers' "
                    "certificate (wdisp/ssl_certhost, upstreamTLS.serverName)");
            break;
          }
        }
      }
    }
    if (ssl_encrypt_param_ != nullptr && !any_reencrypt && ssl_encrypt_ > 0) {
      Note(*ssl_encrypt_param_, "no group to re-encrypt to");
    }
    for (const Param& param : params_) {
      if (!param.warned) {
        ++result_.translated;
      }
    }
    if (!chart_proxy_.empty()) {
      result_.chart_values["proxy"] = chart_proxy_;
    }
    if (client_cert_ && any_reencrypt) {
      result_.chart_values["proxy"]["upstreamTLS"] =
          Json{{"clientCertSecrets", Json::array({"kwd-upstream-client"})}};
    }
  }

  const std::string& profile_name_;
  const FileReader& read_file_;
  const ImportOptions& options_;
  ImportResult& result_;

  ParsedProfile parsed_;
  std::vector<Param> params_;
  bool over_output_bound_ = false;
  // Rule files checked with kwd's rule parser, by shown name: the first
  // error, else what its patterns cost (RE2 instructions).
  struct RuleFileVerdict {
    std::optional<modification::ParseError> error;
    int64_t instructions = 0;
  };
  std::map<std::string, RuleFileVerdict> rule_file_verdicts_;
  // Named files by reference, as read (before ToUtf8): a file that many
  // parameters name is read once.
  std::map<std::string, std::pair<std::string, std::string>> files_read_;
  std::size_t referenced_bytes_ = 0;

  Param* ms_host_ = nullptr;
  Param* ms_http_ = nullptr;
  Param* ms_https_ = nullptr;
  Param* server_info_ = nullptr;
  Param* group_info_ = nullptr;
  Param* url_map_ = nullptr;
  Param* permission_table_ = nullptr;
  Param* ssl_encrypt_param_ = nullptr;
  Param* ssl_auth_ = nullptr;
  Param* server_pse_ = nullptr;
  Param* verify_client_ = nullptr;
  Param* dest_logon_group_ = nullptr;
  std::vector<Param*> client_pse_;
  bool server_info_https_ = false;
  int ssl_encrypt_ = 0;
  bool client_cert_ = false;
  std::optional<std::string> ssl_certhost_;
  std::optional<std::int64_t> auto_refresh_;
  std::optional<std::int64_t> info_timeout_;
  std::optional<std::string> strategy_;
  bool no_ext_sid_ = false;
  bool no_jsessionid_ = false;
  std::optional<std::int64_t> session_entries_;
  std::optional<std::int64_t> session_timeout_;
  std::optional<std::string> ping_path_;
  std::optional<std::string> sticky_mask_;
  std::optional<std::int64_t> client_ip_entries_;
  std::optional<std::int64_t> client_ip_timeout_;
  std::optional<bool> client_protocol_;
  std::optional<bool> access_points_;
  std::optional<std::string> root_handler_;
  std::optional<std::int64_t> idle_timeout_;
  bool idle_from_port_ = false;
  std::optional<std::int64_t> response_timeout_;
  std::optional<std::int64_t> connect_timeout_ms_;
  std::optional<std::int64_t> max_body_bytes_;
  bool access_log_ = false;
  bool access_log_off_ = false;
  bool passthrough_ = false;

  std::vector<std::pair<int, Param*>> system_params_;
  std::vector<std::pair<int, Param*>> port_params_;
  std::vector<std::pair<int, Param*>> mods_;
  std::vector<std::pair<int, Param*>> redirects_;
  std::vector<std::pair<Param*, std::string>> srcsrv_;
  std::vector<Listener> listeners_;
  std::vector<System> systems_;
  std::vector<Group> groups_;
  std::set<std::string> group_names_;
  std::map<std::string, std::string> system_diag_;
  std::map<std::string, std::string> system_j2ee_;
  std::map<std::string, std::vector<model::SapInstance>> system_instances_;
  std::map<std::string, std::vector<std::string>> smlg_members_;
  std::map<std::string, std::string> smlg_groups_;  // SMLG name -> LogonGroup name
  std::string server_list_path_;
  std::string group_info_path_;
  std::string url_map_path_;
  std::vector<std::string> extra_args_;
  Json chart_proxy_ = Json::object();
  int suggestions_ = 0;
  std::map<std::string, std::string> vhost_owner_;  // host -> system name
};

}  // namespace

std::string Diagnostic::ToString() const {
  std::string out = level == Level::kNote ? "NOTE " : level == Level::kWarn ? "WARN " : "ERROR ";
  out += EscapeControlCharacters(file);
  if (line > 0) {
    out += ":" + std::to_string(line);
    if (column > 0) {
      out += ":" + std::to_string(column);
    }
  }
  if (!parameter.empty()) {
    out += " " + EscapeControlCharacters(parameter);
  }
  return out + ": " + EscapeControlCharacters(message);
}

bool ImportResult::HasErrors() const {
  return std::any_of(diagnostics.begin(), diagnostics.end(),
                     [](const Diagnostic& d) { return d.level == Level::kError; });
}

bool ImportResult::HasWarnings() const {
  return std::any_of(diagnostics.begin(), diagnostics.end(),
                     [](const Diagnostic& d) { return d.level == Level::kWarn; });
}

int ImportResult::ExitCode() const {
  if (HasErrors()) {
    return 1;
  }
  return HasWarnings() ? 3 : 0;
}

std::string KubernetesName(std::string_view sap_name) {
  std::string out;
  for (char c : sap_name) {
    char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9')) {
      out.push_back(lower);
    } else if (!out.empty() && out.back() != '-') {
      out.push_back('-');
    }
  }
  while (!out.empty() && out.back() == '-') {
    out.pop_back();
  }
  if (out.size() > 50) {
    out.resize(50);
    while (!out.empty() && out.back() == '-') {
      out.pop_back();
    }
  }
  return out;
}

ImportResult Import(std::string_view profile_text, const std::string& profile_name,
                    const FileReader& read_file, const ImportOptions& options) {
  ImportResult result;
  Importer importer(profile_name, read_file, options, &result);
  importer.Run(profile_text);
  // The API server refuses objects much over 1 MiB (etcd's request limit is
  // 1.5 MiB); a huge rule file or permission table would only fail at apply.
  constexpr std::size_t kMaxObjectBytes = 1024 * 1024;
  for (const auto& object : result.objects) {
    std::size_t bytes =
        object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size();
    if (bytes > kMaxObjectBytes) {
      result.diagnostics.push_back(
          {Diagnostic::Level::kWarn, profile_name, 0, 0, "",
           object["kind"].get<std::string>() + " " + object["metadata"]["name"].get<std::string>() +
               " is " + std::to_string(bytes) +
               " bytes: the API server refuses objects over about 1 MiB; split the rule files "
               "or the permission table"});
    }
  }
  // The profile's lines in order, then each named file's.
  std::stable_sort(result.diagnostics.begin(), result.diagnostics.end(),
                   [&](const Diagnostic& a, const Diagnostic& b) {
                     return std::tuple(a.file != profile_name, a.file, a.line) <
                            std::tuple(b.file != profile_name, b.file, b.line);
                   });
  return result;
}

}  // namespace kwd::importer
