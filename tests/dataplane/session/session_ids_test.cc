#include "dataplane/session/session_ids.h"

#include <gtest/gtest.h>

#include <cctype>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "tests/dataplane/session/alloc_counter.h"

namespace kwd::session {
namespace {

constexpr char kSapContextId[] =
    "SID%3aANON%3als3022_BIN_12%3aVXJs82VIOdbyJChzNHUbrFGpo275YjC3XTsuZ4P0-ATT";
constexpr char kSapContextIdUpper[] =
    "SID%3AANON%3Als3022_BIN_12%3AVXJs82VIOdbyJChzNHUbrFGpo275YjC3XTsuZ4P0-ATT";

std::string StdBase64(std::string_view text) {
  // Base64UrlEncode differs from standard Base64 only in two characters and
  // padding, both of which the decoder accepts; use the standard alphabet to
  // mirror what BSP puts in URLs.
  std::string out = Base64UrlEncode(text);
  for (char& c : out) {
    c = c == '-' ? '+' : (c == '_' ? '/' : c);
  }
  while (out.size() % 4 != 0) {
    out += '=';
  }
  return out;
}

struct IdsCase {
  std::string name{};
  std::string path = "/sap/bc/bsp/x";
  std::string query{};
  std::vector<std::string> cookies{};
  std::string bracket{};
  std::string want_contextid{};
  std::vector<std::pair<std::string, std::string>> want_saplb{};
  std::string want_jsessionid{};
  std::string want_jsessionid_instance{};
  std::string want_ext_sid{};
  std::string want_affinity{};
};

std::vector<IdsCase> Cases() {
  std::vector<IdsCase> cases;
  auto add = [&](IdsCase c) { cases.push_back(std::move(c)); };

  // --- sap-contextid in each transport ---
  add({.name = "contextid_cookie_lowercase_escapes",
       .cookies = {std::string("sap-contextid=") + kSapContextId},
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "contextid_cookie_uppercase_escapes",
       .cookies = {std::string("sap-contextid=") + kSapContextIdUpper},
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "contextid_cookie_unescaped",
       .cookies = {"sap-contextid=SID:ANON:erp1_ERP_00:abc-ATT"},
       .want_contextid = "erp1_ERP_00"});
  add({.name = "contextid_cookie_quoted",
       .cookies = {std::string("sap-contextid=\"") + kSapContextId + "\""},
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "contextid_query",
       .query = std::string("a=1&sap-contextid=") + kSapContextIdUpper + "&b=2",
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "contextid_query_name_case_insensitive",
       .query = "SAP-CONTEXTID=SID%3aANON%3aapp9_X_01%3az",
       .want_contextid = "app9_X_01"});
  add({.name = "contextid_path_parameter",
       .path = std::string("/sap/bc/bsp;sap-contextid=") + kSapContextId + "/x/y",
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "contextid_path_parameter_before_other_param",
       .path = "/sap/bc;sap-contextid=SID%3aANON%3ahost_A_00%3aq;foo=bar/x",
       .want_contextid = "host_A_00"});
  add({.name = "contextid_bracket_s",
       .bracket = StdBase64(std::string("l=en&c=001&s=") + kSapContextId),
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "contextid_bracket_sap_contextid_key",
       .bracket = StdBase64(std::string("c=001&sap-contextid=") + kSapContextIdUpper + "&l=de"),
       .want_contextid = "ls3022_BIN_12"});
  add({.name = "bracket_language_and_client_only", .bracket = "bD1lbiZjPTAwMQ=="});
  add({.name = "bracket_not_base64", .bracket = "l=en&s=SID:ANON:x:y"});
  add({.name = "bracket_s_malformed", .bracket = StdBase64("l=en&s=SID%3aANON%3a%3aid")});

  // --- priority: cookie, query, path parameter, bracket ---
  add({.name = "cookie_beats_query_path_bracket",
       .path = "/sap/bc;sap-contextid=SID%3aANON%3apath_P_00%3ax/y",
       .query = "sap-contextid=SID%3aANON%3aquery_Q_00%3ax",
       .cookies = {"sap-contextid=SID%3aANON%3acookie_C_00%3ax"},
       .bracket = StdBase64("s=SID%3aANON%3abracket_B_00%3ax"),
       .want_contextid = "cookie_C_00"});
  add({.name = "query_beats_path_and_bracket",
       .path = "/sap/bc;sap-contextid=SID%3aANON%3apath_P_00%3ax/y",
       .query = "sap-contextid=SID%3aANON%3aquery_Q_00%3ax",
       .bracket = StdBase64("s=SID%3aANON%3abracket_B_00%3ax"),
       .want_contextid = "query_Q_00"});
  add({.name = "path_beats_bracket",
       .path = "/sap/bc;sap-contextid=SID%3aANON%3apath_P_00%3ax/y",
       .bracket = StdBase64("s=SID%3aANON%3abracket_B_00%3ax"),
       .want_contextid = "path_P_00"});
  add({.name = "malformed_cookie_falls_back_to_query",
       .query = "sap-contextid=SID%3aANON%3aquery_Q_00%3ax",
       .cookies = {"sap-contextid=garbage"},
       .want_contextid = "query_Q_00"});

  // --- malformed sap-contextid values ---
  for (const char* bad : {"SID%3aANON%3a%3aid", "SID%3aANON%3ainst", "SID%3aANON%3ainst%3a",
                          "SID%3aUSER%3ainst%3aid", "SID%zzANON%3ainst%3aid", "SID%3aANON%3ain",
                          "%", "SID%3aANON%3ain%00st%3aid", "", "SID%3aANON%3ain%20st%3aid"}) {
    add({.name = std::string("contextid_malformed_") + std::to_string(cases.size()),
         .query = std::string("sap-contextid=") + bad,
         .cookies = {std::string("sap-contextid=") + bad}});
  }

  // --- saplb_* ---
  add({.name = "saplb_star_and_group",
       .cookies = {"saplb_*=(J2EE1234500)1234550; saplb_portal=(J2EE2)"},
       .want_saplb = {{"*", "J2EE1234500"}, {"portal", "J2EE2"}}});
  add({.name = "saplb_url_encoded",
       .cookies = {"saplb_*=%28J2EE1234500%291234550"},
       .want_saplb = {{"*", "J2EE1234500"}}});
  add({.name = "saplb_malformed_skipped",
       .cookies = {"saplb_a=J2EE1; saplb_b=(); saplb_c=(x; saplb_=(y)1; saplb_d=(ok)"},
       .want_saplb = {{"d", "ok"}}});
  add({.name = "saplb_keeps_first_four_in_order",
       .cookies = {"saplb_1=(a); saplb_2=(b)", "saplb_3=(c); saplb_4=(d); saplb_5=(e)"},
       .want_saplb = {{"1", "a"}, {"2", "b"}, {"3", "c"}, {"4", "d"}}});
  add({.name = "saplb_first_occurrence_of_a_group_wins",
       .cookies = {"saplb_g=(first)1", "saplb_g=(second)2"},
       .want_saplb = {{"g", "first"}}});
  add({.name = "saplb_prefix_is_case_sensitive", .cookies = {"SAPLB_g=(x)1"}});

  // --- JSESSIONID ---
  add({.name = "jsessionid_cookie_with_instance",
       .cookies = {"JSESSIONID=(ls3022_BIN_12)ID47500DB0.5138181876605873End"},
       .want_jsessionid = "(ls3022_BIN_12)ID47500DB0.5138181876605873End",
       .want_jsessionid_instance = "ls3022_BIN_12"});
  add({.name = "jsessionid_cookie_plain",
       .cookies = {"JSESSIONID=8A3D0B1C9F2E"},
       .want_jsessionid = "8A3D0B1C9F2E"});
  add({.name = "jsessionid_cookie_without_end_has_no_instance",
       .cookies = {"JSESSIONID=(inst)ID123"},
       .want_jsessionid = "(inst)ID123"});
  add({.name = "jsessionid_cookie_name_is_case_sensitive", .cookies = {"jsessionid=abc"}});
  add({.name = "jsessionid_path_parameter",
       .path = "/irj/portal;jsessionid=ABC123?x",
       .want_jsessionid = "ABC123"});
  add({.name = "jsessionid_path_parameter_case_insensitive",
       .path = "/irj/portal;JSESSIONID=(j1)xEnd/next",
       .want_jsessionid = "(j1)xEnd",
       .want_jsessionid_instance = "j1"});
  add({.name = "jsessionid_cookie_beats_path",
       .path = "/irj/portal;jsessionid=FROMPATH",
       .cookies = {"JSESSIONID=FROMCOOKIE"},
       .want_jsessionid = "FROMCOOKIE"});

  // --- sap-ext-sid ---
  add({.name = "ext_sid_path_parameter",
       .path = "/sap/;sap-ext-sid=ABC/foo/bar",
       .want_ext_sid = "ABC"});
  add({.name = "ext_sid_url_decoded",
       .path = "/sap/;sap-ext-sid=A%2FB%3dC/foo",
       .want_ext_sid = "A/B=C"});
  add({.name = "ext_sid_at_end_of_path", .path = "/sap/x;sap-ext-sid=Z9", .want_ext_sid = "Z9"});
  add({.name = "ext_sid_bad_escape", .path = "/sap/;sap-ext-sid=A%G1/foo"});
  add({.name = "ext_sid_empty", .path = "/sap/;sap-ext-sid=/foo"});
  // Names compare a word at a time, values end 16 bytes at a time: mixed
  // case, names one byte off (in either word), values past a block.
  add({.name = "ext_sid_name_case_insensitive",
       .path = "/sap/bc/gui/sap/its/webgui;SAP-Ext-SID=0123456789abcdefghij;x=1/ui",
       .want_ext_sid = "0123456789abcdefghij"});
  add({.name = "near_miss_names_are_other_parameters",
       .path = "/sap;sap-ext-sie=A;sap-ext_sid=B;sbp-ext-sid=C;jsessionie=D;jsessionId=E"
               "0123456789abcdef0123456789?q",
       .want_jsessionid = "E0123456789abcdef0123456789"});
  add({.name = "contextid_path_parameter_case_insensitive",
       .path = "/sap/bc;Sap-ContextId=SID%3aANON%3ainst_I_00%3aabcdefghijklmnopqrstuvwxyz/x",
       .want_contextid = "inst_I_00"});

  // --- affinity cookie ---
  add({.name = "affinity_cookie",
       .cookies = {"kwd_affinity=abc.server1"},
       .want_affinity = "abc.server1"});

  // --- cookie syntax ---
  add({.name = "multiple_cookie_headers_first_occurrence_wins",
       .cookies = {"JSESSIONID=one; other=1", "JSESSIONID=two; kwd_affinity=a1",
                   "kwd_affinity=a2; sap-contextid=SID%3aANON%3ainst_I_00%3ax"},
       .want_contextid = "inst_I_00",
       .want_jsessionid = "one",
       .want_affinity = "a1"});
  add({.name = "whitespace_and_garbage_pairs",
       .cookies = {" ; foo ;  =bar ;;\tJSESSIONID = spaced ; novalue; kwd_affinity=\"q.s\""},
       .want_jsessionid = "spaced",
       .want_affinity = "q.s"});
  add({.name = "empty_everything", .path = "", .cookies = {"", ";", "=", "=="}});
  return cases;
}

class SessionIdsTableTest : public ::testing::TestWithParam<IdsCase> {};

TEST_P(SessionIdsTableTest, Extracts) {
  const IdsCase& c = GetParam();
  std::vector<std::string_view> cookie_views(c.cookies.begin(), c.cookies.end());
  RequestParts request{c.path, c.query, cookie_views, c.bracket};
  SessionIds ids;
  ExtractSessionIds(request, "kwd_affinity", &ids);

  EXPECT_EQ(ids.contextid_instance, c.want_contextid);
  ASSERT_EQ(ids.saplb_count, c.want_saplb.size());
  for (size_t i = 0; i < ids.saplb_count; ++i) {
    EXPECT_EQ(ids.saplb[i].group, c.want_saplb[i].first) << i;
    EXPECT_EQ(ids.saplb[i].instance, c.want_saplb[i].second) << i;
  }
  EXPECT_EQ(ids.jsessionid, c.want_jsessionid);
  EXPECT_EQ(ids.jsessionid_instance, c.want_jsessionid_instance);
  EXPECT_EQ(ids.ext_sid, c.want_ext_sid);
  EXPECT_EQ(ids.affinity_cookie, c.want_affinity);
  EXPECT_LE(ids.scratch_used, ids.scratch.size());
}

INSTANTIATE_TEST_SUITE_P(AllForms, SessionIdsTableTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SessionIdsTest, ReusedOutputIsReset) {
  std::string_view full_cookies[] = {
      "JSESSIONID=x; saplb_*=(a)1; kwd_affinity=v; "
      "sap-contextid=SID%3aANON%3ainst%3aid"};
  RequestParts full{"/sap/;sap-ext-sid=E/x", "", full_cookies, ""};
  SessionIds ids;
  ExtractSessionIds(full, "kwd_affinity", &ids);
  ASSERT_EQ(ids.contextid_instance, "inst");
  ASSERT_EQ(ids.saplb_count, 1u);
  ASSERT_EQ(ids.ext_sid, "E");

  RequestParts empty{"/", "", {}, ""};
  ExtractSessionIds(empty, "kwd_affinity", &ids);
  EXPECT_TRUE(ids.contextid_instance.empty());
  EXPECT_EQ(ids.saplb_count, 0u);
  EXPECT_TRUE(ids.jsessionid.empty());
  EXPECT_TRUE(ids.ext_sid.empty());
  EXPECT_TRUE(ids.affinity_cookie.empty());
  EXPECT_EQ(ids.scratch_used, 0u);
}

TEST(SessionIdsTest, EmptyAffinityNameIsNotLookedUp) {
  std::string_view cookies[] = {"=empty; kwd_affinity=v"};
  RequestParts request{"/", "", cookies, ""};
  SessionIds ids;
  ExtractSessionIds(request, "", &ids);
  EXPECT_TRUE(ids.affinity_cookie.empty());
  ExtractSessionIds(request, "kwd_affinity", &ids);
  EXPECT_EQ(ids.affinity_cookie, "v");
}

TEST(SessionIdsTest, ValuesThatDoNotFitScratchAreAbsent) {
  // Encoded characters force decoding into scratch; 1500 decoded bytes do
  // not fit the 1024-byte scratch.
  std::string cookie = "sap-contextid=SID%3aANON%3ainst%3a";
  for (int i = 0; i < 1500; ++i) {
    cookie += "%41";
  }
  std::string_view cookies[] = {cookie};
  std::string path = "/sap/;sap-ext-sid=";
  for (int i = 0; i < 1500; ++i) {
    path += "%42";
  }
  RequestParts request{path, "", cookies, ""};
  SessionIds ids;
  ExtractSessionIds(request, "kwd_affinity", &ids);
  EXPECT_TRUE(ids.contextid_instance.empty());
  EXPECT_TRUE(ids.ext_sid.empty());
}

TEST(SessionIdsTest, FailedDecodingGivesScratchBack) {
  // The bracket blob is large but has no context id: its scratch space must
  // be released so the ext-sid after it still fits.
  std::string blob = "l=en&c=001&x=";
  blob += std::string(700, 'a');
  std::string path = "/sap/;sap-ext-sid=";
  for (int i = 0; i < 400; ++i) {
    path += "%43";
  }
  std::string bracket = StdBase64(blob);
  RequestParts request{path, "", {}, bracket};
  SessionIds ids;
  ExtractSessionIds(request, "", &ids);
  EXPECT_TRUE(ids.contextid_instance.empty());
  EXPECT_EQ(ids.ext_sid, std::string(400, 'C'));
}

// What sap-contextid's instance is by its definition: the whole value
// percent-decoded when it needs it (into the scratch, which keeps the
// decoded value), then read; nothing kept when that fails.
struct ContextIdWant {
  std::string instance;
  size_t scratch = 0;       // bytes of scratch the decoded value keeps
  bool into_value = false;  // the instance is a view into the value itself
};

ContextIdWant DecodeWholeValue(std::string_view value, bool plus_is_space, size_t available) {
  const bool needs = value.find('%') != std::string_view::npos ||
                     (plus_is_space && value.find('+') != std::string_view::npos);
  if (!needs) {
    return {std::string(ContextIdInstance(value)), 0, true};
  }
  std::string buffer(available + 1, '\0');
  const int n = PercentDecode(value, buffer.data(), available, plus_is_space);
  if (n < 0) {
    return {};
  }
  const std::string_view instance =
      ContextIdInstance(std::string_view(buffer.data(), static_cast<size_t>(n)));
  if (instance.empty()) {
    return {};
  }
  return {std::string(instance), static_cast<size_t>(n), false};
}

// The usual sap-contextid values are read without decoding them whole: the
// same instance, the same scratch use and the same kind of view (into the
// value or the scratch) as decoding them, for cookie and query values of
// every shape: either prefix spelling and mixed ones, escapes and "+" in
// and after the instance, malformed and cut escapes, control and non-ASCII
// bytes, empty parts, and values at the edge of the scratch left after a
// decoded saplb cookie.
TEST(SessionIdsTest, ContextIdFastPathAgreesWithDecodingTheWholeValue) {
  std::mt19937 random(3025);
  const std::vector<std::string> heads = {
      "SID:ANON:", "SID%3aANON%3a", "SID%3AANON%3A", "SID%3aANON%3A", "SID%3aANON:",
      "SID:ANON%3a", "sid:anon:", "SID%3aANON%3", "SID:ANON", "S%49D:ANON:", "", "SID%3bANON%3a"};
  const std::vector<std::string> ends = {":", "%3a", "%3A", "%3", "%", "", "%zz", "%3b", "::"};
  const std::vector<std::string> pieces = {
      "a", "Z", "0", "_", "-", "+", ".", "%41", "%3a", "%3A", ":", " ", "\x01", "\x7f", "\xc3\xa9",
      "%", "%2", "%zz", "%2B", "%20", "~", "=", "\"", "(", ")"};
  // A third of the values take only these: the usual values and near ones.
  const std::vector<std::string> plain_pieces = {"a", "Z", "0", "_", "-", "+", "%41", "%2B"};
  bool plain = false;
  auto some = [&](size_t most) {
    const std::vector<std::string>& from = plain ? plain_pieces : pieces;
    std::string out;
    for (size_t n = random() % (most + 1); n > 0; --n) {
      out += from[random() % from.size()];
    }
    return out;
  };
  for (int round = 0; round < 60000; ++round) {
    plain = round % 3 == 0;
    std::string value = heads[random() % heads.size()] + some(round % 7 == 0 ? 3 : 12) +
                        ends[random() % ends.size()] + some(12);
    if (round % 11 == 0) {
      // Near the scratch's edge: ~1,000 bytes more, escaped or not.
      const std::string filler = random() % 2 == 0 ? "b" : "%62";
      for (size_t n = 900 + random() % 240; n > 0; n -= std::min<size_t>(n, filler.size())) {
        value += filler;
      }
    }
    // A saplb cookie decoded first takes some of the scratch.
    std::string saplb;
    if (random() % 3 == 0) {
      saplb = "saplb_*=%28" + std::string(1 + random() % 200, 'i') + "%29n";
    }
    const bool in_query = random() % 2 == 0;
    std::string cookie;
    std::string query;
    if (in_query) {
      // A query value ends at "&".
      for (char& c : value) {
        c = c == '&' ? '~' : c;
      }
      query = "x=1&sap-contextid=" + value + "&y=2";
      cookie = saplb;
    } else {
      // A cookie value has no ";", no spaces or quotes at its ends.
      for (char& c : value) {
        c = c == ';' ? '~' : c;
      }
      while (!value.empty() && (value.back() == ' ' || value.back() == '"')) {
        value.pop_back();
      }
      while (!value.empty() && (value.front() == ' ' || value.front() == '"')) {
        value.erase(value.begin());
      }
      cookie = (saplb.empty() ? "" : saplb + "; ") + "sap-contextid=" + value;
    }
    SCOPED_TRACE((in_query ? "query " : "cookie ") + value + " after " + saplb);
    std::string_view cookies[] = {cookie};
    RequestParts request{"/sap/bc/x", query,
                         std::span<const std::string_view>(cookies, cookie.empty() ? 0 : 1), ""};
    SessionIds before;
    RequestParts saplb_only{"/sap/bc/x", "", request.cookie_headers, ""};
    std::string saplb_cookie = saplb;
    std::string_view saplb_cookies[] = {saplb_cookie};
    saplb_only.cookie_headers =
        std::span<const std::string_view>(saplb_cookies, saplb.empty() ? 0 : 1);
    ExtractSessionIds(saplb_only, "", &before);
    const ContextIdWant want =
        DecodeWholeValue(value, in_query, before.scratch.size() - before.scratch_used);
    SessionIds ids;
    ExtractSessionIds(request, "", &ids);
    ASSERT_EQ(ids.contextid_instance, want.instance);
    ASSERT_EQ(ids.scratch_used, before.scratch_used + want.scratch);
    if (!want.instance.empty()) {
      const char* at = ids.contextid_instance.data();
      const std::string_view source = in_query ? std::string_view(query) : std::string_view(cookie);
      const bool into_value = at >= source.data() && at < source.data() + source.size();
      ASSERT_EQ(into_value, want.into_value);
    }
  }
}

// NextCookie finds a pair's ";" and "=" 16 bytes at once, then with
// memchr: the same pairs as splitting at every ";" and the first "=" of
// each, for headers of every length with separators at every place (the
// 16-byte edge included), empty pairs, pairs without "=", spaces, quotes
// and non-ASCII bytes.
TEST(NextCookieTest, AgreesWithSplittingAtEverySemicolon) {
  std::mt19937 random(6265);
  const std::string alphabet = "ab;= \"\t\xc3x;=";
  for (int round = 0; round < 40000; ++round) {
    std::string header;
    for (size_t n = random() % (round % 4 == 0 ? 120 : 40); n > 0; --n) {
      header += alphabet[random() % alphabet.size()];
    }
    SCOPED_TRACE(header);
    // The reference: RFC 6265 5.2 as written, one pair at a time.
    std::vector<std::pair<std::string, std::string>> want;
    std::string_view rest = header;
    while (!rest.empty()) {
      const size_t semicolon = rest.find(';');
      std::string_view pair = rest.substr(0, semicolon);
      rest = semicolon == std::string_view::npos ? std::string_view() : rest.substr(semicolon + 1);
      const size_t eq = pair.find('=');
      if (eq == std::string_view::npos) {
        continue;
      }
      auto trim = [](std::string_view s) {
        while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
          s.remove_prefix(1);
        }
        while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
          s.remove_suffix(1);
        }
        return s;
      };
      std::string_view name = trim(pair.substr(0, eq));
      std::string_view value = trim(pair.substr(eq + 1));
      if (name.empty()) {
        continue;
      }
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      want.emplace_back(name, value);
    }
    std::vector<std::pair<std::string, std::string>> got;
    std::string_view walk = header;
    std::string_view name;
    std::string_view value;
    while (NextCookie(&walk, &name, &value)) {
      got.emplace_back(name, value);
    }
    ASSERT_EQ(got, want);
  }
}

TEST(SessionIdsTest, ExtractionDoesNotAllocate) {
  std::string bracket = StdBase64(std::string("l=en&s=") + kSapContextId);
  std::string_view cookies[] = {
      "JSESSIONID=(j1)abcEnd; saplb_*=%28J2EE1%291; kwd_affinity=mac.server",
      std::string_view("sap-contextid=garbage")};
  RequestParts request{"/sap/bc;sap-ext-sid=A%2FB/x;jsessionid=q", "sap-contextid=%zz", cookies,
                       bracket};
  SessionIds ids;
  testing::AllocScope scope;
  for (int i = 0; i < 100; ++i) {
    ExtractSessionIds(request, "kwd_affinity", &ids);
  }
  EXPECT_EQ(scope.Delta().count, 0u);
  EXPECT_EQ(ids.contextid_instance, "ls3022_BIN_12");
  EXPECT_EQ(ids.ext_sid, "A/B");
  EXPECT_EQ(ids.jsessionid_instance, "j1");
}

struct DecodeCase {
  std::string in;
  bool plus_is_space;
  int want_length;  // -1: rejected
  std::string want;
};

TEST(PercentDecodeTest, Table) {
  const DecodeCase cases[] = {
      {"", false, 0, ""},
      {"abc", false, 3, "abc"},
      {"a%3ab%3Ac", false, 5, "a:b:c"},
      {"a+b", false, 3, "a+b"},
      {"a+b", true, 3, "a b"},
      {"%2B", true, 1, "+"},
      {"%00", false, 1, std::string(1, '\0')},
      {"%", false, -1, ""},
      {"%4", false, -1, ""},
      {"ab%4", false, -1, ""},
      {"%g1", false, -1, ""},
      {"%1g", false, -1, ""},
  };
  for (const DecodeCase& c : cases) {
    char out[16];
    int n = PercentDecode(c.in, out, sizeof(out), c.plus_is_space);
    ASSERT_EQ(n, c.want_length) << c.in;
    if (n >= 0) {
      EXPECT_EQ(std::string(out, static_cast<size_t>(n)), c.want) << c.in;
    }
  }
}

TEST(PercentDecodeTest, RejectsOutputThatDoesNotFit) {
  char out[4];
  EXPECT_EQ(PercentDecode("abcd", out, 4, false), 4);
  EXPECT_EQ(PercentDecode("abcde", out, 4, false), -1);
  EXPECT_EQ(PercentDecode("%41%41%41%41%41", out, 4, false), -1);
  EXPECT_EQ(PercentDecode("a", out, 0, false), -1);
}

// The run-copying decoder against a byte-at-a-time reference, exhaustively
// over short inputs and every output capacity up to their length.
TEST(PercentDecodeTest, AgreesWithAByteLoop) {
  auto reference = [](std::string_view in, size_t capacity, bool plus_is_space, std::string* out) {
    out->clear();
    for (size_t i = 0; i < in.size(); ++i) {
      char c = in[i];
      if (c == '%') {
        auto hex = [](char h) {
          return h >= '0' && h <= '9'   ? h - '0'
                 : h >= 'a' && h <= 'f' ? h - 'a' + 10
                 : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                        : -1;
        };
        if (in.size() - i < 3 || hex(in[i + 1]) < 0 || hex(in[i + 2]) < 0) {
          return -1;
        }
        c = static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2]));
        i += 2;
      } else if (c == '+' && plus_is_space) {
        c = ' ';
      }
      if (out->size() >= capacity) {
        return -1;
      }
      *out += c;
    }
    return static_cast<int>(out->size());
  };
  constexpr std::string_view kAlphabet = "%4a+g";
  std::string in;
  std::string want;
  int compared = 0;
  for (size_t length = 0; length <= 6; ++length) {
    std::vector<size_t> digits(length, 0);
    while (true) {
      in.clear();
      for (size_t d : digits) {
        in += kAlphabet[d];
      }
      for (bool plus_is_space : {false, true}) {
        for (size_t capacity = 0; capacity <= length; ++capacity) {
          char out[8];
          const int n = PercentDecode(in, out, capacity, plus_is_space);
          ASSERT_EQ(n, reference(in, capacity, plus_is_space, &want)) << in << " " << capacity;
          if (n >= 0) {
            ASSERT_EQ(std::string(out, static_cast<size_t>(n)), want) << in;
          }
          ++compared;
        }
      }
      size_t k = 0;
      while (k < length && ++digits[k] == kAlphabet.size()) {
        digits[k++] = 0;
      }
      if (k == length) {
        break;
      }
    }
  }
  EXPECT_GT(compared, 100000);
}

// Long inputs take the 16-byte block path: the same answers as a byte loop
// for escapes at every position, truncated or bad escapes at a block's end,
// and capacities around the decoded length.
TEST(PercentDecodeTest, LongInputsAgreeWithAByteLoop) {
  auto hex = [](char h) {
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                                 : -1;
  };
  std::mt19937 random(25);
  constexpr std::string_view kAlphabet = "%4a+gF0";
  for (int round = 0; round < 20000; ++round) {
    std::string in;
    const size_t length = 14 + random() % 50;
    for (size_t i = 0; i < length; ++i) {
      in += kAlphabet[random() % kAlphabet.size()];
    }
    std::string want;
    bool bad = false;
    for (size_t i = 0; i < in.size() && !bad; ++i) {
      if (in[i] != '%') {
        want += in[i];
      } else if (in.size() - i < 3 || hex(in[i + 1]) < 0 || hex(in[i + 2]) < 0) {
        bad = true;
      } else {
        want += static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2]));
        i += 2;
      }
    }
    const size_t capacity = want.size() + 3 >= 6 ? want.size() + 3 - random() % 7 : 0;
    std::vector<char> out(capacity + 1);
    const int n = PercentDecode(in, out.data(), capacity, false);
    SCOPED_TRACE(in + " " + std::to_string(capacity));
    if (bad || want.size() > capacity) {
      ASSERT_EQ(n, -1);
    } else {
      ASSERT_EQ(n, static_cast<int>(want.size()));
      ASSERT_EQ(std::string(out.data(), want.size()), want);
    }
  }
}

// The query's sap-contextid is the first pair whose name is the key (any
// case), read up to the next "&": random queries of names, "=" and "&"
// against a plain split into pairs.
TEST(SessionIdsTest, QueryKeyIsTheFirstPairNamedSo) {
  auto reference = [](std::string_view form) -> std::string_view {
    while (!form.empty()) {
      const size_t amp = form.find('&');
      const std::string_view pair = form.substr(0, amp);
      form = amp == std::string_view::npos ? std::string_view() : form.substr(amp + 1);
      const size_t eq = pair.find('=');
      if (eq == std::string_view::npos) {
        continue;
      }
      std::string name(pair.substr(0, eq));
      for (char& c : name) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      if (name == "sap-contextid") {
        return pair.substr(eq + 1);
      }
    }
    return {};
  };
  const std::string_view tokens[] = {"sap-contextid", "SAP-ContextID", "sap-contextidx", "x",
                                     "=",             "&",             "SID:ANON:",      "i1",
                                     ":",             "SID%3aANON%3a", "sap-context"};
  std::mt19937 random(25);
  SessionIds ids;
  for (int round = 0; round < 20000; ++round) {
    std::string query;
    const size_t count = random() % 9;
    for (size_t i = 0; i < count; ++i) {
      query += tokens[random() % std::size(tokens)];
    }
    SCOPED_TRACE(query);
    std::string decoded(reference(query));
    char buffer[256];
    const int n = PercentDecode(decoded, buffer, sizeof(buffer), /*plus_is_space=*/true);
    const std::string_view want =
        n < 0 ? std::string_view() : ContextIdInstance(std::string_view(buffer, n));
    RequestParts request{"/sap/bc/x", query, {}, ""};
    ExtractSessionIds(request, "kwd_affinity", &ids);
    ASSERT_EQ(ids.contextid_instance, want);
  }
}

TEST(ContextIdInstanceTest, Table) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"SID:ANON:ls3022_BIN_12:VXJs82VIOdbyJChzNHUbrFGpo275YjC3XTsuZ4P0-ATT", "ls3022_BIN_12"},
      {"SID:ANON:a:b", "a"},
      {"SID:ANON:a:b:c", "a"},
      {"SID:ANON::b", ""},
      {"SID:ANON:a:", ""},
      {"SID:ANON:a", ""},
      {"SID:ANON:", ""},
      {"sid:anon:a:b", ""},
      {"SID:USER:a:b", ""},
      {"SID:ANON:a b:c", ""},
      {"", ""},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(ContextIdInstance(in), want) << in;
  }
}

TEST(NextCookieTest, IteratesPairsPerRfc6265) {
  std::string_view header = " a=1;b = 2 ;;c=\"3\"; bad; =x; d=; e=\"\"; f=\"unbalanced";
  std::vector<std::pair<std::string, std::string>> got;
  std::string_view name;
  std::string_view value;
  while (NextCookie(&header, &name, &value)) {
    got.emplace_back(name, value);
  }
  std::vector<std::pair<std::string, std::string>> want = {
      {"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", ""}, {"e", ""}, {"f", "\"unbalanced"}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(header.empty());
  EXPECT_FALSE(NextCookie(&header, &name, &value));
}

}  // namespace
}  // namespace kwd::session
