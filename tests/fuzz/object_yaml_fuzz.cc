// Fuzzes the controller's YAML object loader as `kwd-controller validate`
// runs it (controller/source/dir_source.h with the CRD schema check and
// positions): arbitrary bytes must give problems or objects, never a crash,
// and every problem names a position inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "controller/schema/schema.h"
#include "controller/source/dir_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kwd::source::LoadOptions options;
  options.schemas = &kwd::schema::Schemas::Builtin();
  options.locate = true;
  kwd::source::LoadResult result;
  kwd::source::LoadYamlText(text, "fuzz.yaml", &result, options);
  size_t lines = 1;
  for (char c : text) {
    lines += c == '\n' ? 1 : 0;
  }
  for (const auto& problem : result.problems) {
    if (problem.line < 0 || static_cast<size_t>(problem.line) > lines + 1 || problem.column < 0) {
      std::abort();
    }
    (void)problem.ToString();
  }
  return 0;
}
