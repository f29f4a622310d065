#pragma once

// Request-target normalisation for matching (INTERFACE.md "Classification").
// Works in caller-provided scratch and never allocates.

#include <cstddef>
#include <span>
#include <string_view>

namespace kwd::routing {

struct NormalizedTarget {
  std::string_view raw_path;         // as received, up to "?" (session ids read it)
  std::string_view query;            // after "?", without it; may be empty
  std::string_view bracket_segment;  // Base64 text of the first "(...)" segment
  std::string_view path;             // normalised, points into the scratch
};

// Normalises an origin-form target ("/a/b?q"):
// - strips the query (and a fragment);
// - removes a Base64 "(...)" bracket from a segment ("/sap(bD1l)/bc" ->
//   "/sap/bc"), reporting the first one's text;
// - drops ";param=value" path parameters and empty segments;
// - decodes %XX escapes of unreserved characters (others stay encoded,
//   with uppercase hex);
// - resolves "." and ".." segments.
// Returns false (a 400) when the target does not start with "/", holds
// control characters or a malformed escape, climbs above the root, or does not
// fit in `scratch`.
bool NormalizeTarget(std::string_view target, std::span<char> scratch, NormalizedTarget* out);

// The general algorithm behind NormalizeTarget, without its fast path for
// paths that are already normal. Same contract; tests compare the two.
bool NormalizeTargetGeneral(std::string_view target, std::span<char> scratch,
                            NormalizedTarget* out);

// Lowercases ASCII letters of `in` into `out` (same size or larger).
void AsciiLowerInto(std::string_view in, char* out);

// Whether `path` (normalised) is a root URL: exactly one "/".
bool IsRootPath(std::string_view path);

}  // namespace kwd::routing
