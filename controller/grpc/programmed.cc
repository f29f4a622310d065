#include "controller/grpc/programmed.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "common/log.h"
#include "common/metrics.h"

namespace kwd::snapshot_server {
namespace {

// The code point of one well-formed UTF-8 sequence.
char32_t CodePoint(std::string_view sequence) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(sequence[i]); };
  switch (sequence.size()) {
    case 2:
      return ((byte(0) & 0x1fu) << 6) | (byte(1) & 0x3fu);
    case 3:
      return ((byte(0) & 0x0fu) << 12) | ((byte(1) & 0x3fu) << 6) | (byte(2) & 0x3fu);
    case 4:
      return ((byte(0) & 0x07u) << 18) | ((byte(1) & 0x3fu) << 12) | ((byte(2) & 0x3fu) << 6) |
             (byte(3) & 0x3fu);
    default:
      return byte(0);
  }
}

// C1 controls, and the format characters that reorder or hide what follows
// them on a terminal: bidirectional marks, embeddings, overrides and
// isolates, line and paragraph separators.
bool HidesText(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string PrintableText(std::string_view text, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  static constexpr std::string_view kCut = "...";
  std::string out;
  // Where out could be cut with "..." still within max_bytes: after the last
  // whole piece that leaves room for it.
  std::size_t cut = 0;
  out.reserve(std::min(text.size(), max_bytes) + 8);
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    std::size_t length = 1;
    if (byte >= 0x80) {
      length = Utf8SequenceLength(text.substr(i));
      if (length == 0) {
        out += "\\x";
        out += kHex[byte >> 4];
        out += kHex[byte & 0xf];
        length = 1;
      } else if (const char32_t cp = CodePoint(text.substr(i, length)); HidesText(cp)) {
        // Shown, not obeyed: a right-to-left override in a condition would
        // reorder what kubectl prints after it.
        out += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4) {
          out += kHex[(cp >> shift) & 0xf];
        }
      } else {
        out.append(text.substr(i, length));
      }
    } else if (byte < 0x20 || byte == 0x7f) {
      AppendControlEscape(text[i], out);
    } else {
      out += text[i];
    }
    i += length;
    if (out.size() + kCut.size() <= max_bytes) {
      cut = out.size();
    }
    if (out.size() > max_bytes) {
      out.resize(cut);
      if (cut + kCut.size() <= max_bytes) {
        out += kCut;
      }
      return out;
    }
  }
  return out;
}

bool SnapshotIncludes(const v1::Snapshot& snapshot, std::string_view kind,
                      std::string_view namespace_, std::string_view name, int64_t generation) {
  // sources are sorted by kind, namespace, name (compile's contract).
  auto key = [](const v1::SourceObject& source) {
    return std::tuple<std::string_view, std::string_view, std::string_view>(
        source.kind(), source.namespace_(), source.name());
  };
  auto wanted = std::make_tuple(kind, namespace_, name);
  auto it = std::lower_bound(
      snapshot.sources().begin(), snapshot.sources().end(), wanted,
      [&](const v1::SourceObject& source, const auto& target) { return key(source) < target; });
  if (it != snapshot.sources().end() && key(*it) == wanted) {
    return it->generation() >= generation;
  }
  // Not sorted as promised (an old controller?): fall back to a scan.
  return std::any_of(snapshot.sources().begin(), snapshot.sources().end(),
                     [&](const v1::SourceObject& source) {
                       return key(source) == wanted && source.generation() >= generation;
                     });
}

std::vector<ProxyFold> FoldProxies(const std::vector<ProxyVersions>& proxies) {
  std::vector<ProxyFold> folds;
  std::map<std::tuple<std::string_view, std::string_view, bool>, std::size_t> index;
  for (const ProxyVersions& proxy : proxies) {
    auto [it, added] = index.try_emplace(
        std::make_tuple(std::string_view(proxy.acked_version),
                        std::string_view(proxy.nacked_version), proxy.unresponsive),
        folds.size());
    if (added) {
      folds.push_back({proxy, 0});
    } else if (proxy.node_id < folds[it->second].proxy.node_id) {
      folds[it->second].proxy = proxy;
    }
    ++folds[it->second].count;
  }
  return folds;
}

compile::Condition ProgrammedCondition(std::string_view kind, std::string_view namespace_,
                                       std::string_view name, int64_t generation,
                                       const std::vector<ProxyVersions>& proxies,
                                       const SnapshotLookup& lookup) {
  return ProgrammedCondition(kind, namespace_, name, generation, FoldProxies(proxies), lookup);
}

compile::Condition ProgrammedCondition(std::string_view kind, std::string_view namespace_,
                                       std::string_view name, int64_t generation,
                                       const std::vector<ProxyFold>& proxies,
                                       const SnapshotLookup& lookup) {
  compile::Condition condition;
  condition.type = std::string(kProgrammed);
  if (proxies.empty()) {
    condition.status = "False";
    condition.reason = std::string(kReasonNoProxies);
    condition.message = "no proxy is connected";
    return condition;
  }
  auto includes = [&](const std::string& version) {
    if (version.empty()) {
      return false;
    }
    const v1::Snapshot* snapshot = lookup(version);
    return snapshot != nullptr && SnapshotIncludes(*snapshot, kind, namespace_, name, generation);
  };
  size_t programmed = 0;
  size_t counted = 0;
  size_t unresponsive = 0;
  const ProxyVersions* rejecting = nullptr;
  for (const auto& [proxy, count] : proxies) {
    if (proxy.unresponsive) {
      unresponsive += count;
      continue;
    }
    counted += count;
    if (includes(proxy.acked_version)) {
      programmed += count;
    } else if (includes(proxy.nacked_version) &&
               (rejecting == nullptr || proxy.node_id < rejecting->node_id)) {
      rejecting = &proxy;
    }
  }
  const std::string silent =
      unresponsive == 0
          ? std::string()
          : "; " + std::to_string(unresponsive) +
                (unresponsive == 1 ? " more proxy does" : " more proxies do") +
                " not answer snapshots (not counted)";
  const std::string counts = std::to_string(programmed) + " of " + std::to_string(counted) +
                             " connected proxies run generation " + std::to_string(generation) +
                             silent;
  if (counted == 0) {
    condition.status = "False";
    condition.reason = std::string(kReasonNoProxies);
    condition.message = "no connected proxy answers snapshots (" +
                        std::to_string(unresponsive) + " connected, not answering)";
  } else if (programmed == counted) {
    condition.status = "True";
    condition.reason = std::string(kReasonProgrammed);
    condition.message = counts;
  } else if (rejecting != nullptr) {
    condition.status = "False";
    condition.reason = std::string(kReasonRejected);
    // Both were made printable and bounded when received; bounded again
    // here, as reports of other replicas come from the API server.
    condition.message = "proxy " + PrintableText(rejecting->node_id, kMaxNodeIdBytes) +
                        " rejected the snapshot: " +
                        PrintableText(rejecting->nack_message, kMaxNackMessageBytes) + " (" +
                        counts + ")";
  } else {
    condition.status = "False";
    condition.reason = std::string(kReasonPending);
    condition.message = counts;
  }
  condition.message = PrintableText(condition.message, kMaxProgrammedMessageBytes);
  return condition;
}

}  // namespace kwd::snapshot_server
