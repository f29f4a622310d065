#include "dataplane/routing/path.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::routing {
namespace {

TEST(NormalizeTargetTest, Table) {
  struct Case {
    std::string target;
    bool ok;
    std::string path;
    std::string bracket = "";
    std::string query = "";
  };
  const Case cases[] = {
      {"/", true, "/"},
      {"/index.html", true, "/index.html"},
      {"/sap/bc/x?a=1&b=2", true, "/sap/bc/x", "", "a=1&b=2"},
      {"/sap/bc/x#frag", true, "/sap/bc/x"},
      {"/sap(bD1lbiZjPTAwMQ==)/bc/bsp/x", true, "/sap/bc/bsp/x", "bD1lbiZjPTAwMQ=="},
      {"/sap(bD1l)/bc(cz1T)/x", true, "/sap/bc/x", "bD1l"},
      {"/sap(====)", true, "/sap", "===="},
      {"/irj/portal(not-b64!)/x", true, "/irj/portal(not-b64!)/x"},
      {"/irj/portal(abc", true, "/irj/portal(abc"},
      {"/sap/bc/x;sap-contextid=SID%3aANON%3aapp1%3aX/y", true, "/sap/bc/x/y"},
      {"/sap/;sap-ext-sid=abc/foo/bar", true, "/sap/foo/bar"},
      {"/a;x=1;y=2", true, "/a"},
      {"/a//b///c/", true, "/a/b/c/"},
      {"/%7Euser/%41%62c", true, "/~user/Abc"},
      {"/a%2fb/%2F", true, "/a%2Fb/%2F"},
      {"/a%zz", false, ""},
      {"/a%4", false, ""},
      {"/a/./b/../c", true, "/a/c"},
      {"/a/b/..", true, "/a/"},
      {"/a/b/.", true, "/a/b/"},
      {"/a/%2e%2E/b", true, "/b"},
      {"/..", false, ""},
      {"/a/../..", false, ""},
      {"/a/../../etc/passwd", false, ""},
      {"/a/..;x=1/b", false, ""},  // ".." to Tomcat, a name to RFC 3986
      {"", false, ""},
      {"*", false, ""},
      {"sap/bc", false, ""},
      {"/a b", false, ""},
      {std::string("/a\0b", 4), false, ""},
      {"/a\x7f", false, ""},
      {"/sap/admin%00/x", false, ""},  // encoded control characters
      {"/a%0a", false, ""},
      {"/a%1F", false, ""},
      {"/a%7f", false, ""},
      {"/a?q=%00", true, "/a", "", "q=%00"},  // the query is not ours to judge
  };
  std::array<char, 256> scratch{};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    NormalizedTarget out;
    ASSERT_EQ(NormalizeTarget(c.target, scratch, &out), c.ok);
    if (c.ok) {
      EXPECT_EQ(out.path, c.path);
      EXPECT_EQ(out.bracket_segment, c.bracket);
      EXPECT_EQ(out.query, c.query);
    }
  }
}

// Issue 10 item 1: "(/a)" is no bracket segment. Every common normaliser
// (RFC 3986 remove_dot_segments, WHATWG URL, Java URI.normalize) reads
// "/sap/admin/q(/a)/../../x" as "/sap/admin/x"; so must the router.
TEST(NormalizeTargetTest, BracketSegmentsNeverHoldASlash) {
  struct Case {
    std::string target;
    std::string path;
    std::string bracket;
  };
  const Case cases[] = {
      {"/sap/admin/q(/a)/../../x", "/sap/admin/x", ""},
      {"/sap/admin/q(%2Fa)/../x", "/sap/admin/x", ""},
      {"/sap/admin/q(%2fa)/x", "/sap/admin/q(%2Fa)/x", ""},
      {"/sap/admin/q(%5Ca)/x", "/sap/admin/q(%5Ca)/x", ""},
      {"/sap(bD1l%3D)/bc", "/sap/bc", "bD1l%3D"},
      {"/sap(bD1l%3d%3d)/bc", "/sap/bc", "bD1l%3d%3d"},
      {"/sap(bD1l%41)/bc", "/sap(bD1lA)/bc", ""},  // only "=" may be escaped
      {"/sap(/bD1l)", "/sap(/bD1l)", ""},
      {"/sap(bD1l)/x/(a/b)/../y", "/sap/x/(a/y", "bD1l"},
  };
  std::array<char, 256> scratch{};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    NormalizedTarget out;
    ASSERT_TRUE(NormalizeTarget(c.target, scratch, &out));
    EXPECT_EQ(out.path, c.path);
    EXPECT_EQ(out.bracket_segment, c.bracket);
  }
}

// RFC 3986 5.2.4: ".." removes the previous segment even when it is empty,
// and brackets and parameters belong to the segment they are in.
TEST(NormalizeTargetTest, DotSegmentsResolveAsRfc3986Says) {
  struct Case {
    std::string target;
    std::string forward;
    std::string path;
  };
  const Case cases[] = {
      {"/sap/admin//../x", "/sap/admin/x", "/sap/admin/x"},
      {"/sap/admin///../../x", "/sap/admin/x", "/sap/admin/x"},
      {"/a//../../b", "/b", "/b"},
      {"/a/b//..", "/a/b/", "/a/b/"},
      {"/a/b/..", "/a/", "/a/"},
      {"/a/b/.", "/a/b/", "/a/b/"},
      {"/a/./b", "/a/b", "/a/b"},
      {"/a/%2e%2E/b?q=1", "/b", "/b"},
      {"/sap(bD1l)/x/;sap-ext-sid=1/../y", "/sap(bD1l)/x/y", "/sap/x/y"},
      {"/sap/x;p=1/../y;q=2", "/sap/y;q=2", "/sap/y"},
      {"/sap/(bD1l)/../admin", "/sap/admin", "/sap/admin"},
      {"/a/..x/x../...", "/a/..x/x../...", "/a/..x/x../..."},
  };
  std::array<char, 256> scratch{};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    NormalizedTarget out;
    ASSERT_TRUE(NormalizeTarget(c.target, scratch, &out));
    EXPECT_EQ(out.forward_path, c.forward);
    EXPECT_EQ(out.path, c.path);
  }
}

TEST(NormalizeTargetTest, ForwardPathIsTheRawPathWhenNothingResolves) {
  std::array<char, 256> scratch{};
  for (std::string_view target :
       {"/sap/bc/x?q", "/sap(bD1l)/bc;p=1/x", "/a//b/", "/%41b", "/sap/;sap-ext-sid=x/y"}) {
    SCOPED_TRACE(target);
    NormalizedTarget out;
    ASSERT_TRUE(NormalizeTarget(target, scratch, &out));
    EXPECT_EQ(out.forward_path.data(), target.data());
    EXPECT_EQ(out.forward_path, out.raw_path);
  }
}

// A segment that one reader takes for "." or ".." and another for a name
// cannot be routed: Tomcat strips ";x" before it resolves dots, RFC 3986 does
// not.
TEST(NormalizeTargetTest, SegmentsThatAreDotSegmentsOnlyToSomeReadersAre400) {
  std::array<char, 256> scratch{};
  for (std::string_view target :
       {"/a/..;x=1/b", "/a/..;/b", "/a/.;x/b", "/a/..%3Bx/b", "/a/%2e%2E;p/b",
        "/sap/admin/..(bD1l)/x", "/sap/admin/.(bD1l)", "/a/..%3b"}) {
    SCOPED_TRACE(target);
    NormalizedTarget out;
    EXPECT_FALSE(NormalizeTarget(target, scratch, &out));
  }
}

TEST(NormalizeTargetTest, EncodedSeparatorsAreNotedAndReadBothWays) {
  struct Case {
    std::string target;
    bool encoded;
    std::string path;          // NormalizeTarget
    std::string decoded_path;  // NormalizeTargetSeparatorsDecoded; "!" for a failure
  };
  const Case cases[] = {
      {"/sap/bc/x", false, "/sap/bc/x", "/sap/bc/x"},
      {"/sap%2Fadmin/x", true, "/sap%2Fadmin/x", "/sap/admin/x"},
      {"/sap/x/..%2fadmin/y", true, "/sap/x/..%2Fadmin/y", "/sap/admin/y"},
      {"/sap/x/..%5C..%5C..%5Cy", true, "/sap/x/..%5C..%5C..%5Cy", "!"},
      {"/x/..\\sap\\admin", true, "/x/..\\sap\\admin", "/sap/admin"},
      {"/odata/E('a%2Fb')", true, "/odata/E('a%2Fb')", "/odata/E('a/b')"},
      {"/q?a=%2F", false, "/q", "/q"},
  };
  std::array<char, 256> scratch{};
  std::array<char, 256> decoded_scratch{};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    NormalizedTarget out;
    ASSERT_TRUE(NormalizeTarget(c.target, scratch, &out));
    EXPECT_EQ(out.encoded_separator, c.encoded);
    EXPECT_EQ(out.path, c.path);
    NormalizedTarget decoded;
    const bool ok = NormalizeTargetSeparatorsDecoded(c.target, decoded_scratch, &decoded);
    EXPECT_EQ(ok ? std::string(decoded.path) : "!", c.decoded_path);
  }
}

TEST(NormalizeTargetTest, RawPathKeepsParametersForSessionExtraction) {
  std::array<char, 64> scratch{};
  NormalizedTarget out;
  ASSERT_TRUE(NormalizeTarget("/sap/;sap-ext-sid=abc/x?q=1", scratch, &out));
  EXPECT_EQ(out.raw_path, "/sap/;sap-ext-sid=abc/x");
}

TEST(NormalizeTargetTest, TooLongForTheScratchIsABadRequest) {
  std::array<char, 8> scratch{};
  NormalizedTarget out;
  EXPECT_TRUE(NormalizeTarget("/abcdef", scratch, &out));
  EXPECT_FALSE(NormalizeTarget("/abcdefgh/", scratch, &out));
}

// Compares NormalizeTarget (fast path first) with the general algorithm on
// every target of length 1..max_length over `alphabet`.
void ExpectAgreementOverAllTargets(std::string_view alphabet, size_t max_length,
                                   size_t scratch_size) {
  std::vector<char> fast_scratch(scratch_size);
  std::vector<char> general_scratch(scratch_size);
  int accepted = 0;
  std::string target;
  for (size_t length = 1; length <= max_length; ++length) {
    std::vector<size_t> digits(length, 0);
    while (true) {
      target.clear();
      for (size_t d : digits) {
        target += alphabet[d];
      }
      NormalizedTarget fast;
      NormalizedTarget general;
      const bool fast_ok = NormalizeTarget(target, fast_scratch, &fast);
      const bool general_ok = NormalizeTargetGeneral(target, general_scratch, &general);
      ASSERT_EQ(fast_ok, general_ok) << target;
      if (fast_ok) {
        ASSERT_EQ(fast.path, general.path) << target;
        ASSERT_EQ(fast.raw_path, general.raw_path) << target;
        ASSERT_EQ(fast.query, general.query) << target;
        ASSERT_EQ(fast.bracket_segment, general.bracket_segment) << target;
        ASSERT_EQ(fast.forward_path, general.forward_path) << target;
        ASSERT_EQ(fast.encoded_separator, general.encoded_separator) << target;
        // no_params is a promise (false: not known).
        ASSERT_TRUE(!fast.no_params || fast.raw_path.find(';') == std::string_view::npos)
            << target;
        ++accepted;
      }
      size_t k = 0;
      while (k < length && ++digits[k] == alphabet.size()) {
        digits[k++] = 0;
      }
      if (k == length) {
        break;
      }
    }
  }
  EXPECT_GT(accepted, 100);
}

// The fast path for already-normal paths (and ";params") must agree with the
// general algorithm on every input: exhaustive over short targets from
// alphabets that hold every byte the fast path treats specially.
TEST(NormalizeTargetTest, FastPathAgreesWithTheGeneralAlgorithm) {
  ExpectAgreementOverAllTargets("/a.%2e;(=)?# B", 5, 16);
  ExpectAgreementOverAllTargets("/a.%2F\\()", 5, 16);
  ExpectAgreementOverAllTargets("/a.;?", 8, 16);
  ExpectAgreementOverAllTargets("/a;%2F\\(", 6, 16);
  // A scratch smaller than some targets, with parameters that make the
  // output shorter than the input.
  ExpectAgreementOverAllTargets("/a;.", 8, 4);
}

// What the proxy forwards leaves nothing to resolve: normalised again it gives
// the same path and is forwarded as it is. Exhaustive over short targets.
TEST(NormalizeTargetTest, ForwardPathIsAFixedPoint) {
  const std::string_view alphabet = "/a.%2E;()";
  std::vector<char> scratch(64);
  std::vector<char> again_scratch(64);
  int resolved = 0;
  std::string target;
  for (size_t length = 1; length <= 6; ++length) {
    std::vector<size_t> digits(length, 0);
    while (true) {
      target = "/";
      for (size_t d : digits) {
        target += alphabet[d];
      }
      NormalizedTarget out;
      if (NormalizeTarget(target, scratch, &out) && out.forward_path.data() != target.data()) {
        ++resolved;
        const std::string forward(out.forward_path);
        NormalizedTarget again;
        ASSERT_TRUE(NormalizeTarget(forward, again_scratch, &again)) << target;
        ASSERT_EQ(again.path, out.path) << target;
        ASSERT_EQ(again.forward_path.data(), forward.data()) << target;
        ASSERT_EQ(again.bracket_segment, out.bracket_segment) << target;
      }
      size_t k = 0;
      while (k < length && ++digits[k] == alphabet.size()) {
        digits[k++] = 0;
      }
      if (k == length) {
        break;
      }
    }
  }
  EXPECT_GT(resolved, 1000);
}

// The fast path reads 16 bytes at a time: targets longer than the
// exhaustive ones above, with the special bytes at every offset of a block.
// Also NormalizeTargetLower's lowercase path (written in the same pass).
TEST(NormalizeTargetTest, FastPathAgreesOnLongTargets) {
  const std::string_view alphabet = "/aZ.%2e;(=)?#\\ B\x7f\x80";
  const std::string_view plain = "/sap/bc/GUI/sap/its/webgui/x";
  std::vector<char> fast_scratch(256);
  std::vector<char> general_scratch(256);
  std::vector<char> lower(256);
  uint64_t state = 88172645463325252ull;  // xorshift64: the same targets every run
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int accepted = 0;
  for (int round = 0; round < 200000; ++round) {
    // A plain run of 0..40 bytes, then 1..6 bytes of the alphabet, then
    // another plain run: the special bytes land anywhere in a block.
    std::string target(plain.substr(0, 1 + next() % plain.size()));
    for (size_t n = next() % 40; n > 0; --n) {
      target += "abcDEFghi/"[next() % 10];
    }
    for (size_t n = 1 + next() % 6; n > 0; --n) {
      target += alphabet[next() % alphabet.size()];
    }
    for (size_t n = next() % 24; n > 0; --n) {
      target += "xyZ/"[next() % 4];
    }
    if (next() % 2 == 0) {
      // Long ";params", maybe with a byte that ends or refuses them.
      target += ';';
      for (size_t n = next() % 40; n > 0; --n) {
        target += next() % 16 == 0 ? alphabet[next() % alphabet.size()] : "ab=;Cd"[next() % 6];
      }
      target += "/x";
    }
    NormalizedTarget fast;
    NormalizedTarget general;
    std::string_view lower_path;
    const bool fast_ok = NormalizeTarget(target, fast_scratch, &fast);
    const bool general_ok = NormalizeTargetGeneral(target, general_scratch, &general);
    ASSERT_EQ(fast_ok, general_ok) << target;
    ASSERT_EQ(NormalizeTargetLower(target, fast_scratch, lower, &fast, &lower_path), general_ok)
        << target;
    if (fast_ok) {
      ASSERT_EQ(fast.path, general.path) << target;
      ASSERT_EQ(fast.raw_path, general.raw_path) << target;
      ASSERT_EQ(fast.query, general.query) << target;
      ASSERT_EQ(fast.forward_path, general.forward_path) << target;
      ASSERT_EQ(fast.encoded_separator, general.encoded_separator) << target;
      ASSERT_TRUE(!fast.no_params || fast.raw_path.find(';') == std::string_view::npos)
          << target;
      std::string want(general.path.size(), '\0');
      AsciiLowerInto(general.path, want.data());
      ASSERT_EQ(lower_path, want) << target;
      ASSERT_EQ(lower_path.data(), lower.data()) << target;
      ++accepted;
    }
  }
  EXPECT_GT(accepted, 10000);
}

TEST(NormalizeTargetTest, LowerPathMustFitItsScratch) {
  std::vector<char> scratch(64);
  std::array<char, 8> lower{};
  NormalizedTarget out;
  std::string_view lower_path;
  ASSERT_TRUE(NormalizeTargetLower("/AbC/dEf?Q", scratch, lower, &out, &lower_path));
  EXPECT_EQ(out.path, "/AbC/dEf");
  EXPECT_EQ(lower_path, "/abc/def");
  // Nine bytes: too long for the lowercase scratch, also through the general
  // algorithm ("%41" is decoded).
  EXPECT_FALSE(NormalizeTargetLower("/AbC/dEfG", scratch, lower, &out, &lower_path));
  EXPECT_FALSE(NormalizeTargetLower("/AbC/dEf%41", scratch, lower, &out, &lower_path));
  ASSERT_TRUE(NormalizeTargetLower("/AbC/d%45", scratch, lower, &out, &lower_path));
  EXPECT_EQ(lower_path, "/abc/de");
}

// The fast path dropped ";params" without looking at their escapes: an
// encoded separator or control character there went unnoticed, unlike in
// the general algorithm (which sees the whole raw path).
TEST(NormalizeTargetTest, EscapesInsideParametersCountAsAnywhereElse) {
  std::array<char, 256> scratch{};
  NormalizedTarget out;
  EXPECT_FALSE(NormalizeTarget("/sap/bc;x=%00/gui", scratch, &out));
  ASSERT_TRUE(NormalizeTarget("/sap/bc/gui;x=%2F..%2Fadmin/y", scratch, &out));
  EXPECT_TRUE(out.encoded_separator);
  ASSERT_TRUE(NormalizeTarget("/sap/bc/gui;x=\\..\\admin/y", scratch, &out));
  EXPECT_TRUE(out.encoded_separator);
  ASSERT_TRUE(NormalizeTarget("/sap/bc/gui;x=a%3Bb/y", scratch, &out));
  EXPECT_TRUE(out.encoded_separator);
}

TEST(NormalizeTargetTest, FastPathRespectsTheScratchSize) {
  std::array<char, 4> scratch{};
  NormalizedTarget out;
  EXPECT_TRUE(NormalizeTarget("/abc?long-query-is-fine", scratch, &out));
  EXPECT_EQ(out.path, "/abc");
  EXPECT_EQ(out.path.data(), scratch.data());  // the path lives in the scratch
  EXPECT_FALSE(NormalizeTarget("/abcd", scratch, &out));
}

TEST(PathTest, AsciiLowerIntoChangesOnlyAsciiUppercase) {
  // Every byte value, at every offset of a word and in the byte-wise tail.
  std::string in;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < 256; ++b) {
      in += static_cast<char>(b);
    }
    in += "x";  // shifts the next round against the word boundaries
  }
  std::string out(in.size(), '\0');
  AsciiLowerInto(in, out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto c = static_cast<unsigned char>(in[i]);
    const unsigned char want = (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
    ASSERT_EQ(static_cast<unsigned char>(out[i]), want) << i;
  }
  std::string in_place = "/SAP/Bc/GUI/sap/ITS/webgui?X=Y";
  AsciiLowerInto(in_place, in_place.data());
  EXPECT_EQ(in_place, "/sap/bc/gui/sap/its/webgui?x=y");
}

TEST(PathTest, RootPathHasExactlyOneSlash) {
  EXPECT_TRUE(IsRootPath("/"));
  EXPECT_TRUE(IsRootPath("/index.html"));
  EXPECT_FALSE(IsRootPath("/sap/"));
  EXPECT_FALSE(IsRootPath("/a/b"));
}

// The fast path says when the raw path holds no ";" (the session ids then
// skip their search for path parameters); the general algorithm never does.
TEST(NormalizeTargetTest, NoParamsOnlyForPathsWithoutSemicolons) {
  std::vector<char> scratch(256);
  NormalizedTarget out;
  ASSERT_TRUE(NormalizeTarget("/sap/bc/ui/page.htm?a=b;c", scratch, &out));
  EXPECT_TRUE(out.no_params);
  ASSERT_TRUE(NormalizeTarget("/sap/bc;jsessionid=x/ui", scratch, &out));
  EXPECT_FALSE(out.no_params);
  ASSERT_TRUE(NormalizeTarget("/sap/;sap-ext-sid=E", scratch, &out));
  EXPECT_FALSE(out.no_params);
  ASSERT_TRUE(NormalizeTarget("/sap/%41/ui", scratch, &out));  // the general algorithm
  EXPECT_FALSE(out.no_params);
}

}  // namespace
}  // namespace kwd::routing
