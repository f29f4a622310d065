#include "controller/sapsystem/server_list.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "common/log.h"
#include "common/snapshot_io.h"

namespace kwd::sapsystem {
namespace {

// Longer lines are not a server list's (an SNC name is well below this).
constexpr std::size_t kMaxLineBytes = 4096;

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

// A quoted, escaped, shortened value for a message.
std::string Shown(std::string_view value) {
  constexpr std::size_t kMaxShown = 80;
  std::string out = "\"" + EscapeControlCharacters(value.substr(0, kMaxShown)) + "\"";
  if (value.size() > kMaxShown) {
    out += "...";
  }
  return out;
}

// Splits `body` into lines on LF, dropping one CR before it.
class Lines {
 public:
  explicit Lines(std::string_view body) : rest_(body) {}
  bool Next(std::string_view* line) {
    if (done_) {
      return false;
    }
    std::size_t end = rest_.find('\n');
    if (end == std::string_view::npos) {
      *line = rest_;
      done_ = true;
      if (line->empty()) {
        return false;
      }
    } else {
      *line = rest_.substr(0, end);
      rest_.remove_prefix(end + 1);
    }
    if (!line->empty() && line->back() == '\r') {
      line->remove_suffix(1);
    }
    ++number_;
    return true;
  }
  int number() const { return number_; }

 private:
  std::string_view rest_;
  bool done_ = false;
  int number_ = 0;
};

std::optional<int> SmallNumber(std::string_view text) {
  int value = 0;
  if (text.empty() || text.size() > 4) {
    return std::nullopt;
  }
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::uint32_t> PortNumber(std::string_view text) {
  std::uint32_t value = 0;
  if (text.empty() || text.size() > 5) {
    return std::nullopt;
  }
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1 || value > 65535) {
    return std::nullopt;
  }
  return value;
}

// "version 1.2", "version1.2", "version\t1.2": (major, minor).
bool ParseVersionLine(std::string_view line, int* major, int* minor) {
  line = Trim(line);
  constexpr std::string_view kWord = "version";
  if (!line.starts_with(kWord)) {
    return false;
  }
  line = Trim(line.substr(kWord.size()));
  std::size_t dot = line.find('.');
  if (dot == std::string_view::npos) {
    return false;
  }
  auto a = SmallNumber(line.substr(0, dot));
  auto b = SmallNumber(line.substr(dot + 1));
  if (!a || !b) {
    return false;
  }
  *major = *a;
  *minor = *b;
  return true;
}

// The first non-blank line must be a version line; the body must be text.
bool CheckHeader(std::string_view body, Lines* lines, int* major, int* minor,
                 std::string* error) {
  if (body.size() > kMaxBodyBytes) {
    *error = "body larger than " + std::to_string(kMaxBodyBytes) + " bytes";
    return false;
  }
  if (body.find('\0') != std::string_view::npos) {
    *error = "binary body (NUL bytes)";
    return false;
  }
  std::string_view line;
  while (lines->Next(&line)) {
    if (Trim(line).empty()) {
      continue;
    }
    if (!ParseVersionLine(line, major, minor)) {
      *error = "first line is not \"version <major>.<minor>\": " + Shown(line);
      return false;
    }
    return true;
  }
  *error = "empty body";
  return false;
}

// TAB-separated: at most 4 fields. Otherwise runs of spaces separate the
// first three and the rest, spaces included, is the description.
std::vector<std::string_view> SplitRow(std::string_view line) {
  std::vector<std::string_view> fields;
  if (line.find('\t') != std::string_view::npos) {
    while (fields.size() < 3) {
      std::size_t tab = line.find('\t');
      if (tab == std::string_view::npos) {
        break;
      }
      fields.push_back(Trim(line.substr(0, tab)));
      line.remove_prefix(tab + 1);
    }
    fields.push_back(Trim(line));
    return fields;
  }
  line = Trim(line);
  while (fields.size() < 3 && !line.empty()) {
    std::size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      fields.push_back(line);
      line = {};
      break;
    }
    fields.push_back(line.substr(0, space));
    line = Trim(line.substr(space + 1));
  }
  fields.push_back(line);
  return fields;
}

bool IsRowType(std::string_view type) {
  if (type.empty() || type.size() > 16) {
    return false;
  }
  return std::all_of(type.begin(), type.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
  });
}

std::string Upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    }
  }
  return out;
}

// The value of KEY=<digits> in a description, tokens split on spaces,
// commas and semicolons.
std::optional<std::uint32_t> DescriptionNumber(std::string_view description,
                                               std::string_view key) {
  std::size_t pos = 0;
  while (pos < description.size()) {
    std::size_t end = description.find_first_of(" ,;\t", pos);
    if (end == std::string_view::npos) {
      end = description.size();
    }
    std::string_view token = description.substr(pos, end - pos);
    pos = end + 1;
    if (token.size() > key.size() && token.starts_with(key) && token[key.size()] == '=') {
      std::string_view digits = token.substr(key.size() + 1);
      std::uint32_t value = 0;
      auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (error == std::errc() && ptr == digits.data() + digits.size() && value > 0) {
        return value;
      }
    }
  }
  return std::nullopt;
}

bool HasToken(std::string_view description, std::string_view prefix) {
  return description.find(prefix) != std::string_view::npos;
}

bool IsJavaRow(std::string_view type) {
  return type == "P4" || type == "P4S" || type == "IIOP" || type == "J2EE" || type == "TELNET";
}

}  // namespace

std::string_view SkipReasonName(SkipReason reason) {
  switch (reason) {
    case SkipReason::kMalformedRow:
      return "malformed_row";
    case SkipReason::kInvalidName:
      return "invalid_name";
    case SkipReason::kInvalidHost:
      return "invalid_host";
    case SkipReason::kInvalidPort:
      return "invalid_port";
    case SkipReason::kDuplicateName:
      return "duplicate_name";
    case SkipReason::kTooMany:
      return "too_many";
    case SkipReason::kUnknownHost:
      return "unknown_host";
    case SkipReason::kInvalidGroup:
      return "invalid_group";
    case SkipReason::kInvalidPrefix:
      return "invalid_prefix";
    case SkipReason::kRefusedAddress:
      return "refused_address";
  }
  return "unknown";
}

void Skips::Add(SkipReason reason, std::string message) {
  ++counts[reason];
  if (messages.size() < kMaxSkipMessages) {
    messages.push_back(EscapeControlCharacters(message));
  }
}

std::size_t Skips::total() const {
  std::size_t sum = 0;
  for (const auto& [reason, count] : counts) {
    sum += count;
  }
  return sum;
}

std::string Skips::Summary() const {
  std::size_t n = total();
  if (n == 0) {
    return "";
  }
  std::string out = std::to_string(n) + (n == 1 ? " entry skipped: " : " entries skipped: ");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    out += (i == 0 ? "" : "; ") + messages[i];
  }
  if (n > messages.size()) {
    out += "; ...";
  }
  return out;
}

ParsedServerList ParseServerList(std::string_view body) {
  ParsedServerList out;
  Lines lines(body);
  if (!CheckHeader(body, &lines, &out.major, &out.minor, &out.error)) {
    return out;
  }
  if (out.major != 1) {
    out.error = "unknown server list version " + std::to_string(out.major) + "." +
                std::to_string(out.minor) + " (this client reads 1.x)";
    return out;
  }
  std::set<std::string, std::less<>> names;
  ParsedInstance* current = nullptr;  // the record being read; null between records
  bool skipping_record = false;       // the current record's name was refused
  std::string_view line;
  while (lines.Next(&line)) {
    const std::string where = "line " + std::to_string(lines.number()) + ": ";
    if (line.size() > kMaxLineBytes) {
      out.skips.Add(SkipReason::kMalformedRow, where + "longer than " +
                                                   std::to_string(kMaxLineBytes) + " bytes");
      continue;
    }
    std::string_view trimmed = Trim(line);
    if (trimmed.empty()) {
      current = nullptr;
      skipping_record = false;
      continue;
    }
    bool is_row = trimmed.find_first_of(" \t") != std::string_view::npos;
    if (!is_row) {
      // A line with no separator names a new instance (records need not
      // be blank-separated).
      current = nullptr;
      skipping_record = true;
      if (trimmed.size() > kMaxInstanceNameLength || !IsServerName(trimmed)) {
        out.skips.Add(SkipReason::kInvalidName,
                      where + "instance name " + Shown(trimmed) +
                          " is not a valid server name (at most " +
                          std::to_string(kMaxInstanceNameLength) +
                          " visible characters but space \" , ; \\)");
        continue;
      }
      if (names.contains(trimmed)) {
        out.skips.Add(SkipReason::kDuplicateName,
                      where + "instance " + Shown(trimmed) + " listed twice; the first kept");
        continue;
      }
      if (out.instances.size() >= kMaxInstances) {
        out.skips.Add(SkipReason::kTooMany, where + "instance " + Shown(trimmed) +
                                                " beyond the limit of " +
                                                std::to_string(kMaxInstances));
        continue;
      }
      names.emplace(trimmed);
      out.instances.push_back(ParsedInstance{std::string(trimmed), {}});
      current = &out.instances.back();
      skipping_record = false;
      continue;
    }
    if (skipping_record) {
      continue;  // rows of a refused record: already counted once
    }
    if (current == nullptr) {
      out.skips.Add(SkipReason::kMalformedRow,
                    where + "service row outside an instance record: " + Shown(trimmed));
      continue;
    }
    std::vector<std::string_view> fields = SplitRow(line);
    if (fields.size() < 3 || fields[0].empty() || fields[1].empty() || fields[2].empty() ||
        !IsRowType(fields[0])) {
      out.skips.Add(SkipReason::kMalformedRow,
                    where + "not \"<type> <host> <port> [<description>]\": " + Shown(trimmed));
      continue;
    }
    std::string type = Upper(fields[0]);
    auto port = PortNumber(fields[2]);
    if (!port) {
      out.skips.Add(SkipReason::kInvalidPort, where + type + " row of " + Shown(current->name) +
                                                  ": port " + Shown(fields[2]) +
                                                  " is not 1 to 65535");
      continue;
    }
    if (!IsServerAddress(fields[1])) {
      out.skips.Add(SkipReason::kInvalidHost, where + type + " row of " + Shown(current->name) +
                                                  ": host " + Shown(fields[1]) +
                                                  " is not a host name or IP address");
      continue;
    }
    current->rows.push_back(ServiceRow{std::move(type), std::string(fields[1]), *port,
                                       fields.size() > 3 ? std::string(fields[3]) : ""});
  }
  out.ok = true;
  return out;
}

ParsedGroupInfo ParseGroupInfo(std::string_view body) {
  ParsedGroupInfo out;
  Lines lines(body);
  int major = 0;
  int minor = 0;
  if (!CheckHeader(body, &lines, &major, &minor, &out.error)) {
    return out;
  }
  if (major != 1) {
    out.error = "unknown group information version " + std::to_string(major) + "." +
                std::to_string(minor) + " (this client reads 1.x)";
    return out;
  }
  auto valid = [](std::string_view name, std::size_t max) {
    return !name.empty() && name.size() <= max && IsServerName(name);
  };
  std::map<std::string, std::set<std::string>> groups;
  std::string_view line;
  while (lines.Next(&line)) {
    const std::string where = "line " + std::to_string(lines.number()) + ": ";
    std::string_view trimmed = Trim(line);
    if (trimmed.empty()) {
      continue;
    }
    if (trimmed.size() > kMaxLineBytes * 16) {
      out.skips.Add(SkipReason::kMalformedRow, where + "line too long");
      continue;
    }
    std::size_t colon = trimmed.find(':');
    if (colon == std::string_view::npos) {
      continue;  // section 1: an instance name; membership comes from section 2
    }
    std::string_view group = Trim(trimmed.substr(0, colon));
    if (!valid(group, kMaxGroupNameLength)) {
      out.skips.Add(SkipReason::kInvalidGroup,
                    where + "group name " + Shown(group) + " is not valid (at most " +
                        std::to_string(kMaxGroupNameLength) + " visible characters)");
      continue;
    }
    if (groups.size() >= kMaxInstances && !groups.contains(std::string(group))) {
      out.skips.Add(SkipReason::kTooMany, where + "group " + Shown(group) + " beyond the limit");
      continue;
    }
    std::set<std::string>& members = groups[std::string(group)];
    std::string_view rest = trimmed.substr(colon + 1);
    while (!rest.empty()) {
      std::size_t comma = rest.find(',');
      std::string_view member = Trim(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (member.empty()) {
        continue;
      }
      if (!valid(member, kMaxInstanceNameLength)) {
        out.skips.Add(SkipReason::kInvalidGroup, where + "member " + Shown(member) + " of " +
                                                     Shown(group) + " is not a valid name");
        continue;
      }
      if (members.size() < kMaxInstances) {
        members.emplace(member);
      }
    }
  }
  for (auto& [name, members] : groups) {
    out.groups[name] = std::vector<std::string>(members.begin(), members.end());
  }
  out.ok = true;
  return out;
}

namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

int HexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// %XX decoded; nullopt on a broken escape.
std::optional<std::string> PercentDecoded(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) {
      return std::nullopt;
    }
    int high = HexValue(in[i + 1]);
    int low = HexValue(in[i + 2]);
    if (high < 0 || low < 0) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

}  // namespace

ParsedUrlMap ParseUrlMap(std::string_view body) {
  ParsedUrlMap out;
  Lines lines(body);
  int major = 0;
  int minor = 0;
  if (!CheckHeader(body, &lines, &major, &minor, &out.error)) {
    return out;
  }
  if (major != 1) {
    out.error = "unknown URL map version " + std::to_string(major) + "." + std::to_string(minor) +
                " (this client reads 1.x)";
    return out;
  }
  std::map<std::string, model::SapUrlPrefix> prefixes;
  std::string_view line;
  while (lines.Next(&line)) {
    const std::string where = "line " + std::to_string(lines.number()) + ": ";
    std::string_view trimmed = Trim(line);
    if (trimmed.empty()) {
      continue;
    }
    if (trimmed.size() > kMaxLineBytes) {
      out.skips.Add(SkipReason::kMalformedRow, where + "line too long");
      continue;
    }
    std::optional<std::string_view> prefix_value;
    std::string_view group;
    std::string_view stack;
    std::string_view rest = trimmed;
    while (!rest.empty()) {
      std::size_t amp = rest.find('&');
      std::string_view attribute = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      std::size_t equals = attribute.find('=');
      if (equals == std::string_view::npos) {
        continue;  // "&&" or a bare word: nothing to read
      }
      std::string_view key = Trim(attribute.substr(0, equals));
      std::string_view value = Trim(attribute.substr(equals + 1));
      if (EqualsIgnoreCase(key, "PREFIX") && !prefix_value) {
        prefix_value = value;
      } else if (EqualsIgnoreCase(key, "GROUP")) {
        group = value;
      } else if (EqualsIgnoreCase(key, "STACK")) {
        stack = value;
      }  // CASE, VHOST and unknown attributes: not used
    }
    if (!prefix_value) {
      out.skips.Add(SkipReason::kMalformedRow, where + "no PREFIX= in " + Shown(trimmed));
      continue;
    }
    std::string prefix(*prefix_value);
    if (prefix.size() >= 3 && prefix[0] == '%' && prefix[1] == '2' &&
        (prefix[2] == 'f' || prefix[2] == 'F')) {
      auto decoded = PercentDecoded(prefix);
      if (!decoded) {
        out.skips.Add(SkipReason::kInvalidPrefix,
                      where + "prefix " + Shown(*prefix_value) + ": broken %-escape");
        continue;
      }
      prefix = std::move(*decoded);
    }
    for (char& c : prefix) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (!prefix.empty() && prefix.back() != '/') {
      prefix.push_back('/');
    }
    if (prefix.size() < 2 || prefix.front() != '/' || prefix.size() > kMaxUrlPrefixLength ||
        !IsPathText(prefix)) {
      out.skips.Add(SkipReason::kInvalidPrefix,
                    where + "prefix " + Shown(*prefix_value) +
                        " is not a path prefix (starts with /, not / alone, at most " +
                        std::to_string(kMaxUrlPrefixLength) + " RFC 3986 path characters)");
      continue;
    }
    if (!group.empty() && (group.size() > kMaxGroupNameLength || !IsServerName(group))) {
      out.skips.Add(SkipReason::kInvalidGroup,
                    where + "group name " + Shown(group) + " is not valid (at most " +
                        std::to_string(kMaxGroupNameLength) + " visible characters)");
      continue;
    }
    bool java = false;
    if (EqualsIgnoreCase(stack, "J2EE") || EqualsIgnoreCase(stack, "JAVA")) {
      java = true;
    } else if (!stack.empty() && !EqualsIgnoreCase(stack, "ABAP")) {
      out.skips.Add(SkipReason::kMalformedRow,
                    where + "STACK=" + Shown(stack) + " is not J2EE or ABAP");
      continue;
    }
    if (prefixes.contains(prefix)) {
      out.skips.Add(SkipReason::kDuplicateName,
                    where + "prefix " + Shown(prefix) + " listed again");
      continue;
    }
    if (prefixes.size() >= kMaxUrlPrefixes) {
      out.skips.Add(SkipReason::kTooMany, where + "prefix " + Shown(prefix) + " beyond the limit");
      continue;
    }
    model::SapUrlPrefix entry;
    entry.prefix = prefix;
    entry.logon_group = std::string(group);
    entry.java = java;
    prefixes.emplace(std::move(prefix), std::move(entry));
  }
  out.prefixes.reserve(prefixes.size());
  for (auto& [prefix, entry] : prefixes) {
    out.prefixes.push_back(std::move(entry));
  }
  out.ok = true;
  return out;
}

std::vector<model::SapInstance> BuildInstances(const ParsedServerList& parsed,
                                               const Resolver& resolve,
                                               const AddressPolicy* policy,
                                               const std::vector<model::SapInstance>* previous,
                                               Skips* skips) {
  auto refusal = [policy](std::string_view address) {
    return policy == nullptr ? std::string() : RefusalReason(*policy, address);
  };
  std::map<std::string_view, const model::SapInstance*> before;
  if (previous != nullptr) {
    for (const model::SapInstance& instance : *previous) {
      before.emplace(instance.name, &instance);
    }
  }
  std::map<std::string, std::vector<std::string>> resolved;  // one lookup per host
  std::vector<model::SapInstance> out;
  out.reserve(parsed.instances.size());
  for (const ParsedInstance& in : parsed.instances) {
    model::SapInstance instance;
    instance.name = in.name;
    const ServiceRow* http = nullptr;
    const ServiceRow* https = nullptr;
    const ServiceRow* diag = nullptr;
    // A row without VHOST= wins over its VHOST= twin; otherwise the first.
    auto pick = [](const ServiceRow*& slot, const ServiceRow& row) {
      if (slot == nullptr ||
          (HasToken(slot->description, "VHOST=") && !HasToken(row.description, "VHOST="))) {
        slot = &row;
      }
    };
    for (const ServiceRow& row : in.rows) {
      if (row.type == "HTTP") {
        pick(http, row);
      } else if (row.type == "HTTPS") {
        pick(https, row);
      } else if (row.type == "DIAG") {
        instance.abap = true;
        diag = diag == nullptr ? &row : diag;
      } else if (IsJavaRow(row.type)) {
        instance.java = true;
      }
      for (std::string_view key : {"LB", "DIA", "LBA", "LBJ"}) {
        if (auto value = DescriptionNumber(row.description, key)) {
          instance.capacity = std::max(instance.capacity, *value);
        }
      }
    }
    const ServiceRow* addressed = http != nullptr ? http : https != nullptr ? https : diag;
    if (http != nullptr) {
      instance.http_port = http->port;
    }
    if (https != nullptr) {
      instance.https_port = https->port;
    }
    if (addressed != nullptr) {
      instance.host = addressed->host;
      auto [it, inserted] = resolved.try_emplace(instance.host);
      if (inserted) {
        it->second = resolve(instance.host);
      }
      std::string address;
      std::string refused;  // the first refused address and why
      for (const std::string& candidate : it->second) {
        if (!IsServerAddress(candidate)) {
          continue;
        }
        if (std::string why = refusal(candidate); !why.empty()) {
          if (refused.empty()) {
            refused = "address " + Shown(candidate) + " refused: " + why;
          }
          continue;
        }
        address = candidate;
        break;
      }
      if (address.empty() && !refused.empty()) {
        skips->Add(SkipReason::kRefusedAddress, "instance " + Shown(instance.name) + ": host " +
                                                    Shown(instance.host) + ": " + refused);
        continue;
      }
      if (address.empty()) {
        auto old = before.find(instance.name);
        if (old != before.end() && old->second->host == instance.host &&
            !old->second->address.empty() && refusal(old->second->address).empty()) {
          address = old->second->address;  // DNS hiccup: keep what it resolved to before
        } else {
          skips->Add(SkipReason::kUnknownHost, "instance " + Shown(instance.name) + ": host " +
                                                   Shown(instance.host) + " does not resolve");
          continue;
        }
      }
      instance.address = std::move(address);
    }
    out.push_back(std::move(instance));
  }
  std::sort(out.begin(), out.end(),
            [](const model::SapInstance& a, const model::SapInstance& b) { return a.name < b.name; });
  return out;
}

}  // namespace kwd::sapsystem
