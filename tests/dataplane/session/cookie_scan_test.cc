// ExtractSessionIds reads the Cookie headers in one pass that looks at a
// pair's name only when it starts like a name it looks for. These tests hold
// it to a straightforward reading of the whole request: every Cookie header
// split at each ";", each pair at its first "=", names and values trimmed of
// spaces and tabs, one pair of quotes taken off a value, the first pair of
// each name winning; then the path parameters, the query and the bracket
// segment as docs/internals.md describes them.

#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "dataplane/session/session_ids.h"

namespace kwd::session {
namespace {

// What ExtractSessionIds should find, as text.
struct Expected {
  std::string contextid_instance;
  std::vector<std::pair<std::string, std::string>> saplb;
  std::string jsessionid;
  std::string jsessionid_instance;
  std::string ext_sid;
  std::string affinity_cookie;

  bool operator==(const Expected&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Expected& e) {
  os << "{contextid=" << e.contextid_instance << " saplb=[";
  for (const auto& [group, instance] : e.saplb) {
    os << group << ":" << instance << " ";
  }
  return os << "] jsessionid=" << e.jsessionid << " instance=" << e.jsessionid_instance
            << " ext_sid=" << e.ext_sid << " affinity=" << e.affinity_cookie << "}";
}

Expected Found(const SessionIds& ids) {
  Expected e;
  e.contextid_instance = std::string(ids.contextid_instance);
  for (size_t i = 0; i < ids.saplb_count; ++i) {
    e.saplb.emplace_back(ids.saplb[i].group, ids.saplb[i].instance);
  }
  e.jsessionid = std::string(ids.jsessionid);
  e.jsessionid_instance = std::string(ids.jsessionid_instance);
  e.ext_sid = std::string(ids.ext_sid);
  e.affinity_cookie = std::string(ids.affinity_cookie);
  return e;
}

// --- the reference reading ---

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

// Percent-decodes byte by byte; false on a bad or cut escape.
bool Decode(std::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (in.size() - i < 3) {
        return false;
      }
      const int hi = HexDigitValue(in[i + 1]);
      const int lo = HexDigitValue(in[i + 2]);
      if (hi < 0 || lo < 0) {
        return false;
      }
      out->push_back(static_cast<char>(hi << 4 | lo));
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(in[i]);
    }
  }
  return true;
}

bool Visible(std::string_view s) {
  for (char c : s) {
    if (!(c > 0x20 && c < 0x7f)) {
      return false;
    }
  }
  return true;
}

// "SID:ANON:<instance>:<something>" after decoding.
std::string ContextIdOf(std::string_view encoded, bool plus_is_space) {
  std::string decoded;
  if (!Decode(encoded, plus_is_space, &decoded) || decoded.rfind("SID:ANON:", 0) != 0) {
    return "";
  }
  const std::string rest = decoded.substr(9);
  const size_t colon = rest.find(':');
  if (colon == 0 || colon == std::string::npos || colon + 1 == rest.size()) {
    return "";
  }
  const std::string instance = rest.substr(0, colon);
  return Visible(instance) ? instance : "";
}

// "(<instance>)<rest>": the instance, or "" when malformed.
bool Parenthesized(std::string_view value, std::string* instance, std::string* rest) {
  if (value.size() < 3 || value.front() != '(') {
    return false;
  }
  const size_t close = value.find(')', 1);
  if (close == std::string_view::npos || close == 1) {
    return false;
  }
  const std::string_view name = value.substr(1, close - 1);
  if (!Visible(name) || name.find('(') != std::string_view::npos) {
    return false;
  }
  *instance = std::string(name);
  *rest = std::string(value.substr(close + 1));
  return true;
}

// The first value of `key` (any case) in "a=b&c=d".
bool FormValue(std::string_view form, std::string_view key, std::string* value) {
  size_t start = 0;
  while (start <= form.size() && !form.empty()) {
    const size_t amp = form.find('&', start);
    const std::string_view pair =
        form.substr(start, amp == std::string_view::npos ? std::string_view::npos : amp - start);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && Lower(pair.substr(0, eq)) == key) {
      *value = std::string(pair.substr(eq + 1));
      return true;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    start = amp + 1;
  }
  return false;
}

Expected Reference(std::string_view path, std::string_view query,
                   const std::vector<std::string>& headers, std::string_view bracket,
                   std::string_view affinity_name) {
  Expected e;
  bool has_contextid = false;
  bool has_jsessionid = false;
  bool has_affinity = false;
  std::string contextid_cookie;
  for (const std::string& header : headers) {
    size_t start = 0;
    while (start <= header.size()) {
      const size_t semicolon = header.find(';', start);
      const std::string pair = header.substr(
          start, semicolon == std::string::npos ? std::string::npos : semicolon - start);
      start = semicolon == std::string::npos ? header.size() + 1 : semicolon + 1;
      const size_t eq = pair.find('=');
      if (eq == std::string::npos) {
        continue;
      }
      const std::string name = Trim(pair.substr(0, eq));
      if (name.empty()) {
        continue;
      }
      std::string value = Trim(pair.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      if (!affinity_name.empty() && name == affinity_name && !has_affinity) {
        has_affinity = true;
        e.affinity_cookie = value;
      }
      if (name == "sap-contextid") {
        if (!has_contextid) {
          has_contextid = true;
          contextid_cookie = value;
        }
      } else if (name == "JSESSIONID") {
        if (!has_jsessionid) {
          has_jsessionid = true;
          e.jsessionid = value;
        }
      } else if (name.rfind("saplb_", 0) == 0 && name.size() > 6) {
        const std::string group = name.substr(6);
        bool seen = false;
        for (const auto& [g, unused] : e.saplb) {
          seen = seen || g == group;
        }
        std::string decoded;
        std::string instance;
        std::string node;
        if (e.saplb.size() < SessionIds::kMaxSaplb && !seen &&
            Decode(value, /*plus_is_space=*/false, &decoded) &&
            Parenthesized(decoded, &instance, &node)) {
          e.saplb.emplace_back(group, instance);
        }
      }
    }
  }

  // ";name=value" path parameters, each ending at "/", ";" or "?"; none
  // after a "?".
  std::string param_contextid;
  std::string param_jsessionid;
  std::string param_ext_sid;
  bool has_param_contextid = false;
  bool has_param_jsessionid = false;
  bool has_param_ext_sid = false;
  for (size_t pos = path.find(';'); pos != std::string_view::npos;) {
    const size_t end = path.find_first_of("/;?", pos + 1);
    const std::string_view param = path.substr(
        pos + 1, end == std::string_view::npos ? std::string_view::npos : end - pos - 1);
    const size_t eq = param.find('=');
    if (eq != std::string_view::npos) {
      const std::string name = Lower(param.substr(0, eq));
      const std::string value(param.substr(eq + 1));
      if (name == "sap-contextid" && !has_param_contextid) {
        has_param_contextid = true;
        param_contextid = value;
      } else if (name == "jsessionid" && !has_param_jsessionid) {
        has_param_jsessionid = true;
        param_jsessionid = value;
      } else if (name == "sap-ext-sid" && !has_param_ext_sid) {
        has_param_ext_sid = true;
        param_ext_sid = value;
      }
    }
    if (end == std::string_view::npos || path[end] == '?') {
      break;
    }
    pos = path.find(';', end);
  }

  std::string query_value;
  if (has_contextid) {
    e.contextid_instance = ContextIdOf(contextid_cookie, /*plus_is_space=*/false);
  }
  if (e.contextid_instance.empty() && FormValue(query, "sap-contextid", &query_value)) {
    e.contextid_instance = ContextIdOf(query_value, /*plus_is_space=*/true);
  }
  if (e.contextid_instance.empty() && has_param_contextid) {
    e.contextid_instance = ContextIdOf(param_contextid, /*plus_is_space=*/false);
  }
  if (e.contextid_instance.empty() && !bracket.empty()) {
    std::string form(bracket.size(), '\0');
    const int n = Base64Decode(bracket, form.data(), form.size());
    std::string value;
    if (n > 0) {
      form.resize(static_cast<size_t>(n));
      if (FormValue(form, "s", &value) || FormValue(form, "sap-contextid", &value)) {
        e.contextid_instance = ContextIdOf(value, /*plus_is_space=*/true);
      }
    }
  }

  if (!has_jsessionid && has_param_jsessionid) {
    e.jsessionid = param_jsessionid;
  }
  std::string instance;
  std::string rest;
  if (Parenthesized(e.jsessionid, &instance, &rest) && rest.size() >= 3 &&
      rest.compare(rest.size() - 3, 3, "End") == 0) {
    e.jsessionid_instance = instance;
  }
  std::string decoded;
  if (has_param_ext_sid && Decode(param_ext_sid, /*plus_is_space=*/false, &decoded)) {
    e.ext_sid = decoded;
  }
  return e;
}

Expected Extract(std::string_view path, std::string_view query,
                 const std::vector<std::string>& headers, std::string_view bracket,
                 std::string_view affinity_name, bool path_without_params = false) {
  std::vector<std::string_view> views(headers.begin(), headers.end());
  RequestParts request{path, query, views, bracket};
  request.path_without_params = path_without_params;
  SessionIds ids;
  ExtractSessionIds(request, affinity_name, &ids);
  // Views stay inside the headers, the path, the query or the scratch.
  auto inside = [&](std::string_view view) {
    if (view.empty()) {
      return true;
    }
    auto within = [&](std::string_view area) {
      return view.data() >= area.data() && view.data() + view.size() <= area.data() + area.size();
    };
    bool ok = within(path) || within(query) ||
              within(std::string_view(ids.scratch.data(), ids.scratch_used));
    for (std::string_view header : views) {
      ok = ok || within(header);
    }
    return ok;
  };
  EXPECT_TRUE(inside(ids.jsessionid) && inside(ids.affinity_cookie) &&
              inside(ids.contextid_instance) && inside(ids.ext_sid));
  return Found(ids);
}

// --- edge cases, each with what it must give ---

struct ScanCase {
  std::string name;
  std::vector<std::string> cookies;
  Expected want;
  std::string affinity_name = "kwd_affinity";
};

std::vector<ScanCase> ScanCases() {
  constexpr char kCtx[] = "SID%3aANON%3ahost_A_00%3aq";
  const std::string ctx = std::string("sap-contextid=") + kCtx;
  return {
      {"quoted_values",
       {"JSESSIONID=\"(j1)abcEnd\"; kwd_affinity=\"m.s\"; sap-contextid=\"" + std::string(kCtx) +
        "\"; saplb_g=\"(i1)n\""},
       {"host_A_00", {{"g", "i1"}}, "(j1)abcEnd", "j1", "", "m.s"}},
      {"quote_on_one_side_stays", {"JSESSIONID=\"abc; kwd_affinity=x\""}, {"", {}, "\"abc", "", "", "x\""}},
      {"lone_quote_stays", {"JSESSIONID=\""}, {"", {}, "\"", "", "", ""}},
      {"empty_quotes_give_empty_value", {"JSESSIONID=\"\"; kwd_affinity=\"\""}, {}},
      {"spaces_inside_quotes_stay", {"JSESSIONID=\" a \""}, {"", {}, " a ", "", "", ""}},
      {"empty_names_are_skipped", {"=x; \t=y;JSESSIONID=z"}, {"", {}, "z", "", "", ""}},
      {"empty_value", {"JSESSIONID=; JSESSIONID=later"}, {}},
      {"pair_without_equals_is_skipped", {"JSESSIONID; JSESSIONID =v"}, {"", {}, "v", "", "", ""}},
      {"duplicates_first_wins",
       {"JSESSIONID=a; JSESSIONID=b; kwd_affinity=1; kwd_affinity=2; " + ctx +
        "; sap-contextid=SID%3aANON%3ahost_B_00%3aq"},
       {"host_A_00", {}, "a", "", "", "1"}},
      {"duplicates_across_headers_first_wins",
       {"kwd_affinity=first", "JSESSIONID=j; kwd_affinity=second", "JSESSIONID=k"},
       {"", {}, "j", "", "", "first"}},
      {"saplb_duplicate_group_first_well_formed_wins",
       {"saplb_g=bad; saplb_g=(one)1; saplb_g=(two)2"},
       {"", {{"g", "one"}}, "", "", "", ""}},
      {"whitespace_around_names_and_values",
       {" \t JSESSIONID \t = \t v w \t ;\tkwd_affinity\t=\ta\t; saplb_g =\t(i)n "},
       {"", {{"g", "i"}}, "v w", "", "", "a"}},
      {"semicolons_at_the_ends", {";;; JSESSIONID=v;;", ";", "; kwd_affinity=a;"},
       {"", {}, "v", "", "", "a"}},
      {"only_separators", {";", ";;", " ; ; ", ""}, {}},
      {"names_that_are_prefixes_of_each_other",
       {"JSESSIONI=a; JSESSIONIDX=b; JSESSIONID_=c; sap-context=d; sap-contextidx=e; "
        "saplb=(f)1; saplb_=(g)1; kwd_affinit=h; kwd_affinityx=i; JSESSIONID=ok"},
       {"", {}, "ok", "", "", ""}},
      {"names_sharing_a_first_byte",
       {"s=1; sap-usercontext=sap-client=001; saplb_=x; sap-contextid=" + std::string(kCtx)},
       {"host_A_00", {}, "", "", "", ""}},
      {"cookie_names_are_case_sensitive",
       {"jsessionid=a; Jsessionid=b; SAP-CONTEXTID=SID%3aANON%3ax%3ay; SAPLB_g=(i)1; "
        "KWD_AFFINITY=c"},
       {}},
      {"saplb_group_with_inner_space_and_star",
       {"saplb_a b=(i1)n; saplb_*=(i2)n; saplb_ =(i3)n"},
       {"", {{"a b", "i1"}, {"*", "i2"}}, "", "", "", ""}},
      {"saplb_value_holding_equals", {"saplb_g==(i)n; saplb_h=(j)=n"}, {"", {{"h", "j"}}, "", "", "", ""}},
      {"value_holding_equals_and_quotes", {"JSESSIONID=a=b\"c"}, {"", {}, "a=b\"c", "", "", ""}},
      {"affinity_named_like_sap_cookies",
       {"JSESSIONID=v; sap-contextid=" + std::string(kCtx)},
       {"host_A_00", {}, "v", "", "", "v"},
       "JSESSIONID"},
      {"affinity_named_like_saplb", {"saplb_g=(i)n"}, {"", {{"g", "i"}}, "", "", "", "(i)n"}, "saplb_g"},
      {"affinity_name_with_space_inside", {"a b=v"}, {"", {}, "", "", "", "v"}, "a b"},
      {"affinity_name_with_leading_space_never_matches", {" kwd=v"}, {}, " kwd"},
      {"affinity_name_with_equals_never_matches", {"a=b=c"}, {}, "a=b"},
      {"affinity_name_with_semicolon_never_matches", {"a;b=c"}, {}, "a;b"},
      {"empty_affinity_name_is_not_looked_up", {"=v; kwd_affinity=w"}, {}, ""},
      {"one_byte_names", {"J=1; s=2; k=3"}, {"", {}, "", "", "", "3"}, "k"},
      {"identifier_at_every_16_byte_edge",
       {"xxxxxxxxxxxxxx; JSESSIONID=a", "xxxxxxxxxxxxxxx;JSESSIONID=a",
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; kwd_affinity=b"},
       {"", {}, "a", "", "", "b"}},
  };
}

class CookieScanTableTest : public ::testing::TestWithParam<ScanCase> {};

TEST_P(CookieScanTableTest, FindsWhatTheReferenceFinds) {
  const ScanCase& c = GetParam();
  const Expected got = Extract("/sap/bc/x", "", c.cookies, "", c.affinity_name);
  EXPECT_EQ(got, c.want);
  EXPECT_EQ(got, Reference("/sap/bc/x", "", c.cookies, "", c.affinity_name));
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, CookieScanTableTest, ::testing::ValuesIn(ScanCases()),
                         [](const auto& info) { return info.param.name; });

// --- random requests ---

class RandomRequests {
 public:
  explicit RandomRequests(uint32_t seed) : random_(seed) {}

  size_t Below(size_t n) { return random_() % n; }
  template <typename T>
  const T& Pick(const std::vector<T>& from) {
    return from[Below(from.size())];
  }

  std::string Spaces() {
    static const std::vector<std::string> spaces = {"", "", "", " ", "  ", "\t", " \t "};
    return Pick(spaces);
  }

  std::string Value() {
    static const std::vector<std::string> values = {
        "SID%3aANON%3ahost_A_00%3aVXJs82VIOdbyJChzNHUb-ATT",
        "SID:ANON:host_B_01:xyz",
        "SID%3AANON%3Ahost_C_02%3Aq",
        "SID%3aANON%3a%3aq",
        "SID%3aANON%3ahost%zz%3aq",
        "(j2ee_J_00)ID123456End",
        "(j2ee_J_00)ID123456",
        "%28J2EE1%29n",
        "(J2EE2)",
        "()x",
        "(a(b)c",
        "sid42",
        "",
        "\"",
        "\"\"",
        "\"quoted\"",
        "a=b",
        "sap-client=001",
        "abc.def",
        "x y",
        "%",
    };
    if (Below(12) == 0) {
      // A long value (a logon ticket): past the 64 bytes searched 16 at a time.
      std::string ticket;
      const size_t length = Below(4) == 0 ? 3000 + Below(1200) : 40 + Below(120);
      for (size_t i = 0; i < length; ++i) {
        ticket += static_cast<char>("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
                                        [Below(65)]);
      }
      return ticket;
    }
    std::string value = Pick(values);
    if (Below(6) == 0 && value.size() >= 2) {
      value = "\"" + value + "\"";
    }
    return value;
  }

  std::string Name() {
    static const std::vector<std::string> names = {
        "sap-contextid", "sap-contextiD", "sap-contextidx", "sap-context", "sap-contexti",
        "JSESSIONID", "JSESSIONI", "JSESSIONIDX", "jsessionid", "JSESSIONID_",
        "saplb_*", "saplb_g", "saplb_G", "saplb_a b", "saplb_", "saplb", "SAPLB_g", "saplb_g2",
        "kwd_affinity", "kwd_affinit", "kwd_affinityx", "s", "J", "k", "", "MYSAPSSO2",
        "sap-usercontext", "sapl", "sap-",
    };
    return Pick(names);
  }

  std::string Pair() {
    switch (Below(10)) {
      case 0:
        return Spaces();  // an empty pair
      case 1:
        return Spaces() + Name() + Spaces();  // no "="
      default:
        return Spaces() + Name() + Spaces() + "=" + Spaces() + Value() + Spaces();
    }
  }

  std::string Header() {
    std::string header;
    const size_t pairs = Below(7);
    if (Below(5) == 0) {
      header += ";";
    }
    for (size_t i = 0; i < pairs; ++i) {
      if (i > 0) {
        header += Below(4) == 0 ? ";" : "; ";
      }
      header += Pair();
    }
    if (Below(5) == 0) {
      header += Below(2) == 0 ? ";" : "; ";
    }
    // Now and then a stray separator or byte anywhere.
    for (size_t n = Below(8) == 0 ? 1 + Below(3) : 0; n > 0; --n) {
      static const std::string strays = ";=\" \tJsk\x01\xc3";
      header.insert(Below(header.size() + 1), 1, strays[Below(strays.size())]);
    }
    return header;
  }

  std::string Path() {
    static const std::vector<std::string> params = {
        ";jsessionid=(p1)xEnd", ";JSESSIONID=plain", ";sap-ext-sid=E1", ";SAP-Ext-Sid=A%2FB",
        ";sap-ext-sid=bad%G1", ";sap-ext-sid=", ";sap-contextid=SID%3aANON%3apath_P_00%3aq",
        ";foo=bar", ";x", ";"};
    static const std::vector<std::string> segments = {"/sap", "/bc", "/x", "/irj/portal", ""};
    std::string path;
    for (size_t n = 1 + Below(4); n > 0; --n) {
      path += Pick(segments);
      if (Below(3) == 0) {
        path += Pick(params);
      }
    }
    if (path.empty() || path.front() != '/') {
      path.insert(0, "/");
    }
    return path;
  }

  std::string Query() {
    static const std::vector<std::string> queries = {
        "", "", "sap-language=EN", "sap-contextid=SID%3aANON%3aquery_Q_00%3ax",
        "a=1&SAP-CONTEXTID=SID%3aANON%3aq+x_Q_01%3ay", "sap-contextid=bad"};
    return Pick(queries);
  }

  std::string Affinity() {
    static const std::vector<std::string> names = {
        "kwd_affinity", "kwd_affinity", "kwd_affinity", "", "JSESSIONID", "sap-contextid",
        "saplb_g", "s", "k", " kwd_affinity", "kwd_affinity ", "a=b", "a;b", "saplb_a b"};
    return Pick(names);
  }

 private:
  std::mt19937 random_;
};

// 50,000 random requests (cookie headers with every name above and near it,
// spaces, quotes, empty pairs, stray separators, long values; path
// parameters; a query): the same identifiers as the reference reading.
TEST(CookieScanTest, RandomRequestsAgreeWithTheReference) {
  RandomRequests random(20261203);
  for (int round = 0; round < 50000; ++round) {
    std::vector<std::string> headers(random.Below(4));
    for (std::string& header : headers) {
      header = random.Header();
    }
    const std::string path = random.Path();
    const std::string query = random.Query();
    const std::string affinity = random.Affinity();
    std::string trace = "path " + path + " query " + query + " affinity '" + affinity + "'";
    for (const std::string& header : headers) {
      trace += "\ncookie: " + header;
    }
    SCOPED_TRACE(trace);
    const Expected want = Reference(path, query, headers, "", affinity);
    ASSERT_EQ(Extract(path, query, headers, "", affinity,
                      /*path_without_params=*/path.find(';') == std::string::npos),
              want);
    ASSERT_EQ(Extract(path, query, headers, "", affinity), want);
  }
}

// Every cut of one header: the scan's 16-byte steps, the last block that
// overlaps the bytes already read and the switch to memchr meet every pair
// boundary at every offset.
TEST(CookieScanTest, EveryLengthOfAHeaderAgreesWithTheReference) {
  const std::string full =
      "sap-usercontext=sap-language%3dEN%26sap-client%3d001; MYSAPSSO2=" + std::string(150, 'T') +
      "; saplb_*=(J2EE1)1 ;JSESSIONID=\"(j1)abcEnd\";;kwd_affinity = mac.server; "
      "sap-contextid=SID%3aANON%3ahost_A_00%3aq; JSESSIONID=late";
  for (size_t length = 0; length <= full.size(); ++length) {
    for (size_t skip : {0, 1, 15, 16, 17}) {
      if (skip > length) {
        continue;
      }
      const std::vector<std::string> headers = {full.substr(skip, length - skip)};
      SCOPED_TRACE(headers[0]);
      ASSERT_EQ(Extract("/x", "", headers, "", "kwd_affinity"),
                Reference("/x", "", headers, "", "kwd_affinity"));
    }
  }
}

}  // namespace
}  // namespace kwd::session
