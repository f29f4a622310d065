#include "dataplane/http/access_log_mask.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::http {
namespace {

std::string MaskTarget(std::string_view target) {
  std::string out;
  AppendMaskedTarget(target, out);
  return out;
}

TEST(AccessLogMask, Targets) {
  struct Case {
    std::string_view in;
    std::string_view want;
  };
  const Case cases[] = {
      {"/index.html", "/index.html"},
      {"/sap/bc/gui?sap-contextid=SID%3aANON%3aerp1%3aabc&a=1",
       "/sap/bc/gui?sap-contextid=***&a=1"},
      {"/x?a=1&SAP-PASSWORD=secret&b", "/x?a=1&SAP-PASSWORD=***&b"},
      {"/irj/portal;jsessionid=(erp1)ID123End/x", "/irj/portal;jsessionid=***/x"},
      {"/sap/;sap-contextid=abc;sap-ext-sid=e/bc", "/sap/;sap-contextid=***;sap-ext-sid=e/bc"},
      {"/x?MYSAPSSO2=AjQxMDMBABg", "/x?MYSAPSSO2=***"},
      {"/x?jsessionid", "/x?jsessionid"},
      // "s=SID:ANON:erp1:abc&l=en" in the BSP bracket segment.
      {"/sap(cz1TSUQ6QU5PTjplcnAxOmFiYyZsPWVu)/bc/bsp", "/sap(***)/bc/bsp"},
      // "l=en&c=001": nothing secret, kept for debugging.
      {"/sap(bD1lbiZjPTAwMQ==)/bc/bsp", "/sap(bD1lbiZjPTAwMQ==)/bc/bsp"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MaskTarget(c.in), c.want) << c.in;
  }
}

// A backend decodes parameter names before it compares them: an encoded or
// mixed-case name is the same parameter and is masked too.
TEST(AccessLogMask, PercentEncodedAndMixedCaseNames) {
  struct Case {
    std::string_view in;
    std::string_view want;
  };
  const Case cases[] = {
      {"/x?sap%2Dpassword=secret", "/x?sap%2Dpassword=***"},
      {"/x?sap-%70assword=secret&a=1", "/x?sap-%70assword=***&a=1"},
      {"/x?Sap-PassWord=secret", "/x?Sap-PassWord=***"},
      {"/x?%53%41%50%2d%50%41%53%53%57%4f%52%44=secret",
       "/x?%53%41%50%2d%50%41%53%53%57%4f%52%44=***"},
      {"/x?a=1&sap%2dcontextid=SID", "/x?a=1&sap%2dcontextid=***"},
      {"/x;JSESSION%49D=abc/y", "/x;JSESSION%49D=***/y"},
      {"/x?mysap%73so2=AjQx", "/x?mysap%73so2=***"},
      {"/x?%20sap-password=secret", "/x?%20sap-password=***"},
      // Not sensitive once decoded, or not a valid escape: copied.
      {"/x?sap%2Dclient=001", "/x?sap%2Dclient=001"},
      {"/x?sap-%7password=p", "/x?sap-%7password=p"},
      {"/x?sap-password%=p", "/x?sap-password%=p"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MaskTarget(c.in), c.want) << c.in;
  }
  std::string out;
  AppendMaskedCookies("a=1; MYSAPSSO%32=AjQx; sap%2Dpassword=p", out);
  EXPECT_EQ(out, "a=1; MYSAPSSO%32=***; sap%2Dpassword=***");
  EXPECT_TRUE(IsSensitiveParameter("SAP%2DR3AUTH"));
  EXPECT_FALSE(IsSensitiveParameter("sap%2Dr3aut"));
}

TEST(AccessLogMask, CookiesAndFields) {
  std::string out;
  AppendMaskedCookies("a=1; MYSAPSSO2=AjQx; JSESSIONID=x; saplb_*=(erp1)1; sap-contextid=y", out);
  EXPECT_EQ(out, "a=1; MYSAPSSO2=***; JSESSIONID=***; saplb_*=(erp1)1; sap-contextid=***");
  out.clear();
  AppendMaskedFieldValue("Authorization", "Basic dXNlcjpwYXNz", out);
  EXPECT_EQ(out, "***");
  out.clear();
  AppendMaskedFieldValue("cookie", "sap-password=p", out);
  EXPECT_EQ(out, "sap-password=***");
  out.clear();
  AppendMaskedFieldValue("User-Agent", "curl", out);
  EXPECT_EQ(out, "curl");
}

}  // namespace
}  // namespace kwd::http
