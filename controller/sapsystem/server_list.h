#pragma once

// The SAP message server's application server list
// (/msgserver/text/logon?version=1.2) and the ICF group information
// (/sap/public/icf_info/icr_groups): pure parsers of untrusted bytes, and the
// pure step that turns a parsed list into a model::SapServerList. Formats and
// the choices made where SAP does not say: docs/discovery.md ("What kwd
// reads from the message server").
//
// Tolerant of layout (TAB or spaces, CRLF or LF, records with or without a
// blank line between them, unknown protocol types, any description), strict
// about what ends up in a snapshot, header, label or log: names and hosts are
// checked with common/snapshot_io.h's rules, and a bad line is skipped with
// a reason instead of refusing the whole list.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/model/model.h"
#include "controller/sapsystem/address_policy.h"

namespace kwd::sapsystem {

// A body larger than this is refused unread (the fetch stops there too).
inline constexpr std::size_t kMaxBodyBytes = 4 * 1024 * 1024;
// SAP's wdisp/max_servers allows at most 4096; more instances are skipped.
inline constexpr std::size_t kMaxInstances = 4096;
// SAP's wdisp/max_server_name_len is 64 by default, at most 128.
inline constexpr std::size_t kMaxInstanceNameLength = 128;
// SAP's wdisp/max_server_group_name_len is 20 by default, at most 64.
inline constexpr std::size_t kMaxGroupNameLength = 64;
// SAP's wdisp/max_url_map_entries allows at most 10000; more are skipped.
inline constexpr std::size_t kMaxUrlPrefixes = 10000;
// SAP's wdisp/max_url_map_path_len.
inline constexpr std::size_t kMaxUrlPrefixLength = 256;
// Skipped lines named in a message; the rest are only counted.
inline constexpr std::size_t kMaxSkipMessages = 5;

// Why a line or an instance was skipped: bounded values, used as the
// `reason` label of kwd_controller_sapsystem_entries_skipped_total.
enum class SkipReason {
  kMalformedRow,   // a service row with fewer than 3 fields, or a row outside a record
  kInvalidName,    // instance name: control characters, spaces, too long
  kInvalidHost,    // host field: not a host name or IP address
  kInvalidPort,    // port field: not 1 to 65535
  kDuplicateName,  // a second record with the same instance name
  kTooMany,        // beyond kMaxInstances
  kUnknownHost,    // the host does not resolve (and never did)
  kInvalidGroup,   // group information: a bad group or member name
  kInvalidPrefix,  // URL map: a prefix that is not a path prefix kwd can match
  kRefusedAddress,  // the host's addresses are all refused (address_policy.h)
};
std::string_view SkipReasonName(SkipReason reason);
inline constexpr SkipReason kAllSkipReasons[] = {
    SkipReason::kMalformedRow, SkipReason::kInvalidName,   SkipReason::kInvalidHost,
    SkipReason::kInvalidPort,  SkipReason::kDuplicateName, SkipReason::kTooMany,
    SkipReason::kUnknownHost,  SkipReason::kInvalidGroup,  SkipReason::kInvalidPrefix,
    SkipReason::kRefusedAddress};

struct Skips {
  std::map<SkipReason, std::size_t> counts;
  std::vector<std::string> messages;  // the first kMaxSkipMessages, control characters escaped

  void Add(SkipReason reason, std::string message);
  std::size_t total() const;
  // "3 entries skipped: line 4: ...; line 9: ..." or "".
  std::string Summary() const;
};

struct ServiceRow {
  std::string type;  // HTTP, HTTPS, DIAG, ... (upper case as sent)
  std::string host;  // checked: IsServerAddress
  std::uint32_t port = 0;
  std::string description;  // free text: only KEY=VALUE tokens are read
};

struct ParsedInstance {
  std::string name;  // checked: IsServerName, at most kMaxInstanceNameLength
  std::vector<ServiceRow> rows;
};

struct ParsedServerList {
  bool ok = false;
  std::string error;  // when !ok: why the body is not a server list (one line, escaped)
  int major = 0;
  int minor = 0;
  std::vector<ParsedInstance> instances;  // in body order
  Skips skips;
};

ParsedServerList ParseServerList(std::string_view body);

struct ParsedGroupInfo {
  bool ok = false;
  std::string error;
  std::map<std::string, std::vector<std::string>> groups;  // members sorted, unique
  Skips skips;
};

// The group file form (SAP's icrgroups.txt): "version 1.0", instance
// names, then "GROUP:member,member" lines. Tolerant: blank lines anywhere,
// the instance section may be missing, a group may repeat (members merge).
ParsedGroupInfo ParseGroupInfo(std::string_view body);

struct ParsedUrlMap {
  bool ok = false;
  std::string error;
  std::vector<model::SapUrlPrefix> prefixes;  // sorted by prefix, unique
  Skips skips;
};

// The ICF URL map (/sap/public/icf_info/icr_urlprefix, SAP's urlinfo.txt
// form): "version 1.x", then lines "PREFIX=/path/&GROUP=G&CASE=&VHOST=
// *.*;&STACK=J2EE". Tolerant: attributes in any order, any case, unknown ones
// ignored, blank lines anywhere, a prefix without its closing "/" gets one,
// a URL-encoded prefix ("%2Fsap%2F...") is decoded. Strict about what it
// keeps: prefixes lowercased, RFC 3986 path characters, at most
// kMaxUrlPrefixLength, not "/" alone (the root is the default root
// handler's); GROUP a valid name of at most kMaxGroupNameLength; STACK J2EE
// (java), ABAP or empty (abap). A bad line is skipped with a reason; the first
// line for a prefix wins.
ParsedUrlMap ParseUrlMap(std::string_view body);

// host -> addresses (IPv4 first), empty when it does not resolve. The
// poller's resolver does DNS; tests pass a map.
using Resolver = std::function<std::vector<std::string>(const std::string& host)>;

// The instances of `parsed` as the compile reads them: ports of the HTTP and
// HTTPS rows (identical rows, e.g. the VHOST=0 twins, count once; a row
// without VHOST= is preferred), the capacity (the largest LB=, DIA=, LBA= or
// LBJ= of the instance's rows; 0 when none), the stack (DIAG row: ABAP; P4,
// P4S, IIOP, J2EE or TELNET row: Java) and the resolved address. A host
// that does not resolve keeps the address `previous` had for that instance
// and host; without one the instance is skipped. The address is the first
// one `policy` accepts; when it refuses every address of the host the
// instance is skipped (kRefusedAddress) with the address and why, never
// falling back to an address from before. Without a policy (nullptr: the
// importer reading the operator's own server info file) every address is
// taken as written. Sorted by name.
std::vector<model::SapInstance> BuildInstances(const ParsedServerList& parsed,
                                               const Resolver& resolve,
                                               const AddressPolicy* policy,
                                               const std::vector<model::SapInstance>* previous,
                                               Skips* skips);

}  // namespace kwd::sapsystem
