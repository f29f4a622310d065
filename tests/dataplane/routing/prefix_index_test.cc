#include "dataplane/routing/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/routing/permissions.h"

namespace kwd::routing {
namespace {

TEST(PrefixIndexTest, LongestSegmentPrefixWins) {
  PrefixIndex index({"/sap/", "/sap/bc/gui/", "/irj/", "/a/b/c/"});
  struct Case {
    std::string path;
    int want;
  };
  const Case cases[] = {
      {"/sap", 0},
      {"/sap/", 0},
      {"/sap/bc/x", 0},
      {"/sapx/", -1},
      {"/sapx", -1},
      {"/sap/bc/gui", 1},
      {"/sap/bc/gui/x", 1},
      {"/sap/bc/guix", 0},
      {"/irj/portal", 2},
      {"/a/b", -1},
      {"/a/b/c", 3},
      {"/a/b/c/d/e", 3},
      {"/", -1},
      {"/other/thing/", -1},
      {"", -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(index.LongestMatch(c.path), c.want);
  }
}

// Against the definition, exhaustively over short paths: the longest prefix
// P with path.starts_with(P) or path + "/" == P.
TEST(PrefixIndexTest, AgreesWithTheDefinition) {
  const std::vector<std::string> prefixes = {"/a/", "/a/b/",   "/ab/", "/b/a/b/",
                                             "//",  "/a/a/a/", "/bb/"};
  PrefixIndex index(prefixes);
  auto reference = [&](const std::string& path) {
    int best = -1;
    for (size_t i = 0; i < prefixes.size(); ++i) {
      const std::string& p = prefixes[i];
      bool match = path.starts_with(p) || path + "/" == p;
      if (match && (best < 0 || p.size() > prefixes[best].size())) {
        best = static_cast<int>(i);
      }
    }
    return best;
  };
  constexpr std::string_view kAlphabet = "ab/";
  int matched = 0;
  for (size_t length = 1; length <= 8; ++length) {
    std::vector<size_t> digits(length, 0);
    while (true) {
      std::string path = "/";
      for (size_t d : digits) {
        path += kAlphabet[d];
      }
      ASSERT_EQ(index.LongestMatch(path), reference(path)) << path;
      matched += reference(path) >= 0;
      size_t k = 0;
      while (k < length && ++digits[k] == kAlphabet.size()) {
        digits[k++] = 0;
      }
      if (k == length) {
        break;
      }
    }
  }
  EXPECT_GT(matched, 1000);
}

// Long prefixes: the lookup finds "/" 16 (SSE2) or eight bytes at a time
// over them; bytes that differ from "/" in one bit ("." "o" 0xaf) must not
// read as one. `max_prefix` 30: up to two blocks; 120: up to eight, the last
// one read ending at the path's end.
void ExpectAgreementOnLongRandomPaths(size_t max_prefix, size_t max_path) {
  std::mt19937 random(16);
  constexpr std::string_view kAlphabet = "ab/.o\xaf";
  auto random_text = [&](size_t length) {
    std::string text = "/";
    for (size_t i = 0; i < length; ++i) {
      text += kAlphabet[random() % kAlphabet.size()];
    }
    return text;
  };
  std::vector<std::string> prefixes;
  for (int i = 0; i < 200; ++i) {
    std::string prefix = random_text(random() % max_prefix) + "/";
    // Normalised paths hold no empty segment; neither do these.
    if (prefix.size() >= 2 && prefix.find("//") == std::string::npos &&
        std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end()) {
      prefixes.push_back(prefix);
    }
  }
  PrefixIndex index(prefixes);
  auto reference = [&](const std::string& path) {
    int best = -1;
    for (size_t i = 0; i < prefixes.size(); ++i) {
      const std::string& p = prefixes[i];
      bool match = path.starts_with(p) || path + "/" == p;
      if (match && (best < 0 || p.size() > prefixes[best].size())) {
        best = static_cast<int>(i);
      }
    }
    return best;
  };
  int matched = 0;
  for (int round = 0; round < 20000; ++round) {
    // Half the paths extend a prefix, so long matches happen.
    std::string path = random() % 2 == 0 ? prefixes[random() % prefixes.size()] : "";
    path += random_text(random() % max_path).substr(path.empty() ? 0 : 1);
    if (path.find("//") != std::string::npos) {
      continue;
    }
    ASSERT_EQ(index.LongestMatch(path), reference(path)) << path;
    matched += reference(path) >= 0;
  }
  EXPECT_GT(matched, 5000);
}

TEST(PrefixIndexTest, AgreesWithTheDefinitionOnLongRandomPaths) {
  ExpectAgreementOnLongRandomPaths(30, 40);
  ExpectAgreementOnLongRandomPaths(120, 40);
}

TEST(PrefixIndexTest, PrefixesOutsideTheContractNeverMatch) {
  PrefixIndex index({"/sap", "", "/", "sap/", "/ok/"});
  EXPECT_EQ(index.LongestMatch("/sap"), -1);
  EXPECT_EQ(index.LongestMatch("/sap/x"), -1);
  EXPECT_EQ(index.LongestMatch("/"), -1);
  EXPECT_EQ(index.LongestMatch("/ok"), 4);
}

TEST(PrefixIndexTest, EmptyIndexMatchesNothing) {
  PrefixIndex index;
  EXPECT_EQ(index.LongestMatch("/sap/"), -1);
}

TEST(PrefixIndexTest, ManyPrefixesAllFound) {
  std::vector<std::string> prefixes;
  for (int i = 0; i < 1000; ++i) {
    prefixes.push_back("/p" + std::to_string(i) + "/s/");
  }
  PrefixIndex index(prefixes);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(index.LongestMatch("/p" + std::to_string(i) + "/s/x/y"), i);
  }
  EXPECT_EQ(index.LongestMatch("/p1000/s/"), -1);
}

TEST(PermissionTableTest, FirstMatchWinsAndStarsAnchor) {
  google::protobuf::RepeatedPtrField<v1::Permission> list;
  auto add = [&](v1::PermissionAction action, const char* pattern) {
    v1::Permission* p = list.Add();
    p->set_action(action);
    p->set_pattern(pattern);
  };
  add(v1::PERMISSION_ACTION_PERMIT, "/sap/bc/test.cgi");
  add(v1::PERMISSION_ACTION_DENY, "*.cgi");
  add(v1::PERMISSION_ACTION_PERMIT, "/sap/bc/public/*");
  add(v1::PERMISSION_ACTION_SECURE, "*/secret/*");
  add(v1::PERMISSION_ACTION_DENY, "/sap/BC/*");
  PermissionTable table(list);
  struct Case {
    const char* path;  // lowercase, as the router passes it
    v1::PermissionAction want;
  };
  const Case cases[] = {
      {"/sap/bc/test.cgi", v1::PERMISSION_ACTION_PERMIT},
      {"/sap/bc/other.cgi", v1::PERMISSION_ACTION_DENY},
      {"/x.cgi", v1::PERMISSION_ACTION_DENY},
      {"/sap/bc/public/x", v1::PERMISSION_ACTION_PERMIT},
      {"/a/secret/b", v1::PERMISSION_ACTION_SECURE},
      {"/sap/bc/bsp", v1::PERMISSION_ACTION_DENY},    // pattern case is ignored
      {"/irj/portal", v1::PERMISSION_ACTION_PERMIT},  // no match: permit
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(table.Evaluate(c.path), c.want);
  }
  EXPECT_EQ(PermissionTable().Evaluate("/anything"), v1::PERMISSION_ACTION_PERMIT);
}

// "*text*" patterns: the match is a substring search of its own.
TEST(PermissionTableTest, BothStarsMatchTheTextAnywhere) {
  struct Case {
    const char* pattern;
    const char* path;
    bool denied;
  };
  const Case cases[] = {
      {"*/secret/*", "/secret/", true},
      {"*/secret/*", "/a/secret/b", true},
      {"*/secret/*", "/a/b/secret/", true},
      {"*/secret/*", "/a/secret", false},
      {"*/secret/*", "/a/secrets/b", false},
      {"*/secret/*", "/", false},
      {"*x*", "/x", true},
      {"*x*", "/y", false},
      {"*ab*", "/aab", true},
      {"*ab*", "/ba", false},
      {"*aba*", "/abababa", true},
      {"*aba*", "/abba", false},
      {"**", "/", true},
      {"*", "/anything", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.pattern) + " " + c.path);
    google::protobuf::RepeatedPtrField<v1::Permission> list;
    v1::Permission* p = list.Add();
    p->set_action(v1::PERMISSION_ACTION_DENY);
    p->set_pattern(c.pattern);
    PermissionTable table(list);
    EXPECT_EQ(table.Evaluate(c.path) == v1::PERMISSION_ACTION_DENY, c.denied);
  }
}

// Paths of up to 64 bytes take the bit-mask scan, longer ones the
// 16-candidates-at-once scan, short ones a byte loop; each tests two bytes
// chosen from the text (not "/" or "." when it has others) first. They
// agree with string_view::find at every length and position, the block
// edges included.
TEST(PermissionTableTest, BothStarsAgreeWithFindOnLongPaths) {
  std::mt19937 random(25);
  const std::string alphabet = "/abs.";
  for (int round = 0; round < 40000; ++round) {
    std::string path = "/";
    const size_t length = random() % (round % 2 == 0 ? 70 : 200);
    for (size_t i = 0; i < length; ++i) {
      path += alphabet[random() % alphabet.size()];
    }
    std::string text;
    const size_t text_length = 1 + random() % (round % 3 == 0 ? 20 : 6);
    for (size_t i = 0; i < text_length; ++i) {
      text += alphabet[random() % alphabet.size()];
    }
    SCOPED_TRACE("*" + text + "* " + path);
    google::protobuf::RepeatedPtrField<v1::Permission> list;
    v1::Permission* p = list.Add();
    p->set_action(v1::PERMISSION_ACTION_DENY);
    p->set_pattern("*" + text + "*");
    PermissionTable table(list);
    ASSERT_EQ(table.Evaluate(path) == v1::PERMISSION_ACTION_DENY,
              path.find(text) != std::string::npos);
  }
}

}  // namespace
}  // namespace kwd::routing
