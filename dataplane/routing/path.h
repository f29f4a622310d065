#pragma once

// Request-target normalisation for matching (docs/internals.md, "Life of a
// request", step 3).
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
  // What to send upstream: the raw path with its dot segments resolved as
  // RFC 3986 5.2.4 says (raw_path itself when it has none; else in the
  // scratch). `path` is derived from it, so the decision is made on exactly
  // the path the backend sees, and no dot segment is left for a backend's
  // own normaliser to read differently.
  std::string_view forward_path;
  // The path holds "%2F" or "%5C" (any case) or "\": a backend that decodes
  // them into "/" reads other segments; or "%3B": a backend that decodes it
  // before it drops ";params" reads other names (see
  // NormalizeTargetSeparatorsDecoded).
  bool encoded_separator = false;
  // raw_path holds no ";" (set by the fast path, which sees every byte of
  // it; false: not known).
  bool no_params = false;
};

// Normalises an origin-form target ("/a/b?q") into every field of `out`:
// - strips the query (and a fragment);
// - resolves "." and ".." segments (also "%2E" spellings) over the raw
//   segments as RFC 3986 remove_dot_segments does: empty segments, brackets
//   and path parameters count ("/a//../b" is "/a/b");
// - then removes a Base64 "(...)" bracket from a segment ("/sap(bD1l)/bc" ->
//   "/sap/bc"), reporting the first one's text; a bracket never holds "/"
//   (raw or encoded): "(/x)" is not a bracket;
// - drops ";param=value" path parameters and empty segments;
// - decodes %XX escapes of unreserved characters (others stay encoded,
//   with uppercase hex).
// Returns false (a 400) when the target does not start with "/", holds
// control characters (also encoded: "%00") or a malformed escape, climbs
// above the root, holds a segment that is a dot segment only to some readers
// ("..;x", ".(bD1l)", "..%3Bx"), or does not fit in `scratch` (up to twice
// the path when dot segments are resolved).
bool NormalizeTarget(std::string_view target, std::span<char> scratch, NormalizedTarget* out);

// NormalizeTarget, and the normalised path with its ASCII letters lowercased
// into `lower` (`lower_out`). False also when the path does not fit in
// `lower`. The fast path writes both in one pass.
bool NormalizeTargetLower(std::string_view target, std::span<char> scratch, std::span<char> lower,
                          NormalizedTarget* out, std::string_view* lower_out);

// The same target as read by a backend that decodes "%2F" and "%5C" (and
// takes "\" for "/") before it resolves dot segments, and "%3B" before it
// drops ";params". The router routes a
// target with encoded separators only when both readings reach the same
// decision.
bool NormalizeTargetSeparatorsDecoded(std::string_view target, std::span<char> scratch,
                                      NormalizedTarget* out);

// The general algorithm behind NormalizeTarget, without its fast path for
// paths that are already normal. Same contract; tests compare the two.
bool NormalizeTargetGeneral(std::string_view target, std::span<char> scratch,
                            NormalizedTarget* out);

// Lowercases ASCII letters of `in` into `out` (same size or larger).
void AsciiLowerInto(std::string_view in, char* out);

// Whether `path` (normalised) is a root URL: exactly one "/".
bool IsRootPath(std::string_view path);

}  // namespace kwd::routing
