#pragma once

// 100 SAP modification rules of the usual kinds (anchored URL rewrites and
// redirects, forbidden patterns, host conditions with header edits), for
// modification_bench and routing_bench.

#include <string>

namespace kwd::bench {

inline std::string HundredRules() {
  std::string text;
  for (int i = 0; i < 25; ++i) {
    std::string n = std::to_string(i);
    text += "RegIRewriteUrl ^/legacy" + n + "/(.*) /sap/bc/app" + n + "/$1 [break]\n";
    text += "RegIRedirectUrl ^/old" + n + "$ /sap/bc/ui2/flp?app=" + n + " [CODE=permanent]\n";
    text += "RegIForbiddenUrl ^/sap/bc/private" + n + "/ -\n";
    text += "if %{HTTP_HOST} regimatch ^host" + n + "\\.example\\.com$\n";
    text += "SetHeader x-sap-webdisp-target-sid S" + n + "\n";
  }
  return text;
}

}  // namespace kwd::bench
