// Fuzzes the SAP message server's server list parser, the ICF group
// information parser and the ICF URL map parser (controller/sapsystem/server_list.h) on arbitrary
// bodies, and BuildInstances on what the parser accepts. Checks that
// nothing that reaches a snapshot, header, label or log holds a control
// character or breaks the snapshot's name rules.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/snapshot_io.h"
#include "controller/sapsystem/server_list.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using kwd::fuzz::Check;
using kwd::fuzz::HasControl;

void CheckSkips(const kwd::sapsystem::Skips& skips) {
  Check(skips.messages.size() <= kwd::sapsystem::kMaxSkipMessages);
  Check(!HasControl(skips.Summary()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  kwd::sapsystem::ParsedServerList parsed = kwd::sapsystem::ParseServerList(body);
  Check(!HasControl(parsed.error));
  CheckSkips(parsed.skips);
  if (parsed.ok) {
    Check(parsed.instances.size() <= kwd::sapsystem::kMaxInstances);
    for (const auto& instance : parsed.instances) {
      Check(kwd::IsServerName(instance.name));
      for (const auto& row : instance.rows) {
        Check(kwd::IsServerAddress(row.host));
        Check(row.port >= 1 && row.port <= 65535);
      }
    }
    kwd::sapsystem::Skips skips = parsed.skips;
    // Every host "resolves" to itself when it is an address-like name.
    // The address policy of a SapSystem with allowedNetworks [10.0.0.0/8,
    // 127.0.0.0/8]: no built instance may have an address outside it.
    std::string cidr_error;
    kwd::sapsystem::AddressPolicy policy;
    policy.allowed = {*kwd::sapsystem::ParseCidr("10.0.0.0/8", &cidr_error),
                      *kwd::sapsystem::ParseCidr("127.0.0.0/8", &cidr_error)};
    policy.own = {*kwd::sapsystem::ParseIpAddress("10.0.0.9")};
    auto instances = kwd::sapsystem::BuildInstances(
        parsed, [](const std::string& host) { return std::vector<std::string>{host}; }, &policy,
        nullptr, &skips);
    CheckSkips(skips);
    for (const auto& instance : instances) {
      Check(kwd::IsServerName(instance.name));
      Check(instance.address.empty() || kwd::IsServerAddress(instance.address));
      Check(instance.address.empty() ||
            kwd::sapsystem::RefusalReason(policy, instance.address).empty());
      Check(instance.address != "10.0.0.9");
    }
  }
  {
    // spec.allowedNetworks entries: the first line as a CIDR.
    std::string error;
    std::string_view first = body.substr(0, body.find('\n'));
    if (auto cidr = kwd::sapsystem::ParseCidr(first, &error)) {
      Check(cidr->prefix_length >= 0 && cidr->prefix_length <= (cidr->network.v4 ? 32 : 128));
      Check(cidr->Contains(cidr->network));
    } else {
      Check(!HasControl(error));
    }
  }
  kwd::sapsystem::ParsedGroupInfo groups = kwd::sapsystem::ParseGroupInfo(body);
  Check(!HasControl(groups.error));
  CheckSkips(groups.skips);
  for (const auto& [name, members] : groups.groups) {
    Check(kwd::IsServerName(name));
    for (const auto& member : members) {
      Check(kwd::IsServerName(member));
    }
  }
  kwd::sapsystem::ParsedUrlMap map = kwd::sapsystem::ParseUrlMap(body);
  Check(!HasControl(map.error));
  CheckSkips(map.skips);
  Check(map.prefixes.size() <= kwd::sapsystem::kMaxUrlPrefixes);
  std::string_view last;
  for (const auto& entry : map.prefixes) {
    // What the compile turns into a rule: a "/.../" path prefix it accepts.
    Check(entry.prefix.size() >= 2 && entry.prefix.size() <= kwd::sapsystem::kMaxUrlPrefixLength);
    Check(entry.prefix.front() == '/' && entry.prefix.back() == '/');
    Check(kwd::IsPathText(entry.prefix));
    for (char c : entry.prefix) {
      Check(!(c >= 'A' && c <= 'Z'));
    }
    Check(entry.logon_group.empty() || kwd::IsServerName(entry.logon_group));
    Check(entry.logon_group.size() <= kwd::sapsystem::kMaxGroupNameLength);
    Check(last < entry.prefix);  // sorted, unique
    last = entry.prefix;
  }
  return 0;
}
