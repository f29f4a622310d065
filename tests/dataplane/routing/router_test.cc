#include "dataplane/routing/router.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/crypto.h"
#include "dataplane/routing/routing_table.h"
#include "tests/dataplane/routing/test_snapshot.h"

namespace kwd::routing {
namespace {

using testing::AddGroup;
using testing::AddPermission;
using testing::StandardSnapshot;

class RouterTest : public ::testing::Test {
 protected:
  RouterTest()
      : clock_(std::make_shared<ManualClock>(1000)),
        codec_(std::make_shared<session::AffinityCookieCodec>("test-key")),
        router_(codec_, clock_) {
    Apply(StandardSnapshot());
  }

  void Apply(const v1::Snapshot& snapshot) {
    std::string error;
    auto table = RoutingTable::Build(snapshot, TableContext{&sessions_, &health_}, &error);
    ASSERT_NE(table, nullptr) << error;
    router_.Apply(table);
  }

  // Routes one request and completes it (sequential traffic).
  Decision Go(std::string_view target, std::vector<std::string> cookies = {},
              std::string_view host = "erp.internal", bool https = false) {
    cookies_ = std::move(cookies);
    cookie_views_.assign(cookies_.begin(), cookies_.end());
    Request request{"GET", target, host, https, cookie_views_};
    Decision decision = router_.Route(request);
    router_.Complete(decision);
    return decision;
  }

  static std::string ServerOf(const Decision& d) { return d.server ? d.server->name : "-"; }
  static std::string GroupOf(const Decision& d) { return d.group ? d.group->key : "-"; }

  void SetHealthy(const std::string& group, const std::string& server, bool healthy) {
    auto state = health_.Find(group, server);
    ASSERT_NE(state, nullptr);
    state->healthy = healthy;
  }

  std::shared_ptr<ManualClock> clock_;
  std::shared_ptr<session::AffinityCookieCodec> codec_;
  session::SessionRegistry sessions_;
  ServerHealthRegistry health_;
  Router router_;
  std::vector<std::string> cookies_;
  std::vector<std::string_view> cookie_views_;
};

TEST_F(RouterTest, VirtualHostMatching) {
  struct Case {
    const char* host;
    const char* want_vhost;
  };
  const Case cases[] = {
      {"shop.example.com", "shop.example.com"},
      {"SHOP.Example.COM:8443", "shop.example.com"},
      {"shop.example.com.", "shop.example.com"},
      {"a.example.com", "*.example.com"},
      {"a.b.example.com", "*.example.com"},
      {"example.com", ""},
      {"", ""},
      {"[::1]:8080", ""},
      {"10.0.0.1", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.host);
    Decision d = Go("/x/y", {}, c.host);
    ASSERT_NE(d.virtual_host, nullptr);
    EXPECT_EQ(d.virtual_host->host, c.want_vhost);
  }
}

TEST_F(RouterTest, AbsoluteFormAuthorityIsTheHost) {
  Decision d = Go("http://user@SHOP.example.com:80/shop/cart?x=1", {}, "other");
  EXPECT_EQ(d.virtual_host->host, "shop.example.com");
  EXPECT_EQ(d.rule, "/shop/");
  EXPECT_EQ(d.path, "/shop/cart");
}

// Issue 10 item 7: "http://host?x=1" is "/?x=1" on that host.
TEST_F(RouterTest, AbsoluteFormWithAQueryAndNoPathIsTheRoot) {
  for (std::string_view target :
       {"http://shop.example.com?x=1", "HTTP://shop.example.com:80?", "https://shop.example.com"}) {
    SCOPED_TRACE(target);
    Decision d = Go(target, {}, "other");
    EXPECT_EQ(d.status, 0);
    ASSERT_NE(d.virtual_host, nullptr);
    EXPECT_EQ(d.virtual_host->host, "shop.example.com");
    EXPECT_EQ(d.rule, "root");
    EXPECT_EQ(d.path, "/");
    EXPECT_EQ(GroupOf(d), "erp/public");
    std::string upstream = "unchanged";
    EXPECT_FALSE(UpstreamTarget(d, target, &upstream));
  }
}

TEST_F(RouterTest, NoVirtualHostIs503) {
  v1::Snapshot s = StandardSnapshot();
  s.mutable_virtual_hosts()->DeleteSubrange(0, 1);  // drop the any-host entry
  StampSnapshotVersion(&s);
  Apply(s);
  Decision d = Go("/sap/bc/x", {}, "unknown.org");
  EXPECT_EQ(d.virtual_host, nullptr);
  EXPECT_EQ(d.status, 503);
  EXPECT_EQ(d.reason, Reason::kNoServer);
  EXPECT_EQ(Go("/", {}, "x.example.com").status, 0);
}

TEST_F(RouterTest, Classification) {
  struct Case {
    const char* target;
    const char* host;
    const char* rule;
    v1::Kind kind;
    const char* group;
    int status;
  };
  const Case cases[] = {
      {"/", "h", "root", v1::KIND_ABAP, "erp/diag", 0},
      {"/index.html", "h", "root", v1::KIND_ABAP, "erp/diag", 0},
      {"/", "a.example.com", "root", v1::KIND_JAVA, "erp/j2ee", 0},
      {"/", "shop.example.com", "root", v1::KIND_ABAP, "erp/public", 0},
      {"/sap", "h", "root", v1::KIND_ABAP, "erp/diag", 0},  // one "/": a root URL
      {"/sap/", "h", "/sap/", v1::KIND_ABAP, "erp/diag", 0},
      {"/SAP/BC/bsp/x", "h", "/sap/", v1::KIND_ABAP, "erp/diag", 0},
      {"/sap/bc/gui/sap/its", "h", "/sap/bc/gui/", v1::KIND_ABAP, "erp/public", 0},
      {"/sapx/y", "h", "default", v1::KIND_JAVA, "erp/j2ee", 0},
      {"/irj/portal", "h", "/irj/", v1::KIND_JAVA, "erp/j2ee", 0},
      {"/sap(bD1lbiZjPTAwMQ==)/bc/bsp/x", "h", "/sap/", v1::KIND_ABAP, "erp/diag", 0},
      {"/x/../sap/y", "h", "/sap/", v1::KIND_ABAP, "erp/diag", 0},
      {"/%73ap/y", "h", "/sap/", v1::KIND_ABAP, "erp/diag", 0},
      {"/nogroup/x", "h", "/nogroup/", v1::KIND_ABAP, "-", 503},
      {"/empty/x", "h", "/empty/", v1::KIND_ABAP, "erp/empty", 503},
      {"/shop/x", "shop.example.com", "/shop/", v1::KIND_JAVA, "erp/j2ee", 0},
      {"/sap/x", "shop.example.com", "default", v1::KIND_JAVA, "-", 503},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.target) + " @ " + c.host);
    Decision d = Go(c.target, {}, c.host, /*https=*/true);
    EXPECT_EQ(d.rule, c.rule);
    EXPECT_EQ(d.kind, c.kind);
    EXPECT_EQ(GroupOf(d), c.group);
    EXPECT_EQ(d.status, c.status);
    EXPECT_EQ(d.reason, c.status == 0 ? Reason::kBalance : Reason::kNoServer);
    EXPECT_EQ(d.server == nullptr, c.status != 0);
  }
}

TEST_F(RouterTest, BadTargetsAre400) {
  for (const char* target : {"/..", "/a/%zz", "*", "/a/../../b"}) {
    SCOPED_TRACE(target);
    Decision d = Go(target);
    EXPECT_EQ(d.status, 400);
    EXPECT_EQ(d.reason, Reason::kBadRequest);
    EXPECT_EQ(d.server, nullptr);
  }
}

// The explain endpoints route URLs longer than the proxy's 8 KiB request
// line: a normalised path longer than the router's scratch is a 400, never
// lowercased past the end of it (heap corruption before).
TEST_F(RouterTest, PathLongerThanTheScratchIs400) {
  for (size_t length : {8193u, 9000u, 16000u}) {
    SCOPED_TRACE(length);
    std::string target = "/sap/bc/gui/";
    target.append(length - target.size(), 'A');
    Decision d = Go(target, {}, "h");
    EXPECT_EQ(d.status, 400);
    EXPECT_EQ(d.reason, Reason::kBadRequest);
    target.replace(20, 3, "%2F");  // the separators-decoded reading too
    d = Go(target, {}, "h");
    EXPECT_EQ(d.status, 400);
  }
  std::string target = "/sap/bc/gui/";
  target.append(8192 - target.size(), 'A');
  EXPECT_EQ(Go(target, {}, "h", /*https=*/true).status, 0);
}

TEST_F(RouterTest, Permissions) {
  struct Case {
    const char* target;
    bool https;
    int status;
  };
  const Case cases[] = {
      {"/sap/bc/public/x.cgi", false, 0},  // permit comes first
      {"/sap/bc/y.cgi", false, 403},
      {"/sap/bc/Y.CGI", false, 403},  // case-insensitive
      {"/sap/bc/y.cgi;p=1?x=1", false, 403},
      {"/sap/bc/gui/x", false, 403},  // secure over plain http
      {"/sap/bc/gui/x", true, 0},
      {"/SAP/BC/GUI/x", false, 403},
      {"/sap/admin", false, 403},
      {"/sap/administration/x", false, 403},
      {"/sap/x/../admin", false, 403},  // normalised before matching
      {"/sap/%61dmin", false, 403},
      {"/sap/bc/bsp", false, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    Decision d = Go(c.target, {}, "h", c.https);
    EXPECT_EQ(d.status, c.status);
    EXPECT_EQ(d.reason, c.status == 403 ? Reason::kDenied : Reason::kBalance);
  }
  // Other virtual hosts have no permission table: everything is permitted.
  EXPECT_EQ(Go("/x/y.cgi", {}, "shop.example.com").status, 503);  // no java default there
  EXPECT_EQ(Go("/shop/x.cgi", {}, "shop.example.com").status, 0);
}

// Issue 10 item 1: what an attacker may try against "deny /sap/admin*",
// "secure /sap/bc/gui/*" and "deny *.cgi". Each must be refused (403) or
// rejected (400), never forwarded.
TEST_F(RouterTest, PathTricksNeverGetPastAPermission) {
  const char* targets[] = {
      "/sap/admin/q(/a)/../../x",      // bracket with a "/": RFC reads /sap/admin/x
      "/sap/admin/q(%2Fa)/../x",       // the same, encoded
      "/sap/admin/q(%2fa)/..",         //
      "/sap/admin//../x",              // empty segment before ".."
      "/sap/admin///../../x",          //
      "/sap/admin/.%2e/admin/x",       // encoded dots
      "/sap/adm%69n/x",                // encoded unreserved letter
      "/sap/admin;p=1/x",              // path parameter on the denied segment
      "/sap/admin/..;/admin/x",        // Tomcat's "..;"
      "/sap/admin/x/..%3B/y",          //
      "/sap/x/..%2Fadmin/y",           // backend decoding %2F: /sap/admin/y
      "/sap/x/..%2fadmin/y",           //
      "/sap/x/..%5Cadmin/y",           // backend taking "\\" for "/"
      "/x/..\\sap\\admin\\y",          // raw backslashes (explain only: the parser refuses them)
      "/sap%2Fadmin/x",                //
      "/sap/bc/y.cgi;p=1",             //
      "/sap/bc/y.cgi%3Bp=1",           // a backend decoding "%3B" before it drops ";p=1"
      "/sap/bc/y.cgi%3bp=1",           //
      "/sap/bc/gui%3Bx/y",             // secure /sap/bc/gui/* to that backend
      "/sap/bc/gui(bD1l)%3Bx/y",       //
      "/sap/bc/y.cgi(bD1l)",           // bracket after the denied suffix
      "/sap/bc/y.c%67i",               //
      "/sap/bc/gui/q(/a)/../../x",     // secure over plain http
      "/sap/bc/gui//../x",             //
      "/sap/bc/gui%2Fx",               //
      "/sap/bc/x/..%2F..%2Fbc/gui/x",  //
      "http://h/sap/admin/q(/a)/../../x",
  };
  for (const char* target : targets) {
    SCOPED_TRACE(target);
    Decision d = Go(target, {}, "h", /*https=*/false);
    EXPECT_TRUE(d.status == 403 || d.status == 400) << d.status;
    EXPECT_EQ(d.server, nullptr);
  }
}

// The group comes from the path the backend will see, and that path is what
// the proxy sends.
TEST_F(RouterTest, GroupChoiceUsesTheResolvedPathWhichIsForwarded) {
  const std::string target = "/sap/bc/gui/q(/a)/../../x?y=1";
  Decision d = Go(target, {}, "h", /*https=*/true);
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(d.rule, "/sap/bc/gui/");
  EXPECT_EQ(GroupOf(d), "erp/public");
  EXPECT_EQ(d.path, "/sap/bc/gui/x");
  std::string upstream;
  ASSERT_TRUE(UpstreamTarget(d, target, &upstream));
  EXPECT_EQ(upstream, "/sap/bc/gui/x?y=1");

  const std::string kept = "/sap(bD1l)/bc;p=1/x/;sap-ext-sid=1/../y";
  d = Go(kept, {}, "h");
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(UpstreamTarget(d, kept, &upstream));
  EXPECT_EQ(upstream, "/sap(bD1l)/bc;p=1/x/y");

  // Absolute-form: the path after the authority, then the query.
  const std::string absolute = "http://h/sap/x/../bc/x?q";
  d = Go(absolute, {}, "other");
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(UpstreamTarget(d, absolute, &upstream));
  EXPECT_EQ(upstream, "/sap/bc/x?q");

  // Nothing to resolve: the received target goes as it is.
  upstream = "unchanged";
  d = Go("/sap/bc/x;p=1?q", {}, "h");
  EXPECT_FALSE(UpstreamTarget(d, "/sap/bc/x;p=1?q", &upstream));
  EXPECT_EQ(upstream, "unchanged");
}

// Session ids are read from the path the backend gets, not from a segment
// that ".." removed.
TEST_F(RouterTest, SessionIdsComeFromTheForwardedPath) {
  Decision d = Go("/sap/;sap-ext-sid=Gone1/../bc/x");
  EXPECT_EQ(d.reason, Reason::kBalance);
  EXPECT_FALSE(d.set_affinity_cookie);
  d = Go("/sap/bc/x;sap-contextid=SID%3aANON%3aapp2%3aX/../y");
  EXPECT_EQ(d.reason, Reason::kBalance);
  d = Go("/sap/bc/y;sap-contextid=SID%3aANON%3aapp2%3aX/./");
  EXPECT_EQ(d.reason, Reason::kStickyContextId);
}

// Encoded separators are fine where both readings of them agree (OData keys).
TEST_F(RouterTest, EncodedSlashesRouteWhenBothReadingsAgree) {
  Decision d = Go("/sap/opu/odata/E('a%2Fb')", {}, "h");
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(d.rule, "/sap/");
  d = Go("/sap/opu/odata/E('a%3Bb')", {}, "h");  // an encoded ";" in a key, same decision
  EXPECT_EQ(d.status, 0);
  d = Go("/sap/x/..%2Fbc/y", {}, "h");  // /sap/bc/y either way: same rule, no permission
  EXPECT_EQ(d.status, 0);
  d = Go("/sap/x/..%2F..%2Firj/y", {}, "h");  // /irj/y when decoded: another group
  EXPECT_EQ(d.status, 400);
  EXPECT_EQ(d.reason, Reason::kBadRequest);
}

TEST_F(RouterTest, BalancesWithTheSeedSequence) {
  std::string seen;
  for (int i = 0; i < 6; ++i) {
    seen += ServerOf(Go("/sap/bc/x")) + " ";
  }
  EXPECT_EQ(seen, "app1 app1 app2 app1 app1 app2 ");
}

TEST_F(RouterTest, ContextIdInEveryPlace) {
  const std::string value = "SID%3aANON%3aapp2%3aVXJs82VIOdbyJChz-NEW";
  const std::string bracket = Base64UrlEncode("s=" + value + "&c=001");
  struct Case {
    std::string target;
    std::vector<std::string> cookies;
  };
  const Case cases[] = {
      {"/sap/bc/x", {"a=b; sap-contextid=" + value}},
      {"/sap/bc/x?sap-contextid=" + value, {}},
      {"/sap/bc/x;sap-contextid=" + value, {}},
      {"/sap(" + bracket + ")/bc/x", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    for (int i = 0; i < 3; ++i) {
      Decision d = Go(c.target, c.cookies);
      EXPECT_EQ(ServerOf(d), "app2");
      EXPECT_EQ(d.reason, Reason::kStickyContextId);
      EXPECT_EQ(d.path, "/sap/bc/x");
    }
  }
}

TEST_F(RouterTest, StickyOnlyToAServerOfTheGroup) {
  // j1 exists, but in erp/j2ee: for an erp/diag request it is a lost session.
  Decision d = Go("/sap/bc/x", {"sap-contextid=SID%3aANON%3aj1%3aX"});
  EXPECT_EQ(d.reason, Reason::kBalance);
  EXPECT_EQ(d.lost, Identifier::kSapContextId);
  EXPECT_EQ(GroupOf(d), "erp/diag");
}

TEST_F(RouterTest, SaplbCookies) {
  struct Case {
    std::vector<std::string> cookies;
    const char* want;
    Reason reason;
    Identifier lost;
  };
  const Case cases[] = {
      {{"saplb_diag=(app2)node1"}, "app2", Reason::kStickySaplb, Identifier::kNone},
      {{"saplb_DIAG=(app2)node1"}, "app2", Reason::kStickySaplb, Identifier::kNone},
      {{"saplb_*=(app2)"}, "app2", Reason::kStickySaplb, Identifier::kNone},
      // The group's own cookie wins over saplb_*.
      {{"saplb_*=(app1)x; saplb_diag=(app2)x"}, "app2", Reason::kStickySaplb, Identifier::kNone},
      // Another group's cookie counts only when its instance is in this group.
      {{"saplb_portal=(j1)x; saplb_other=(app2)x"},
       "app2",
       Reason::kStickySaplb,
       Identifier::kNone},
      {{"saplb_portal=(j1)x"}, "app1", Reason::kBalance, Identifier::kNone},
      {{"saplb_diag=(gone)x"}, "app1", Reason::kBalance, Identifier::kSaplb},
      {{"saplb_diag=(gone)x", "saplb_*=(app2)x"}, "app2", Reason::kStickySaplb, Identifier::kSaplb},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cookies[0]);
    Apply(StandardSnapshot());  // fresh balancer counters: balancing starts at app1
    router_.Apply(nullptr);
    Apply(StandardSnapshot());
    Decision d = Go("/sap/bc/x", c.cookies);
    EXPECT_EQ(ServerOf(d), c.want);
    EXPECT_EQ(d.reason, c.reason);
    EXPECT_EQ(d.lost, c.lost);
  }
}

TEST_F(RouterTest, JSessionIdNamedAndLearned) {
  // "(<instance>)...End" names the server directly.
  Decision named = Go("/irj/portal", {"JSESSIONID=(j2)ID4750.51381End"});
  EXPECT_EQ(ServerOf(named), "j2");
  EXPECT_EQ(named.reason, Reason::kStickyJSessionId);
  Decision by_param = Go("/irj/portal;jsessionid=(j2)ID1End");
  EXPECT_EQ(ServerOf(by_param), "j2");

  // Otherwise the session table, learned from the backend's Set-Cookie.
  Decision first = Go("/irj/portal", {"JSESSIONID=opaque123"});
  EXPECT_EQ(first.reason, Reason::kBalance);
  EXPECT_FALSE(first.set_affinity_cookie);
  EXPECT_TRUE(router_.LearnJSessionId(first, "opaque123"));
  const std::string learned = ServerOf(first);
  for (int i = 0; i < 4; ++i) {
    Decision d = Go("/irj/portal", {"JSESSIONID=opaque123"});
    EXPECT_EQ(ServerOf(d), learned);
    EXPECT_EQ(d.reason, Reason::kStickyJSessionId);
  }
}

TEST_F(RouterTest, SapExtSidIsRecordedWhenFirstBalanced) {
  const std::string target = "/sap/;sap-ext-sid=PortalSession42/foo/bar";
  Decision first = Go(target);
  EXPECT_EQ(first.reason, Reason::kBalance);
  EXPECT_TRUE(first.set_affinity_cookie);
  EXPECT_EQ(first.path, "/sap/foo/bar");
  std::string cookie = router_.AffinityCookieHeader(first, /*https=*/true);
  EXPECT_EQ(cookie.rfind("kwd_affinity=", 0), 0u) << cookie;
  EXPECT_NE(cookie.find("Secure"), std::string::npos);
  for (int i = 0; i < 5; ++i) {
    Decision d = Go(target);
    EXPECT_EQ(ServerOf(d), ServerOf(first));
    EXPECT_EQ(d.reason, Reason::kStickySapExtSid);
    EXPECT_FALSE(d.set_affinity_cookie);
  }
}

TEST_F(RouterTest, AffinityCookie) {
  const std::string good = "kwd_affinity=" + codec_->Encode("erp/diag", "app2");
  for (int i = 0; i < 3; ++i) {
    Decision d = Go("/sap/bc/x", {good});
    EXPECT_EQ(ServerOf(d), "app2");
    EXPECT_EQ(d.reason, Reason::kStickyAffinityCookie);
  }
  // Signed for another group, or tampered with: ignored (not a lost session).
  const std::string other_group = "kwd_affinity=" + codec_->Encode("erp/j2ee", "app2");
  std::string tampered = good;
  tampered.back() = tampered.back() == '2' ? '1' : '2';
  for (const std::string& cookie : {other_group, tampered}) {
    Decision d = Go("/sap/bc/x", {cookie});
    EXPECT_EQ(d.reason, Reason::kBalance);
    EXPECT_EQ(d.lost, Identifier::kNone);
  }
}

TEST_F(RouterTest, IdentifiersFollowTheDesignOrder) {
  const std::string affinity = "kwd_affinity=" + codec_->Encode("erp/diag", "app1");
  Decision d =
      Go("/sap/bc/x", {"sap-contextid=SID%3aANON%3aapp2%3aX; saplb_diag=(app1)n; " + affinity});
  EXPECT_EQ(d.reason, Reason::kStickyContextId);
  d = Go("/sap/bc/x", {"saplb_diag=(app2)n; " + affinity});
  EXPECT_EQ(d.reason, Reason::kStickySaplb);
  EXPECT_EQ(ServerOf(d), "app2");
}

// Issue 10 item 14, seed 002: an ABAP group checks sap-ext-sid (session
// table) before sap-contextid; a Java group saplb_* before JSESSIONID.
TEST_F(RouterTest, AbapGroupChecksSapExtSidBeforeContextId) {
  const std::string target = "/sap/;sap-ext-sid=Portal7/x";
  Decision first = Go(target);
  ASSERT_EQ(first.reason, Reason::kBalance);
  const std::string recorded = ServerOf(first);
  const std::string other = recorded == "app1" ? "app2" : "app1";
  Decision d = Go(target, {"sap-contextid=SID%3aANON%3a" + other + "%3aX"});
  EXPECT_EQ(d.reason, Reason::kStickySapExtSid);
  EXPECT_EQ(ServerOf(d), recorded);
  // An unknown sap-ext-sid does not stop sap-contextid.
  d = Go("/sap/;sap-ext-sid=New8/x", {"sap-contextid=SID%3aANON%3a" + other + "%3aX"});
  EXPECT_EQ(d.reason, Reason::kStickyContextId);
  EXPECT_EQ(ServerOf(d), other);
}

TEST_F(RouterTest, JavaGroupChecksSaplbBeforeJSessionId) {
  Decision d = Go("/irj/portal", {"JSESSIONID=(j1)ID1End; saplb_*=(j2)node"});
  EXPECT_EQ(d.reason, Reason::kStickySaplb);
  EXPECT_EQ(ServerOf(d), "j2");
  d = Go("/irj/portal;jsessionid=(j1)ID1End", {"saplb_*=(j2)node"});
  EXPECT_EQ(ServerOf(d), "j2");
  // Then JSESSIONID, then the others (sap-contextid).
  d = Go("/irj/portal", {"JSESSIONID=(j1)ID1End; sap-contextid=SID%3aANON%3aj2%3aX"});
  EXPECT_EQ(d.reason, Reason::kStickyJSessionId);
  EXPECT_EQ(ServerOf(d), "j1");
  // The ABAP order is unchanged between sap-contextid and saplb.
  d = Go("/sap/bc/x", {"saplb_*=(app1)n; sap-contextid=SID%3aANON%3aapp2%3aX"});
  EXPECT_EQ(d.reason, Reason::kStickyContextId);
  EXPECT_EQ(ServerOf(d), "app2");
}

TEST_F(RouterTest, DisabledIdentifiersAreIgnored) {
  v1::Snapshot s = StandardSnapshot();
  auto* affinity = s.mutable_groups(0)->mutable_session_affinity();
  affinity->clear_identifiers();
  affinity->add_identifiers(v1::SESSION_IDENTIFIER_SAPLB);
  affinity->set_affinity_cookie_enabled(false);
  StampSnapshotVersion(&s);
  Apply(s);
  Decision d =
      Go("/sap/bc/x;sap-ext-sid=E1", {"sap-contextid=SID%3aANON%3aapp2%3aX; " +
                                      ("kwd_affinity=" + codec_->Encode("erp/diag", "app2"))});
  EXPECT_EQ(d.reason, Reason::kBalance);
  EXPECT_FALSE(d.set_affinity_cookie);
  EXPECT_EQ(Go("/sap/bc/x;sap-ext-sid=E1").reason, Reason::kBalance);  // not recorded
  EXPECT_EQ(Go("/sap/bc/x", {"saplb_diag=(app2)n"}).reason, Reason::kStickySaplb);
}

TEST_F(RouterTest, LostStickyServerIsRebalancedAndTableEntryErased) {
  Decision first = Go("/irj/x", {"JSESSIONID=abc"});
  ASSERT_TRUE(router_.LearnJSessionId(first, "abc"));
  const std::string owner = ServerOf(first);
  const std::string other = owner == "j1" ? "j2" : "j1";
  SetHealthy("erp/j2ee", owner, false);

  Decision lost = Go("/irj/x", {"JSESSIONID=abc"});
  EXPECT_EQ(lost.reason, Reason::kBalance);
  EXPECT_EQ(lost.lost, Identifier::kJSessionId);
  EXPECT_EQ(ServerOf(lost), other);

  // The entry was erased: once the owner is back, the id is simply unknown.
  SetHealthy("erp/j2ee", owner, true);
  Decision after = Go("/irj/x", {"JSESSIONID=abc"});
  EXPECT_EQ(after.lost, Identifier::kNone);
  EXPECT_EQ(after.reason, Reason::kBalance);

  // Identifiers that name a server directly.
  SetHealthy("erp/diag", "app2", false);
  Decision ctx = Go("/sap/x", {"sap-contextid=SID%3aANON%3aapp2%3aX"});
  EXPECT_EQ(ctx.lost, Identifier::kSapContextId);
  EXPECT_EQ(ServerOf(ctx), "app1");
}

TEST_F(RouterTest, LostSapExtSidIsRecordedAgainOnTheNewServer) {
  const std::string target = "/sap/;sap-ext-sid=S1/x";
  Decision first = Go(target);
  SetHealthy("erp/diag", ServerOf(first), false);
  Decision moved = Go(target);
  EXPECT_EQ(moved.lost, Identifier::kSapExtSid);
  EXPECT_NE(ServerOf(moved), ServerOf(first));
  EXPECT_TRUE(moved.set_affinity_cookie);
  SetHealthy("erp/diag", ServerOf(first), true);
  Decision again = Go(target);
  EXPECT_EQ(again.reason, Reason::kStickySapExtSid);
  EXPECT_EQ(ServerOf(again), ServerOf(moved));
}

TEST_F(RouterTest, DrainingServerKeepsStickyTrafficOnly) {
  v1::Snapshot s = StandardSnapshot();
  s.mutable_groups(0)->mutable_servers(1)->set_state(v1::SERVER_STATE_DRAINING);  // app2
  StampSnapshotVersion(&s);
  Apply(s);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ServerOf(Go("/sap/x")), "app1");
  }
  Decision sticky = Go("/sap/x", {"sap-contextid=SID%3aANON%3aapp2%3aX"});
  EXPECT_EQ(ServerOf(sticky), "app2");
  EXPECT_EQ(sticky.reason, Reason::kStickyContextId);
  EXPECT_EQ(sticky.lost, Identifier::kNone);

  // Draining and unhealthy: lost.
  SetHealthy("erp/diag", "app2", false);
  Decision lost = Go("/sap/x", {"sap-contextid=SID%3aANON%3aapp2%3aX"});
  EXPECT_EQ(lost.lost, Identifier::kSapContextId);
  EXPECT_EQ(ServerOf(lost), "app1");
}

TEST_F(RouterTest, NoUsableServerIs503) {
  SetHealthy("erp/diag", "app1", false);
  SetHealthy("erp/diag", "app2", false);
  Decision d = Go("/sap/x", {"sap-contextid=SID%3aANON%3aapp2%3aX"});
  EXPECT_EQ(d.status, 503);
  EXPECT_EQ(d.reason, Reason::kNoServer);
  EXPECT_EQ(d.lost, Identifier::kSapContextId);
  EXPECT_EQ(d.server, nullptr);
}

TEST_F(RouterTest, TableSwapKeepsHealthSessionsAndBalancerState) {
  Decision learned = Go("/irj/x", {"JSESSIONID=keep"});
  router_.LearnJSessionId(learned, "keep");
  const std::string learned_server = ServerOf(learned);
  SetHealthy("erp/diag", "app1", false);
  EXPECT_EQ(ServerOf(Go("/sap/x")), "app2");
  SetHealthy("erp/diag", "app1", true);
  EXPECT_EQ(ServerOf(Go("/sap/x")), "app1");  // app1 1/6 < app2 2/3

  // A request in flight across the swap.
  cookie_views_.clear();
  Decision in_flight = router_.Route(Request{"GET", "/sap/x", "h", false, {}});
  ASSERT_EQ(ServerOf(in_flight), "app1");

  v1::Snapshot s = StandardSnapshot();
  // A new server sorts first; the others keep their counters by name.
  auto* servers = s.mutable_groups(0)->mutable_servers();
  v1::Server* added = servers->Add();
  *added = servers->Get(0);
  added->set_name("app0");
  servers->SwapElements(0, 2);
  servers->SwapElements(1, 2);
  StampSnapshotVersion(&s);
  SetHealthy("erp/public", "pub1", false);
  Apply(s);
  EXPECT_FALSE(health_.Find("erp/public", "pub1")->healthy.load());  // kept across the swap
  EXPECT_EQ(ServerOf(Go("/sap/bc/gui/x", {}, "h", true)), "pub2");

  const balancer::Balancer* b = router_.BalancerFor(0);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->size(), 3u);
  EXPECT_EQ(router_.table()->groups()[0].servers[1].name, "app1");
  EXPECT_EQ(b->outstanding(1), 1u);
  EXPECT_EQ(b->assigned(1), 2u);
  router_.Complete(in_flight);  // routed on the previous table
  EXPECT_EQ(b->outstanding(1), 0u);

  Decision sticky = Go("/irj/x", {"JSESSIONID=keep"});
  EXPECT_EQ(sticky.reason, Reason::kStickyJSessionId);
  EXPECT_EQ(ServerOf(sticky), learned_server);
}

TEST_F(RouterTest, NoTableIs503) {
  Router empty(codec_, clock_);
  Decision d = empty.Route(Request{"GET", "/sap/x", "h", false, {}});
  EXPECT_EQ(d.status, 503);
}

TEST(RoutingTableTest, RejectsAnInvalidSnapshotWithTheProblem) {
  v1::Snapshot s = StandardSnapshot();
  s.mutable_virtual_hosts(0)->mutable_rules(0)->set_group("erp/missing");
  StampSnapshotVersion(&s);
  session::SessionRegistry sessions;
  ServerHealthRegistry health;
  std::string error;
  EXPECT_EQ(RoutingTable::Build(s, TableContext{&sessions, &health}, &error), nullptr);
  EXPECT_NE(error.find("unknown group erp/missing"), std::string::npos) << error;
}

// ---- SAP modification rules (docs/modification-rules.md) ----

v1::Modification* AddModification(v1::VirtualHost* vhost, const std::string& prefix,
                                  const std::string& rules) {
  v1::Modification* m = vhost->add_modifications();
  m->set_prefix(prefix);
  m->set_rules(rules);
  m->set_source("erp/m");
  m->set_index(vhost->modifications_size() - 1);
  return m;
}

TEST(RoutingTableTest, RuleFileThatDoesNotCompileRefusesTheSnapshot) {
  v1::Snapshot s = StandardSnapshot();
  AddModification(s.mutable_virtual_hosts(0), "/", "SetHeader x 1\nRegRewriteUrl ^/(a /b\n");
  StampSnapshotVersion(&s);
  session::SessionRegistry sessions;
  ServerHealthRegistry health;
  std::string error;
  EXPECT_EQ(RoutingTable::Build(s, TableContext{&sessions, &health}, &error), nullptr);
  EXPECT_NE(error.find("modification rules erp/m spec.modifications[0]: line 2"),
            std::string::npos)
      << error;
}

TEST(RoutingTableTest, CompiledRuleFilesAreKeptFromTableToTable) {
  v1::Snapshot s = StandardSnapshot();
  AddModification(s.mutable_virtual_hosts(0), "/", "SetHeader x 1\n");
  StampSnapshotVersion(&s);
  session::SessionRegistry sessions;
  ServerHealthRegistry health;
  ModificationPrograms programs;
  TableContext context{&sessions, &health};
  context.programs = &programs;
  std::string error;
  auto first = RoutingTable::Build(s, context, &error);
  auto second = RoutingTable::Build(s, context, &error);
  ASSERT_NE(first, nullptr) << error;
  ASSERT_NE(second, nullptr) << error;
  EXPECT_EQ(first->virtual_hosts()[0].modifications[0].program.get(),
            second->virtual_hosts()[0].modifications[0].program.get());
  EXPECT_EQ(programs.size(), 1u);
  ASSERT_NE(RoutingTable::Build(StandardSnapshot(), context, &error), nullptr);
  EXPECT_EQ(programs.size(), 0u);  // the files of the newest table only
}

TEST_F(RouterTest, RulesRunBeforePermissionsAndUrlMapping) {
  v1::Snapshot s = StandardSnapshot();
  v1::VirtualHost* any = s.mutable_virtual_hosts(0);
  AddModification(any, "/",
                  "RegIRewriteUrl ^/alias/(.*) /sap/admin/$1\n"
                  "RegIRewriteUrl ^/gui/(.*) /sap/bc/gui/$1?from=rule [qsappend]\n"
                  "RegIRedirectUrl ^/old$ /sap/new [CODE=308]\n"
                  "RegIGoneUrl ^/gone -\n"
                  "RegIForbiddenUrl ^/no -\n"
                  "RegIRewriteUrl ^/abs/(.*) http://x/$1\n");
  // A later file meets the path as the first left it.
  AddModification(any, "/sap/bc/gui/", "SetHeader x-second yes\n");
  StampSnapshotVersion(&s);
  Apply(s);
  EXPECT_EQ(Go("/alias/x").reason, Reason::kDenied);  // the rewritten path is denied
  Decision gui = Go("/gui/x?a=1", {}, "erp.internal", /*https=*/true);
  EXPECT_EQ(GroupOf(gui), "erp/public");
  EXPECT_EQ(gui.rule, "/sap/bc/gui/");
  EXPECT_EQ(gui.rewritten_target, "/sap/bc/gui/x?from=rule&a=1");
  std::string target;
  ASSERT_TRUE(UpstreamTarget(gui, "/gui/x?a=1", &target));
  EXPECT_EQ(target, "/sap/bc/gui/x?from=rule&a=1");
  Decision old = Go("/old");
  EXPECT_EQ(old.reason, Reason::kRuleRedirect);
  EXPECT_EQ(old.status, 308);
  EXPECT_EQ(router_.modification_state().location, "/sap/new");
  EXPECT_EQ(Go("/gone").status, 410);
  EXPECT_EQ(Go("/no").reason, Reason::kRuleForbidden);
  EXPECT_EQ(Go("/abs/x").reason, Reason::kRuleError);
  // Nothing fired: not modified, routed as received.
  Decision plain = Go("/sap/bc/x");
  EXPECT_FALSE(plain.modified);
  EXPECT_EQ(GroupOf(plain), "erp/diag");
}

TEST_F(RouterTest, TargetSidChoosesTheSystemsRoutes) {
  v1::Snapshot s = StandardSnapshot();
  v1::VirtualHost* any = s.mutable_virtual_hosts(0);
  AddModification(any, "/",
                  "if %{PATH} regimatch ;o=QAS\n"
                  "SetHeader x-sap-webdisp-target-sid QAS [break]\n"
                  "if %{PATH} regimatch ;o=ZZZ\n"
                  "SetHeader ~webdisp_target_sid zzz [break]\n"
                  "if %{PATH} regimatch ;o=GW1\n"
                  "SetHeader x-sap-webdisp-target-sid GW1 [break]\n");
  // GW1's mapping is on another host: chosen too (SAP chooses among all systems).
  v1::SystemRoute* gw1 = s.mutable_virtual_hosts(2)->add_systems();
  gw1->set_sid("GW1");
  gw1->set_source("erp/gw1");
  gw1->set_default_root_handler(v1::KIND_JAVA);
  gw1->set_default_java_group("erp/j2ee");
  v1::SystemRoute* qas = any->add_systems();
  qas->set_sid("QAS");
  qas->set_source("erp/qas");
  qas->set_default_root_handler(v1::KIND_ABAP);
  qas->set_default_abap_group("erp/public");
  v1::Rule* rule = qas->add_rules();
  rule->set_prefix("/sap/");
  rule->set_kind(v1::KIND_ABAP);
  rule->set_group("erp/public");
  StampSnapshotVersion(&s);
  Apply(s);
  EXPECT_EQ(GroupOf(Go("/sap/opu/odata/x;o=GW2/y")), "erp/diag");  // the host's routes
  Decision elsewhere = Go("/sap/opu/odata/x;o=GW1/y");
  EXPECT_EQ(GroupOf(elsewhere), "erp/j2ee");
  EXPECT_EQ(elsewhere.system, "GW1");
  Decision chosen = Go("/sap/opu/odata/x;o=QAS/y");
  EXPECT_EQ(GroupOf(chosen), "erp/public");
  EXPECT_EQ(chosen.system, "QAS");
  EXPECT_EQ(chosen.rule, "/sap/");
  // The host's permissions still apply to the system's routes.
  EXPECT_EQ(Go("/sap/admin;o=QAS/x").reason, Reason::kDenied);
  Decision unknown = Go("/sap/x;o=ZZZ/y");
  EXPECT_EQ(unknown.reason, Reason::kUnknownSystem);
  EXPECT_EQ(unknown.status, 503);
}

TEST(RoutingTableTest, RegistriesForgetRemovedGroupsAndServers) {
  session::SessionRegistry sessions;
  ServerHealthRegistry health;
  std::string error;
  ASSERT_NE(RoutingTable::Build(StandardSnapshot(), {&sessions, &health}, &error), nullptr);
  ASSERT_NE(health.Find("erp/public", "pub1"), nullptr);
  v1::Snapshot s = StandardSnapshot();
  s.mutable_groups()->RemoveLast();  // erp/public
  s.mutable_virtual_hosts(0)->mutable_rules(4)->clear_group();
  s.mutable_virtual_hosts(2)->clear_default_abap_group();
  StampSnapshotVersion(&s);
  ASSERT_NE(RoutingTable::Build(s, {&sessions, &health}, &error), nullptr) << error;
  EXPECT_EQ(health.Find("erp/public", "pub1"), nullptr);
  EXPECT_NE(health.Find("erp/diag", "app1"), nullptr);
}

// UrlMapping.spec.sapHeaders: an unset switch is on for ABAP groups, off for
// Java ones; a set one wins; the root rule and the default groups follow the
// virtual host's, a rule its own.
TEST_F(RouterTest, SapHeadersByGroupKindUnlessSwitched) {
  Decision abap = Go("/sap/bc/x");
  EXPECT_TRUE(abap.sap_client_protocol && abap.sap_access_points);
  Decision root = Go("/");
  EXPECT_TRUE(root.sap_client_protocol && root.sap_access_points);
  Decision java = Go("/irj/portal");
  EXPECT_FALSE(java.sap_client_protocol || java.sap_access_points);
  Decision none = Go("/nogroup/x");  // no group: nothing to send
  EXPECT_FALSE(none.sap_client_protocol || none.sap_access_points);

  v1::Snapshot snapshot = StandardSnapshot();
  v1::VirtualHost* any = snapshot.mutable_virtual_hosts(0);
  ASSERT_EQ(any->host(), "");
  any->mutable_sap_headers()->set_access_points(v1::SAP_HEADER_SWITCH_OFF);
  for (v1::Rule& rule : *any->mutable_rules()) {
    if (rule.prefix() == "/sap/") {
      rule.mutable_sap_headers()->set_client_protocol(v1::SAP_HEADER_SWITCH_OFF);
    } else if (rule.prefix() == "/irj/") {
      rule.mutable_sap_headers()->set_client_protocol(v1::SAP_HEADER_SWITCH_ON);
    }
  }
  Apply(snapshot);
  abap = Go("/sap/bc/x");
  EXPECT_FALSE(abap.sap_client_protocol);
  EXPECT_TRUE(abap.sap_access_points);  // the rule's own switch is unset
  root = Go("/");
  EXPECT_TRUE(root.sap_client_protocol);
  EXPECT_FALSE(root.sap_access_points);
  java = Go("/irj/portal");
  EXPECT_TRUE(java.sap_client_protocol);
  EXPECT_FALSE(java.sap_access_points);
}

// UrlMapping.spec.secureAction: redirect. A secure entry asking for it
// answers plain http with a redirect to the proxy's https port: 301 for GET
// and HEAD, 308 otherwise, Location with the Host's name and the target as
// received. Without a port, or for a Host no redirect may carry, 403 as
// with forbid; https requests pass; a secure entry without the flag stays 403.
TEST_F(RouterTest, SecureRedirectToHttps) {
  v1::Snapshot snapshot = StandardSnapshot();
  v1::VirtualHost* any = snapshot.mutable_virtual_hosts(0);
  for (v1::Permission& permission : *any->mutable_permissions()) {
    if (permission.action() == v1::PERMISSION_ACTION_SECURE) {
      permission.set_redirect_to_https(true);
    }
  }
  AddPermission(any, v1::PERMISSION_ACTION_SECURE, "/sap/forbid/*");  // flag unset: forbid
  StampSnapshotVersion(&snapshot);
  Apply(snapshot);

  // No https port yet: forbidden, and said why.
  Decision d = Go("/sap/bc/gui/x?a=1");
  EXPECT_EQ(d.status, 403);
  EXPECT_EQ(d.reason, Reason::kDenied);
  EXPECT_EQ(d.secure_redirect, SecureRedirect::kNoHttpsPort);

  router_.set_https_port(8443);
  d = Go("/sap/bc/gui/x%2Fy?a=%41&b", {}, "ERP.example.org:8080");
  EXPECT_EQ(d.status, 301);
  EXPECT_EQ(d.reason, Reason::kSecureRedirect);
  EXPECT_EQ(d.secure_redirect, SecureRedirect::kRedirected);
  EXPECT_EQ(d.location, "https://ERP.example.org:8443/sap/bc/gui/x%2Fy?a=%41&b");
  EXPECT_EQ(d.server, nullptr);
  EXPECT_EQ(d.rule, "/sap/bc/gui/");  // classified before the permission decided

  router_.set_https_port(443);
  d = Go("/sap/bc/gui/x", {}, "erp.example.org.");
  EXPECT_EQ(d.location, "https://erp.example.org/sap/bc/gui/x");
  d = Go("/sap/bc/gui/x", {}, "[::1]:80");
  EXPECT_EQ(d.location, "https://[::1]/sap/bc/gui/x");
  // Absolute-form: its authority is the host, its path the target.
  d = Go("http://erp.example.org:80/sap/bc/gui/a?q", {}, "ignored.example.org");
  EXPECT_EQ(d.location, "https://erp.example.org/sap/bc/gui/a?q");

  // Methods with a body keep it: 308.
  cookie_views_.clear();
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    Decision post =
        router_.Route(Request{method, "/sap/bc/gui/x", "erp.example.org", false, cookie_views_});
    router_.Complete(post);
    EXPECT_EQ(post.status, 308) << method;
  }
  Decision head =
      router_.Route(Request{"HEAD", "/sap/bc/gui/x", "erp.example.org", false, cookie_views_});
  router_.Complete(head);
  EXPECT_EQ(head.status, 301);

  // Over https: permitted and routed.
  d = Go("/sap/bc/gui/x", {}, "erp.example.org", /*https=*/true);
  EXPECT_EQ(d.status, 0);
  EXPECT_NE(d.server, nullptr);
  EXPECT_EQ(d.secure_redirect, SecureRedirect::kNone);

  // The entry without the flag forbids, as SAP does.
  d = Go("/sap/forbid/x", {}, "erp.example.org");
  EXPECT_EQ(d.status, 403);
  EXPECT_EQ(d.secure_redirect, SecureRedirect::kNone);

  // Hosts that could send the client elsewhere: never a redirect.
  for (const char* host :
       {"", "evil.example@erp.example.org", "evil.example/x", "evil.example\\x", "a%2eb",
        "erp.example.org:80:80", "erp.example.org:x", "erp\r\nSet-Cookie: a=b", "[::1%25eth0]",
        "[::1", "a b", ".evil", "erp..example", "erp.example.org;x"}) {
    d = Go("/sap/bc/gui/x", {}, host);
    EXPECT_EQ(d.status, 403) << host;
    EXPECT_EQ(d.secure_redirect, SecureRedirect::kBadHost) << host;
    EXPECT_TRUE(d.location.empty()) << host;
  }
}

// UrlMapping.spec.hsts: a rule's value for its requests, the virtual host's
// for the root rule and the default groups; none when unset.
TEST_F(RouterTest, HstsFollowsTheRuleOrTheDefaults) {
  EXPECT_TRUE(Go("/sap/bc/x").hsts.empty());
  v1::Snapshot snapshot = StandardSnapshot();
  v1::VirtualHost* any = snapshot.mutable_virtual_hosts(0);
  any->mutable_hsts()->set_max_age_seconds(0);
  for (v1::Rule& rule : *any->mutable_rules()) {
    if (rule.prefix() == "/sap/") {
      rule.mutable_hsts()->set_max_age_seconds(31536000);
      rule.mutable_hsts()->set_include_subdomains(true);
      rule.mutable_hsts()->set_preload(true);
    } else if (rule.prefix() == "/irj/") {
      rule.mutable_hsts()->set_max_age_seconds(600);
    }
  }
  StampSnapshotVersion(&snapshot);
  Apply(snapshot);
  EXPECT_EQ(Go("/sap/bc/x").hsts, "max-age=31536000; includeSubDomains; preload");
  EXPECT_EQ(Go("/irj/portal").hsts, "max-age=600");
  EXPECT_EQ(Go("/").hsts, "max-age=0");            // root: the defaults' owner's
  EXPECT_EQ(Go("/other/x").hsts, "max-age=0");     // default group likewise
  EXPECT_TRUE(Go("/empty/x").hsts.empty());        // a rule of a mapping without hsts
  EXPECT_EQ(Go("/sap/admin/x").hsts, "max-age=31536000; includeSubDomains; preload");  // denied
  EXPECT_TRUE(Go("/shop/x", {}, "shop.example.com").hsts.empty());  // another host
}

}  // namespace
}  // namespace kwd::routing
