// Fuzzes the TLS ClientHello reader of the passthrough listener: the input is
// fed whole, then again as a growing prefix split at the input's first byte
// (as TCP segments would split it); both readings must agree.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dataplane/tls/client_hello.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kwd::tls::ClientHelloParser;
  using kwd::tls::ClientHelloStatus;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  ClientHelloParser whole(4096);
  const ClientHelloStatus status = whole.Feed(input);
  if (status == ClientHelloStatus::kDone && whole.server_name().size() > 255) {
    __builtin_trap();
  }
  size_t step = size > 0 ? (data[0] % 64) + 1 : 1;
  ClientHelloParser split(4096);
  ClientHelloStatus split_status = ClientHelloStatus::kNeedMore;
  for (size_t n = step; split_status == ClientHelloStatus::kNeedMore; n += step) {
    split_status = split.Feed(input.substr(0, n < size ? n : size));
    if (n >= size) {
      break;
    }
  }
  if (split_status != status ||
      (status == ClientHelloStatus::kDone && split.server_name() != whole.server_name())) {
    __builtin_trap();
  }
  return 0;
}
