// Fuzzes session identifier extraction and affinity cookie verification on
// arbitrary request parts.
//
// Input layout: fields separated by '\n' in this order: path, query,
// bracket segment, then every further line is one Cookie header value. The
// last cookie header is also verified as an affinity cookie value.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "dataplane/session/affinity_cookie.h"
#include "dataplane/session/session_ids.h"

namespace {

constexpr size_t kMaxCookieHeaders = 8;

bool NextLine(std::string_view* input, std::string_view* line) {
  if (input->empty()) {
    return false;
  }
  size_t newline = input->find('\n');
  *line = input->substr(0, newline);
  *input = newline == std::string_view::npos ? std::string_view() : input->substr(newline + 1);
  return true;
}

// Every view must stay inside the input or the scratch buffer.
bool Within(std::string_view view, std::string_view input, const kwd::session::SessionIds& ids) {
  if (view.empty()) {
    return true;
  }
  auto inside = [&](const char* begin, size_t size) {
    return view.data() >= begin && view.data() + view.size() <= begin + size;
  };
  return inside(input.data(), input.size()) || inside(ids.scratch.data(), ids.scratch_used);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kwd::session::AffinityCookieCodec codec("fuzz-key");
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view rest = input;

  kwd::session::RequestParts request;
  NextLine(&rest, &request.path);
  NextLine(&rest, &request.query);
  NextLine(&rest, &request.bracket_segment);
  std::string_view cookies[kMaxCookieHeaders];
  size_t cookie_count = 0;
  while (cookie_count < kMaxCookieHeaders && NextLine(&rest, &cookies[cookie_count])) {
    ++cookie_count;
  }
  request.cookie_headers = std::span<const std::string_view>(cookies, cookie_count);

  kwd::session::SessionIds ids;
  kwd::session::ExtractSessionIds(request, "kwd_affinity", &ids);

  if (ids.scratch_used > ids.scratch.size() || ids.saplb_count > ids.kMaxSaplb) {
    __builtin_trap();
  }
  std::string_view views[] = {ids.contextid_instance, ids.jsessionid, ids.jsessionid_instance,
                              ids.ext_sid, ids.affinity_cookie};
  for (std::string_view view : views) {
    if (!Within(view, input, ids)) {
      __builtin_trap();
    }
  }
  for (size_t i = 0; i < ids.saplb_count; ++i) {
    if (ids.saplb[i].instance.empty() || !Within(ids.saplb[i].group, input, ids) ||
        !Within(ids.saplb[i].instance, input, ids)) {
      __builtin_trap();
    }
  }

  std::string_view server;
  std::string_view candidate = cookie_count > 0 ? cookies[cookie_count - 1] : input;
  if (codec.Verify(candidate, "fuzz/group", &server) && server.empty()) {
    __builtin_trap();
  }
  if (!ids.affinity_cookie.empty()) {
    codec.Verify(ids.affinity_cookie, "fuzz/group", &server);
  }
  return 0;
}
