#pragma once

// What kwd-controller import knows about each SAP profile parameter: the
// ones it translates (handled in importer.cc), the ones kwd needs no
// equivalent of (a NOTE), and the ones kwd cannot express (a WARN with the
// reason). Names are lower case; vector parameters (`<base>_<xx>`) are
// listed by base.

#include <map>
#include <string>
#include <string_view>

namespace kwd::importer {

enum class Kind {
  kNotNeeded,    // NOTE: kwd needs no equivalent
  kHandled,      // translated by the importer
  kUnsupported,  // WARN: kwd cannot express it
};

struct Known {
  Kind kind;
  std::string_view why;  // for kNotNeeded / kUnsupported
};

// Why instance and process settings need nothing in kwd.
extern const std::string_view kInstanceSetting;

const std::map<std::string, Known>& KnownParameters();
const std::map<std::string, Known>& KnownVectors();

}  // namespace kwd::importer
