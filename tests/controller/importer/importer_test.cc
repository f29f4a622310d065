// Table tests of `kwd-controller import`'s library: the profile parser, the
// `$(...)` substitution, the YAML writer and the translation of every
// parameter and file kind (real-shaped profiles from SAP's documentation).

#include "controller/importer/importer.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/modification/program.h"
#include "controller/importer/profile.h"
#include "controller/importer/yaml_writer.h"
#include "controller/source/dir_source.h"

namespace kwd::importer {
namespace {

using Json = nlohmann::ordered_json;

// ---- profile parser ----

TEST(ProfileTest, NameValueLinesCommentsAndBlanks) {
  ParsedProfile p = ParseProfile(
      "# comment\r\n"
      "SAPSYSTEM = 00\r\n"
      "\n"
      "   rdisp/mshost=binmain   \n"
      "icm/server_port_0 = PROT=HTTP,PORT=80 # the port\n"
      "wdisp/x = a#b\n"
      "empty =\n"
      "no equals sign here\n"
      "= value without name\n"
      "last = no newline");
  ASSERT_EQ(p.entries.size(), 6u);
  EXPECT_EQ(p.entries[0].name, "SAPSYSTEM");
  EXPECT_EQ(p.entries[0].raw_value, "00");
  EXPECT_EQ(p.entries[0].line, 2);
  EXPECT_EQ(p.entries[1].name, "rdisp/mshost");
  EXPECT_EQ(p.entries[1].raw_value, "binmain");
  EXPECT_EQ(p.entries[2].raw_value, "PROT=HTTP,PORT=80");
  EXPECT_EQ(p.entries[3].raw_value, "a#b");
  EXPECT_EQ(p.entries[4].raw_value, "");
  EXPECT_EQ(p.entries[5].raw_value, "no newline");
  EXPECT_EQ(p.entries[5].line, 10);
  ASSERT_EQ(p.problems.size(), 2u);
  EXPECT_EQ(p.problems[0].line, 8);
  EXPECT_EQ(p.problems[1].line, 9);
}

TEST(ProfileTest, ByteOrderMarkIsDropped) {
  ParsedProfile p = ParseProfile("\xEF\xBB\xBFSAPSYSTEM = 00\r\n");
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].name, "SAPSYSTEM");
}

TEST(ProfileTest, ExpandsNestedReferences) {
  std::map<std::string, std::string> vars = {{"DIR_INSTANCE", "/usr/sap/W01/W00"},
                                             {"DIR_SEC", "$(DIR_INSTANCE)$(DIR_SEP)sec"},
                                             {"DIR_SEP", "/"}};
  std::vector<std::string> unresolved;
  EXPECT_EQ(ExpandValue("$(DIR_SEC)/permtab.txt", vars, &unresolved),
            "/usr/sap/W01/W00/sec/permtab.txt");
  EXPECT_TRUE(unresolved.empty());
  EXPECT_EQ(ExpandValue("$(NOPE)/x and $(NOPE)", vars, &unresolved), "/x and ");
  EXPECT_EQ(unresolved, std::vector<std::string>{"$(NOPE)"});
}

TEST(ProfileTest, CyclesUnclosedAndExplosionsAreBounded) {
  std::vector<std::string> unresolved;
  EXPECT_EQ(ExpandValue("x$(A)y", {{"A", "$(B)"}, {"B", "$(A)"}}, &unresolved), "xy");
  EXPECT_EQ(unresolved.size(), 1u);
  unresolved.clear();
  EXPECT_EQ(ExpandValue("a$(B", {}, &unresolved), "a$(B");
  EXPECT_EQ(unresolved, std::vector<std::string>{"unclosed $("});
  // Each level doubles: 2^40 bytes unless the bound stops it.
  std::map<std::string, std::string> vars;
  for (int i = 0; i < 40; ++i) {
    vars["V" + std::to_string(i)] =
        "$(V" + std::to_string(i + 1) + ")$(V" + std::to_string(i + 1) + ")";
  }
  vars["V40"] = "xxxxxxxx";
  unresolved.clear();
  std::string out = ExpandValue("$(V0)", vars, &unresolved);
  EXPECT_LE(out.size(), kMaxExpandedBytes);
  EXPECT_FALSE(unresolved.empty());
}

// The shape of an expansion bomb: A0 empty, A<k> = $(A<k-1>) x fan. Nothing
// grows, so the byte bound never stops it: fan^depth references unless each
// name is expanded once.
std::map<std::string, std::string> ExpansionBomb(int fan, int depth, const std::string& a0) {
  std::map<std::string, std::string> vars = {{"A0", a0}};
  for (int k = 1; k <= depth; ++k) {
    std::string value;
    for (int i = 0; i < fan; ++i) {
      value += "$(A" + std::to_string(k - 1) + ")";
    }
    vars["A" + std::to_string(k)] = value;
  }
  return vars;
}

TEST(ProfileTest, EachNameIsExpandedOnce) {
  // 10^8 references without memoisation; 8 levels of 10 with it.
  ValueExpander expander(ExpansionBomb(10, 8, ""));
  std::vector<std::string> unresolved;
  EXPECT_EQ(expander.Expand("ms$(A8).example", &unresolved), "ms.example");
  EXPECT_TRUE(unresolved.empty());
  EXPECT_FALSE(expander.exhausted());
  EXPECT_LE(expander.steps(), 100u);
  // The memo serves the next value too, with what it could not resolve.
  ValueExpander unknown(ExpansionBomb(10, 8, "$(NOPE)"));
  EXPECT_EQ(unknown.Expand("$(A8)", &unresolved), "");
  EXPECT_EQ(unresolved, std::vector<std::string>{"$(NOPE)"});
  unresolved.clear();
  EXPECT_EQ(unknown.Expand("x$(A8)", &unresolved), "x");
  EXPECT_EQ(unresolved, std::vector<std::string>{"$(NOPE)"});
  EXPECT_LE(unknown.steps(), 200u);
}

TEST(ProfileTest, ExpansionWorkIsBoundedWhenTheMemoCannotHelp) {
  // A cycle at the bottom (A0 refers to A8) is context-dependent, hence not
  // memoised: the total budget stops it.
  ValueExpander expander(ExpansionBomb(10, 8, "$(A8)"));
  std::vector<std::string> unresolved;
  auto start = std::chrono::steady_clock::now();
  expander.Expand("$(A8)", &unresolved);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(expander.exhausted());
  EXPECT_LE(expander.steps(), kMaxExpansionSteps + 1);
  // Once spent, the budget stays spent for the rest of the profile.
  EXPECT_EQ(expander.Expand("$(A1)", &unresolved), "");
  EXPECT_LE(expander.steps(), kMaxExpansionSteps + 1);
  // The one-value interface says so too.
  unresolved.clear();
  ExpandValue("$(A8)", ExpansionBomb(10, 8, "$(A8)"), &unresolved);
  ASSERT_FALSE(unresolved.empty());
  EXPECT_NE(unresolved.back().find("references"), std::string::npos) << unresolved.back();
}

TEST(ProfileTest, ExpandedBytesAreBoundedAcrossAProfile) {
  // Every value stays under kMaxExpandedBytes, but many of them would not.
  std::map<std::string, std::string> vars = ExpansionBomb(2, 15, "x");  // A15: 32 KiB
  ValueExpander expander(vars);
  std::vector<std::string> unresolved;
  std::size_t total = 0;
  int values = 0;
  while (!expander.exhausted() && values < 100000) {
    total += expander.Expand("$(A15)", &unresolved).size();
    ++values;
  }
  EXPECT_TRUE(expander.exhausted());
  EXPECT_LE(total, kMaxExpandedTotalBytes);
  EXPECT_LE(expander.bytes(), kMaxExpandedTotalBytes + kMaxExpandedBytes + 1);
}

TEST(ProfileTest, IndexedNamesAndOptions) {
  std::string base;
  int index = -1;
  bool zero = false;
  ASSERT_TRUE(SplitIndexed("icm/server_port_12", &base, &index, &zero));
  EXPECT_EQ(base, "icm/server_port");
  EXPECT_EQ(index, 12);
  EXPECT_FALSE(zero);
  ASSERT_TRUE(SplitIndexed("wdisp/system_01", &base, &index, &zero));
  EXPECT_EQ(index, 1);
  EXPECT_TRUE(zero);
  EXPECT_FALSE(SplitIndexed("wdisp/auto_refresh", &base, &index, &zero));
  EXPECT_FALSE(SplitIndexed("x_123456789", &base, &index, &zero));

  OptionList options = ParseOptions(" prot=HTTPS , PORT = 443,TIMEOUT=60,PORT=80, junk,,");
  ASSERT_NE(options.Find("PROT"), nullptr);
  EXPECT_EQ(*options.Find("PROT"), "HTTPS");
  EXPECT_EQ(*options.Find("PORT"), "443");
  EXPECT_EQ(options.duplicates, std::vector<std::string>{"PORT"});
  EXPECT_EQ(options.malformed, std::vector<std::string>{"junk"});
}

// ---- YAML writer: what it writes reads back as the same value ----

TEST(YamlWriterTest, StringsReadBackUnchanged) {
  const std::vector<std::string> texts = {
      "plain",
      "/sap/bc/",
      "*.cgi",
      "/sap/public/*",
      "true",
      "NO",
      "null",
      "8080",
      "-1",
      "0x10",
      "a: b",
      "# not a comment",
      "'quoted'",
      "\"double\"",
      "tab\there",
      "ctrl\x01",
      "über",
      "",
      " leading space",
      "trailing space ",
      "one line\n",
      "two\nlines",
      "two\nlines\n",
      "kept\nnewlines\n\n\n",
      "  indented first\nsecond\n",
      "\nblank first\n",
      "rule with \\ backslash and %{HTTP_HOST}\n  indented\n\n# comment\n",
      "cr\r\nlf\n",
      "c1 \xc2\x97 control",
      "c1 in a block\n\xc2\x80\n",
      "nel \xc2\x85 and \xef\xbf\xbe noncharacter",
  };
  for (const std::string& text : texts) {
    Json doc = {
        {"spec", {{"rules", Json::array({{{"prefix", "/"}, {"rules", text}}})}, {"value", text}}}};
    std::string yaml = ToYaml(doc);
    YAML::Node node;
    ASSERT_NO_THROW(node = YAML::Load(yaml)) << yaml;
    EXPECT_EQ(node["spec"]["value"].as<std::string>(), text) << yaml;
    EXPECT_EQ(node["spec"]["rules"][0]["rules"].as<std::string>(), text) << yaml;
    EXPECT_EQ(node["spec"]["rules"][0]["prefix"].as<std::string>(), "/") << yaml;
  }
}

TEST(YamlWriterTest, NumbersBooleansAndEmptyContainers) {
  Json doc = {{"a", 1},
              {"b", true},
              {"c", Json::array()},
              {"d", Json::object()},
              {"e", Json::array({1, "x", Json::array({2})})}};
  YAML::Node node = YAML::Load(ToYaml(doc));
  EXPECT_EQ(node["a"].as<int>(), 1);
  EXPECT_TRUE(node["b"].as<bool>());
  EXPECT_TRUE(node["c"].IsSequence());
  EXPECT_EQ(node["c"].size(), 0u);
  EXPECT_TRUE(node["d"].IsMap());
  EXPECT_EQ(node["e"][1].as<std::string>(), "x");
  EXPECT_EQ(node["e"][2][0].as<int>(), 2);
}

// ---- the translation ----

using Files = std::map<std::string, std::string>;

// Looks files up by their name alone, as the CLI does in --files DIR.
FileReader MapReader(const Files& files) {
  return [files](const std::string& reference, std::string* text, std::string* shown,
                 std::string* error) {
    std::string name = reference.substr(reference.rfind('/') + 1);
    auto it = files.find(name);
    if (it == files.end()) {
      *error = "no such file";
      return ReadStatus::kUnreadable;
    }
    *text = it->second;
    *shown = name;
    return ReadStatus::kRead;
  };
}

ImportResult ImportText(const std::string& profile, const Files& files = {},
                        const ImportOptions& options = {}) {
  return Import(profile, "sapwebdisp.pfl", MapReader(files), options);
}

std::vector<std::string> Lines(const ImportResult& result, Diagnostic::Level level) {
  std::vector<std::string> out;
  for (const auto& d : result.diagnostics) {
    if (d.level == level) {
      out.push_back(d.ToString());
    }
  }
  return out;
}

std::vector<std::string> Warnings(const ImportResult& r) {
  return Lines(r, Diagnostic::Level::kWarn);
}

const Json* Find(const ImportResult& result, const std::string& kind, const std::string& name) {
  for (const auto& object : result.objects) {
    if (object["kind"] == kind && object["metadata"]["name"] == name) {
      return &object;
    }
  }
  return nullptr;
}

std::vector<std::string> Names(const ImportResult& result) {
  std::vector<std::string> out;
  for (const auto& object : result.objects) {
    out.push_back(object["kind"].get<std::string>() + "/" +
                  object["metadata"]["name"].get<std::string>());
  }
  return out;
}

// Every object decodes strictly as kwd's own loader reads files (unknown
// fields are problems). Fields of the wave-3 contract that this tree's
// decoder may not know yet are allowed to be reported as unknown.
void ExpectLoadable(const ImportResult& result) {
  std::string yaml;
  for (const auto& object : result.objects) {
    yaml += "---\n" + ToYaml(object);
  }
  source::LoadResult loaded;
  source::LoadYamlText(yaml, "import.yaml", &loaded);
  for (const auto& problem : loaded.problems) {
    bool wave3 = false;
    for (const char* field : {"modifications", "sapHeaders", "system", "secureAction", "hsts"}) {
      wave3 = wave3 || problem.message.find(std::string("spec.") + field + ": unknown field") !=
                           std::string::npos;
    }
    EXPECT_TRUE(wave3) << problem.ToString() << "\n" << yaml;
  }
  // An object with a field the decoder does not know yet is not loaded.
  std::size_t wave3_objects = 0;
  for (const auto& object : result.objects) {
    bool wave3 = false;
    for (const char* field : {"modifications", "sapHeaders", "system", "secureAction", "hsts"}) {
      wave3 = wave3 || object["spec"].contains(field);
    }
    wave3_objects += wave3 ? 1 : 0;
  }
  EXPECT_GE(loaded.objects.size() + wave3_objects, result.objects.size()) << yaml;
  EXPECT_LE(loaded.objects.size(), result.objects.size()) << yaml;
}

TEST(ImportTest, SingleSystemFromTheMessageServer) {
  // SAP's minimal profile (binmain, ms/http_port 8081).
  ImportResult r = ImportText(
      "SAPSYSTEM = 10\n"
      "rdisp/mshost = binmain\n"
      "ms/http_port = 8081\n"
      "icm/server_port_0 = PROT=HTTP,PORT=80\n");
  EXPECT_EQ(r.ExitCode(), 0) << testing::PrintToString(Warnings(r));
  EXPECT_EQ(Names(r), (std::vector<std::string>{"SapSystem/sap", "LogonGroup/diag",
                                                "LogonGroup/j2ee", "UrlMapping/sap"}));
  const Json& system = *Find(r, "SapSystem", "sap");
  EXPECT_EQ(system["spec"]["messageServer"], (Json{{"host", "binmain"}, {"httpPort", 8081}}));
  EXPECT_EQ(system["spec"]["urlMap"], true);  // the ICF URL map, as SAP fetches it
  EXPECT_FALSE(system["spec"].contains("sid"));
  EXPECT_EQ(Find(r, "LogonGroup", "diag")->at("spec"),
            (Json{{"kind", "abap"}, {"backend", {{"sapSystem", {{"name", "sap"}}}}}}));
  EXPECT_EQ(Find(r, "LogonGroup", "j2ee")->at("spec")["kind"], "java");
  const Json& mapping = Find(r, "UrlMapping", "sap")->at("spec");
  EXPECT_EQ(mapping["defaultGroups"], (Json{{"abap", "diag"}, {"java", "j2ee"}}));
  EXPECT_EQ(mapping["fromSapSystem"], "sap");
  EXPECT_EQ(r.proxy_flags, (std::vector<std::string>{"--listen", "0.0.0.0:80"}));
  EXPECT_EQ(r.chart_values["proxy"]["service"]["httpPort"], 80);
  ExpectLoadable(r);
}

TEST(ImportTest, SingleSystemOverHttpsAndNames) {
  ImportOptions options;
  options.namespace_ = "erp";
  options.system_name = "erp";
  ImportResult r = ImportText(
      "rdisp/mshost = erpms.example.com\n"
      "ms/http_port = 8101\n"
      "ms/https_port = 44301\n"
      "wdisp/server_info_protocol = HTTPS\n",
      {}, options);
  EXPECT_EQ(r.ExitCode(), 0) << testing::PrintToString(Warnings(r));
  const Json& system = *Find(r, "SapSystem", "erp");
  EXPECT_EQ(system["metadata"]["namespace"], "erp");
  EXPECT_EQ(system["spec"]["messageServer"],
            (Json{{"host", "erpms.example.com"}, {"httpsPort", 44301}}));
  EXPECT_EQ(Lines(r, Diagnostic::Level::kNote),
            std::vector<std::string>{
                "NOTE sapwebdisp.pfl:2 ms/http_port: not used: the message server is read over "
                "HTTPS"});
}

TEST(ImportTest, MultipleSystemsByHostAndUrl) {
  ImportResult r = ImportText(
      "rdisp/mshost = ignored\n"
      "wdisp/system_0 = SID=ERP, MSHOST=ms-erp, MSPORT=8101, "
      "SRCVHOST=erp.example.com;ERP2.example.com\n"
      "wdisp/system_2 = SID=CE1, MSHOST=ms-ce1, MSSPORT=44327, SRCURL=/irj/;/nwa\n"
      "wdisp/system_1 = SID=BW1, MSHOST=ms-bw1, MSPORT=8102\n");
  EXPECT_EQ(r.ExitCode(), 0) << testing::PrintToString(Warnings(r));
  EXPECT_EQ(Names(r),
            (std::vector<std::string>{
                "SapSystem/bw1", "SapSystem/ce1", "SapSystem/erp", "LogonGroup/bw1-diag",
                "LogonGroup/bw1-j2ee", "LogonGroup/ce1-diag", "LogonGroup/ce1-j2ee",
                "LogonGroup/erp-diag", "LogonGroup/erp-j2ee", "UrlMapping/bw1", "UrlMapping/erp"}));
  // BW1 has no selector: it takes every other request.
  const Json& catch_all = Find(r, "UrlMapping", "bw1")->at("spec");
  EXPECT_FALSE(catch_all.contains("hosts"));
  EXPECT_EQ(catch_all["defaultGroups"], (Json{{"abap", "bw1-diag"}, {"java", "bw1-j2ee"}}));
  EXPECT_EQ(catch_all["rules"],
            (Json::array({{{"prefix", "/irj/"}, {"kind", "abap"}, {"logonGroup", "ce1-diag"}},
                          {{"prefix", "/nwa/"}, {"kind", "abap"}, {"logonGroup", "ce1-diag"}}})));
  EXPECT_EQ(catch_all["fromSapSystem"], "bw1");
  EXPECT_EQ(catch_all["system"], (Json{{"sid", "BW1"}}));
  const Json& erp = Find(r, "UrlMapping", "erp")->at("spec");
  EXPECT_EQ(erp["hosts"], (Json::array({"erp.example.com", "erp2.example.com"})));
  EXPECT_EQ(erp["defaultGroups"]["abap"], "erp-diag");
  EXPECT_EQ(erp["system"], (Json{{"sid", "ERP"}}));
  EXPECT_EQ(Find(r, "SapSystem", "ce1")->at("spec")["messageServer"]["httpsPort"], 44327);
  EXPECT_FALSE(Find(r, "SapSystem", "ce1")->at("spec").contains("urlMap"));
  ExpectLoadable(r);
}

TEST(ImportTest, ASecondSystemWithoutSelectorGetsNoMapping) {
  ImportResult r = ImportText(
      "wdisp/system_0 = SID=AA1, MSHOST=a, MSPORT=1\n"
      "wdisp/system_1 = SID=BB1, MSHOST=b, MSPORT=1\n");
  EXPECT_EQ(r.ExitCode(), 3);
  ASSERT_EQ(Warnings(r).size(), 1u);
  EXPECT_EQ(Warnings(r)[0].rfind("WARN sapwebdisp.pfl:2 wdisp/system_1: no SRCURL= or SRCVHOST= "
                                 "selects this system",
                                 0),
            0u);
  EXPECT_EQ(Names(r),
            (std::vector<std::string>{"SapSystem/aa1", "SapSystem/bb1", "LogonGroup/aa1-diag",
                                      "LogonGroup/aa1-j2ee", "LogonGroup/bb1-diag",
                                      "LogonGroup/bb1-j2ee", "UrlMapping/aa1"}));
}

TEST(ImportTest, BrokenSystemsAreLeftOutWithReasons) {
  ImportResult r = ImportText(
      "icm/server_port_0 = PROT=HTTP,PORT=8000\n"
      "wdisp/system_0 = SID=TOOLONG, MSHOST=a, MSPORT=1\n"
      "wdisp/system_1 = SID=AB1, MSPORT=1\n"
      "wdisp/system_2 = SID=AB2, MSHOST=b, MSPORT=1, MSSPORT=2\n"
      "wdisp/system_3 = SID=AB3, MSHOST=c, MSPORT=1, SRCSRV=*:9999, EXTSRV=http://x\n");
  EXPECT_EQ(r.ExitCode(), 3);
  auto warnings = Warnings(r);
  auto has = [&](const std::string& text) {
    return std::any_of(warnings.begin(), warnings.end(),
                       [&](const std::string& w) { return w.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(has("sapwebdisp.pfl:2 wdisp/system_0: SID=\"TOOLONG\" is not a three-character"));
  EXPECT_TRUE(has("sapwebdisp.pfl:3 wdisp/system_1: neither MSHOST= nor SILOC="));
  EXPECT_TRUE(has("sapwebdisp.pfl:4 wdisp/system_2: needs exactly one of MSPORT= or MSSPORT="));
  EXPECT_TRUE(has("sapwebdisp.pfl:5 wdisp/system_3: EXTSRV= is not translated"));
  EXPECT_TRUE(has("sapwebdisp.pfl:5 wdisp/system_3: SRCSRV=\"*:9999\" names no listener"));
  EXPECT_NE(Find(r, "SapSystem", "ab3"), nullptr);
  EXPECT_EQ(Find(r, "SapSystem", "ab1"), nullptr);
}

TEST(ImportTest, PermissionTableWithPDSLines) {
  // SAP's sample table, plus lines kwd cannot take.
  Files files = {{"permtab.txt",
                  "# sample\n"
                  "P /sap/bc/test.cgi\n"
                  "D *.cgi        # no CGI\n"
                  "P /sap/bc/public/*\n"
                  "s /sap/bc/gui/*\r\n"
                  "P /sap/bc/ping\n"
                  "D /sap/*/secret\n"
                  "X /what\n"
                  "D /sap/bc/*\n"
                  "D *\n"}};
  ImportResult r = ImportText(
      "DIR_INSTANCE = /usr/sap/W01/W00\n"
      "rdisp/mshost = ms\n"
      "ms/http_port = 8101\n"
      "wdisp/permission_table = $(DIR_INSTANCE)/sec/permtab.txt\n",
      files);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r),
            (std::vector<std::string>{
                "WARN permtab.txt:7 wdisp/permission_table: pattern \"/sap/*/secret\" is not a "
                "URL path with * only at the start or the end; entry left out (a denial is "
                "lost: review the table)",
                "WARN permtab.txt:8 wdisp/permission_table: not a \"P|D|S pattern\" line; entry "
                "left out"}));
  EXPECT_EQ(Find(r, "UrlMapping", "sap")->at("spec")["permissions"],
            (Json::array({{{"action", "permit"}, {"pattern", "/sap/bc/test.cgi"}},
                          {{"action", "deny"}, {"pattern", "*.cgi"}},
                          {{"action", "permit"}, {"pattern", "/sap/bc/public/*"}},
                          {{"action", "secure"}, {"pattern", "/sap/bc/gui/*"}},
                          {{"action", "permit"}, {"pattern", "/sap/bc/ping"}},
                          {{"action", "deny"}, {"pattern", "/sap/bc/*"}},
                          {{"action", "deny"}, {"pattern", "*"}}})));
  ExpectLoadable(r);
}

TEST(ImportTest, EmptyPermissionTableSwitchesItOff) {
  ImportResult r = ImportText("rdisp/mshost = ms\nms/http_port = 1\nwdisp/permission_table =\n");
  EXPECT_EQ(r.ExitCode(), 0);
  EXPECT_FALSE(Find(r, "UrlMapping", "sap")->at("spec").contains("permissions"));
}

TEST(ImportTest, UrlMapAndGroupFiles) {
  Files files = {{"urlinfo.txt",
                  "version 1.0\n"
                  "PREFIX=/sap/bc/gui/sap/its/webgui/&GROUP=WEBGUI&CASE=&VHOST=*.*;&STACK=ABAP\n"
                  "PREFIX=/irj~PORTAL/&GROUP=PORTAL&CASE=&VHOST=*.*;&STACK=J2EE\n"
                  "PREFIX=/sap/&GROUP=&CASE=&VHOST=*.*;\n"
                  "PREFIX=/bad path/&GROUP=X\n"},
                 {"icrgroups.txt",
                  "version 1.0\nappa_PRD_00\nappb_PRD_01\n\nPUBLIC:appa_PRD_00,appb_PRD_01\n"
                  "WEBGUI:appb_PRD_01\n"}};
  ImportResult r = ImportText(
      "rdisp/mshost = ms\n"
      "ms/http_port = 8101\n"
      "wdisp/url_map_location = file:///usr/sap/W01/data/urlinfo.txt\n"
      "wdisp/group_info_location = file://icrgroups.txt\n",
      files);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r),
            (std::vector<std::string>{
                "WARN urlinfo.txt:5 wdisp/url_map_location: URL map entry left "
                "out: prefix \"/bad path/\" is not a path prefix (starts with /, not / "
                "alone, at most 256 RFC 3986 path characters)"}))
      << testing::PrintToString(Warnings(r));
  const Json& mapping = Find(r, "UrlMapping", "sap")->at("spec");
  EXPECT_EQ(mapping["rules"],
            (Json::array({{{"prefix", "/irj~portal/"}, {"kind", "java"}, {"logonGroup", "portal"}},
                          {{"prefix", "/sap/"}, {"kind", "abap"}},
                          {{"prefix", "/sap/bc/gui/sap/its/webgui/"},
                           {"kind", "abap"},
                           {"logonGroup", "webgui"}}})));
  EXPECT_FALSE(mapping.contains("fromSapSystem"));  // the file replaces the ICF URL map
  EXPECT_EQ(Find(r, "LogonGroup", "public")->at("spec")["backend"],
            (Json{{"sapSystem", {{"name", "sap"}, {"logonGroup", "PUBLIC"}}}}));
  EXPECT_EQ(Find(r, "LogonGroup", "portal")->at("spec")["kind"], "java");
  const Json& system = Find(r, "SapSystem", "sap")->at("spec");
  EXPECT_EQ(system["logonGroups"], true);
  EXPECT_FALSE(system.contains("urlMap"));
  ExpectLoadable(r);
}

TEST(ImportTest, ServerInfoFileGivesStaticServers) {
  Files files = {
      {"info.icr",
       "version "
       "1.2\nappa_PRD_00\nDIAG\tappa\t3200\tLB=10\nHTTP\tappa\t8000\t\nHTTPS\tappa\t44300\t\n\n"
       "appb_PRD_01\nDIAG\tappb\t3201\tLB=4\nHTTP\tappb\t8001\t\n\n"},
      {"icrgroups.txt", "version 1.0\nappa_PRD_00\n\nPUBLIC:appb_PRD_01\n"}};
  ImportResult r = ImportText(
      "wdisp/server_info_location = file://info.icr\n"
      "wdisp/group_info_location = file://icrgroups.txt\n",
      files);
  // Without a message server kwd cannot fetch the ICF URL map: said, not hidden.
  EXPECT_EQ(Warnings(r),
            std::vector<std::string>{
                "WARN sapwebdisp.pfl:1 wdisp/server_info_location: no URL map for this system: "
                "kwd fetches the ICF URL map only through a message server (MSHOST=, "
                "rdisp/mshost); without one every path but the root goes to the Java group. Give "
                "wdisp/url_map_location = file://... or add UrlMapping.spec.rules"});
  EXPECT_EQ(
      Find(r, "LogonGroup", "diag")->at("spec")["backend"]["staticServers"],
      (Json::array(
          {{{"name", "appa_PRD_00"}, {"address", "appa"}, {"port", 8000}, {"capacity", 10}},
           {{"name", "appb_PRD_01"}, {"address", "appb"}, {"port", 8001}, {"capacity", 4}}})));
  EXPECT_EQ(Find(r, "LogonGroup", "public")->at("spec")["backend"]["staticServers"].size(), 1u);
  EXPECT_EQ(Find(r, "SapSystem", "sap"), nullptr);  // no message server to poll
  ExpectLoadable(r);
}

TEST(ImportTest, SpecialAddressesInAServerInfoFileAreWarnedAndKept) {
  // The operator's own file is taken as written, but an address kwd would
  // refuse from a message server (cloud metadata, loopback, ...) is said.
  std::string info = "version 1.2\n";
  const std::vector<std::pair<std::string, std::string>> servers = {
      {"meta_ERP_00", "169.254.169.254"}, {"lo_ERP_01", "127.0.0.1"},
      {"mapped_ERP_02", "::ffff:127.0.0.1"}, {"any_ERP_03", "0.0.0.0"},
      {"mc_ERP_04", "224.0.0.1"},         {"fine_ERP_05", "10.0.0.5"},
      {"named_ERP_06", "app.example.com"}};
  for (const auto& [name, address] : servers) {
    info += name + "\nDIAG\t" + address + "\t3200\t\nHTTP\t" + address + "\t8000\t\n\n";
  }
  ImportResult r = ImportText("wdisp/server_info_location = file://info.icr\n"
                              "wdisp/url_map_location = file://urlinfo.txt\n",
                              {{"info.icr", info}, {"urlinfo.txt", "version 1.0\n"}});
  EXPECT_EQ(r.ExitCode(), 3);
  std::vector<std::string> warnings = Warnings(r);
  EXPECT_EQ(warnings,
            (std::vector<std::string>{
                "WARN info.icr wdisp/server_info_location: instance any_ERP_03 at 0.0.0.0: "
                "unspecified address, not in spec.allowedNetworks: kept in "
                "LogonGroup.spec.backend.staticServers as the file says (kwd refuses such an "
                "address from a message server); check that it is meant",
                "WARN info.icr wdisp/server_info_location: instance lo_ERP_01 at 127.0.0.1: "
                "loopback address, not in spec.allowedNetworks: kept in "
                "LogonGroup.spec.backend.staticServers as the file says (kwd refuses such an "
                "address from a message server); check that it is meant",
                "WARN info.icr wdisp/server_info_location: instance mapped_ERP_02 at "
                "::ffff:127.0.0.1: loopback address, not in spec.allowedNetworks: kept in "
                "LogonGroup.spec.backend.staticServers as the file says (kwd refuses such an "
                "address from a message server); check that it is meant",
                "WARN info.icr wdisp/server_info_location: instance mc_ERP_04 at 224.0.0.1: "
                "multicast address, not in spec.allowedNetworks: kept in "
                "LogonGroup.spec.backend.staticServers as the file says (kwd refuses such an "
                "address from a message server); check that it is meant",
                "WARN info.icr wdisp/server_info_location: instance meta_ERP_00 at "
                "169.254.169.254: link-local address, not in spec.allowedNetworks: kept in "
                "LogonGroup.spec.backend.staticServers as the file says (kwd refuses such an "
                "address from a message server); check that it is meant"}))
      << testing::PrintToString(warnings);
  // All seven stay, as written.
  EXPECT_EQ(Find(r, "LogonGroup", "diag")->at("spec")["backend"]["staticServers"].size(), 7u);
}

TEST(ImportTest, SilocSystemReencryptsToTheHttpsPorts) {
  Files files = {
      {"info.icr",
       "version 1.2\nappa_ERP_00\nDIAG\tappa.example.com\t3200\tLB=2\n"
       "HTTPS\tappa.example.com\t44300\t\n\nappb_ERP_01\nDIAG\tappb.example.com\t3201\t\n"
       "HTTP\tappb.example.com\t8001\t\n\n"},
      {"urlinfo.txt", "version 1.0\nPREFIX=/sap/&GROUP=&STACK=ABAP\n"}};
  ImportResult r = ImportText(
      "wdisp/system_0 = SID=ERP, SILOC=file://info.icr, SSL_ENCRYPT=1\n"
      "wdisp/url_map_location = file://urlinfo.txt\n"
      "wdisp/ssl_certhost = erp.example.com\n",
      files);
  EXPECT_EQ(Warnings(r), std::vector<std::string>{
                             "WARN sapwebdisp.pfl:1 wdisp/system_0: instance appb_ERP_01 has no "
                             "HTTPS port in the server info file: left out of LogonGroup diag"});
  const Json& diag = Find(r, "LogonGroup", "diag")->at("spec");
  EXPECT_EQ(diag["backend"]["staticServers"], (Json::array({{{"name", "appa_ERP_00"},
                                                             {"address", "appa.example.com"},
                                                             {"port", 44300},
                                                             {"capacity", 2}}})));
  EXPECT_EQ(diag["upstreamTLS"], (Json{{"mode", "reencrypt"}, {"serverName", "erp.example.com"}}));
  EXPECT_EQ(Find(r, "UrlMapping", "erp")->at("spec")["rules"],
            (Json::array({{{"prefix", "/sap/"}, {"kind", "abap"}}})));
  ExpectLoadable(r);
}

TEST(ImportTest, RuleFilesBecomeModificationsUnchanged) {
  const std::string rules =
      "# SAP's reference rule file (shape)\n"
      "SetHeader clientProtocol %{SERVER_PROTOCOL}\n"
      "if %{REQUEST_METHOD} !stricmp \"GET\" [AND]\n"
      "if %{REQUEST_METHOD} !stricmp \"POST\"\n"
      "RegForbiddenUrl ^/(.*) -\n"
      "RegRewriteUrl ^/$ /index.html\n\n";
  Files files = {{"icm_filter_rules.txt", rules}, {"legacy.txt", "RegIGoneUrl ^/old(.*) -"}};
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "icm/HTTP/mod_1 = PREFIX=/legacy/, FILE=legacy.txt\n"
      "icm/HTTP/mod_0 = PREFIX=/,FILE=$(DIR_GLOBAL)/security/data/icm_filter_rules.txt\n",
      files);
  EXPECT_EQ(r.ExitCode(), 0) << testing::PrintToString(Warnings(r));
  const Json& mods = Find(r, "UrlMapping", "sap")->at("spec")["modifications"];
  ASSERT_EQ(mods.size(), 2u);
  EXPECT_EQ(mods[0]["prefix"], "/");
  EXPECT_EQ(mods[0]["rules"], rules);
  EXPECT_EQ(mods[1]["prefix"], "/legacy/");
  EXPECT_EQ(mods[1]["rules"], "RegIGoneUrl ^/old(.*) -");
  // Through YAML and kwd's loader, byte for byte.
  YAML::Node node = YAML::Load(ToYaml(*Find(r, "UrlMapping", "sap")));
  EXPECT_EQ(node["spec"]["modifications"][0]["rules"].as<std::string>(), rules);
  ExpectLoadable(r);
}

TEST(ImportTest, RuleFileThatDoesNotParseIsAWarnWithLineAndColumn) {
  // A pattern RE2 does not compile, and a command kwd does not know.
  Files files = {{"rules.txt", "SetHeader X-A v\nRegRewriteUrl ^/(a /b\n"},
                 {"other.txt", "# fine so far\nNoSuchCommand x\n"}};
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "icm/HTTP/mod_0 = PREFIX=/, FILE=rules.txt\n"
      "icm/HTTP/mod_1 = PREFIX=/o/, FILE=other.txt\n"
      "icm/HTTP/mod_2 = PREFIX=/again/, FILE=rules.txt\n",
      files);
  EXPECT_EQ(r.ExitCode(), 3);
  std::vector<std::string> warnings = Warnings(r);
  ASSERT_EQ(warnings.size(), 3u) << testing::PrintToString(warnings);
  EXPECT_EQ(warnings[0].rfind("WARN other.txt:2:1 icm/HTTP/mod_1: ", 0), 0u) << warnings[0];
  EXPECT_EQ(warnings[1].rfind("WARN rules.txt:2:15 icm/HTTP/mod_0: ", 0), 0u) << warnings[1];
  EXPECT_EQ(warnings[2].rfind("WARN rules.txt:2:15 icm/HTTP/mod_2: ", 0), 0u) << warnings[2];
  EXPECT_NE(warnings[1].find("the controller rejects"), std::string::npos) << warnings[1];
  // Still written as it is, for the operator to fix.
  const Json& mods = Find(r, "UrlMapping", "sap")->at("spec")["modifications"];
  ASSERT_EQ(mods.size(), 3u);
  EXPECT_EQ(mods[0]["rules"], files["rules.txt"]);
}

TEST(ImportTest, RedirectsBecomeRulesBeforeTheRuleFiles) {
  // icm/HTTP/redirect_<xx> as SAP's wiki shows it, the 6.40 icm/redirect_<xx>
  // form, and forms kwd cannot take.
  Files files = {{"rules.txt", "SetHeader x y\n"}};
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "icm/HTTP/mod_0 = PREFIX=/,FILE=rules.txt\n"
      "icm/HTTP/redirect_1 = PREFIX=/old.app, FROMPROT=http, TO=/new, PROT=https, "
      "HOST=erp.example.com, PORT=443\n"
      "icm/HTTP/redirect_0 = PREFIX=/, TO=/sap/bc/webdynpro/sap/ags_workcenter\n"
      "icm/redirect_0 = PREFIX=/legacy\n"
      "icm/HTTP/redirect_2 = PREFIX=/x, FROM=/x/*.ht?, TO=/y\n"
      "icm/HTTP/redirect_3 = PREFIX=/x, PORT=8443, TO=/y\n"
      "icm/HTTP/redirect_4 = PREFIX=/, FROM=*, FROMPROT=http, PROT=https, HOST=erp.example.com\n"
      "icm/HTTP/redirect_5 = PREFIX=/x, FROM=/x/a b\n"
      "icm/HTTP/redirect_6 = PREFIX=/self, TO=/self\n",
      files);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r),
            (std::vector<std::string>{
                "WARN sapwebdisp.pfl:6 icm/redirect_0: PREFIX=\"/legacy\" redirects to itself without "
                "another TO= or a HOST= (a loop); redirect not translated",
                "WARN sapwebdisp.pfl:8 icm/HTTP/redirect_3: PROT= and PORT= need HOST= (as in "
                "SAP); redirect not translated",
                "WARN sapwebdisp.pfl:10 icm/HTTP/redirect_5: FROM=\"/x/a b\" is not usable; "
                "redirect not translated",
                "WARN sapwebdisp.pfl:11 icm/HTTP/redirect_6: PREFIX=\"/self\" redirects to itself "
                "without another TO= or a HOST= (a loop); redirect not translated"}));
  const Json& mods = Find(r, "UrlMapping", "sap")->at("spec")["modifications"];
  ASSERT_EQ(mods.size(), 2u);
  EXPECT_EQ(mods[0]["prefix"], "/");
  const std::string rules = mods[0]["rules"];
  EXPECT_EQ(rules,
            "RegRedirectUrl ^/$ /sap/bc/webdynpro/sap/ags_workcenter [CODE=permanent]\n"
            "if %{SERVER_PROTOCOL} stricmp \"http\"\n"
            "RegRedirectUrl ^/old\\.app$ https://erp.example.com:443/new [CODE=permanent]\n"
            "if %{PATH} regmatch ^/x\n"
            "RegRedirectUrl ^(/x/.*\\.ht.)$ /y [CODE=permanent]\n"
            "if %{SERVER_PROTOCOL} stricmp \"http\" [and]\n"
            "if %{PATH} regmatch ^/\n"
            "RegRedirectUrl ^(.*)$ https://erp.example.com$1 [CODE=permanent]\n");
  EXPECT_EQ(mods[1]["rules"], "SetHeader x y\n");
  ExpectLoadable(r);

  // What the rules do, run by the proxy's rule engine.
  modification::ParseError error;
  auto program = modification::Program::CompileText(rules, &error);
  ASSERT_NE(program, nullptr) << error.ToString();
  auto run = [&](std::string path, bool https, std::string query = "") {
    modification::RequestView view;
    view.method = "GET";
    view.path = path;
    view.raw_path = path;
    view.query = query;
    view.has_query = !query.empty();
    view.https = https;
    modification::State state;
    program->Evaluate(view, &state);
    return state.outcome == modification::Outcome::kRedirect
               ? std::to_string(state.status) + " " + state.location
               : std::string("continue");
  };
  EXPECT_EQ(run("/x/a/index.htm", true), "301 /y");
  EXPECT_EQ(run("/x/index.htx", true), "301 /y");
  EXPECT_EQ(run("/x/index.html", true), "continue");   // ? is one character
  EXPECT_EQ(run("/X/index.htm", true), "continue");     // with case
  EXPECT_EQ(run("/x.htm", true), "continue");           // not under the FROM pattern's /x/
  // FROM=* over plain http: the same path and query over HTTPS.
  EXPECT_EQ(run("/sap/bc/gui/sap its/webgui", false, "sap-client=100"),
            "301 https://erp.example.com/sap/bc/gui/sap%20its/webgui?sap-client=100");
  EXPECT_EQ(run("/sap/bc/gui", true), "continue");
}

TEST(ImportTest, RedirectValuesARuleWouldNotTakeAsTextAreWarned) {
  // TO=, HOST= and PORT= are written into the rule as they are: a $1 there
  // was a back reference (to the FROM= group, or to none: a rule file the
  // controller refuses, every redirect with it), %{...} a variable, [...]
  // options, HOST= a path. FROM= with %-escapes never matched the decoded
  // path, and FROM= without TO= or HOST= redirected each path to itself.
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "icm/HTTP/redirect_0 = PREFIX=/x, FROM=/x/*, TO=/new$1\n"
      "icm/HTTP/redirect_1 = PREFIX=/x, TO=/cost$9\n"
      "icm/HTTP/redirect_2 = PREFIX=/x, FROM=/x/*, TO=/a%{NOPE}\n"
      "icm/HTTP/redirect_3 = PREFIX=/x, TO=[CODE=temp]\n"
      "icm/HTTP/redirect_4 = PREFIX=/x, FROM=/x/*, HOST=%{HTTP_HOST}\n"
      "icm/HTTP/redirect_5 = PREFIX=/x, FROM=/x/*, HOST=evil.example/p?q=\n"
      "icm/HTTP/redirect_6 = PREFIX=/x, FROM=/x/*, HOST=h, PORT=80/../x\n"
      "icm/HTTP/redirect_7 = PREFIX=/a, FROM=/a%20b*, TO=/b\n"
      "icm/HTTP/redirect_8 = PREFIX=/, FROM=*\n"
      "icm/HTTP/redirect_9 = PREFIX=/a, FROM=/a*, FROMPROT=http\n"
      "icm/HTTP/redirect_10 = PREFIX=/v6, FROM=/v6/*, HOST=[2001:db8::1], PORT=8443\n");
  EXPECT_EQ(r.ExitCode(), 3);
  const std::string syntax = " holds $<digit>, %{, [, \" or \\ that a rule would not take as "
                             "text; redirect not translated";
  const std::string loop =
      ": FROM= without TO= or HOST= redirects each path to itself (a loop); redirect not "
      "translated";
  EXPECT_EQ(Warnings(r),
            (std::vector<std::string>{
                "WARN sapwebdisp.pfl:3 icm/HTTP/redirect_0: TO=\"/new$1\"" + syntax,
                "WARN sapwebdisp.pfl:4 icm/HTTP/redirect_1: TO=\"/cost$9\"" + syntax,
                "WARN sapwebdisp.pfl:5 icm/HTTP/redirect_2: TO=\"/a%{NOPE}\"" + syntax,
                "WARN sapwebdisp.pfl:6 icm/HTTP/redirect_3: TO=\"[CODE=temp]\"" + syntax,
                "WARN sapwebdisp.pfl:7 icm/HTTP/redirect_4: HOST=\"%{HTTP_HOST}\" is not a host "
                "name; redirect not translated",
                "WARN sapwebdisp.pfl:8 icm/HTTP/redirect_5: HOST=\"evil.example/p?q=\" is not a "
                "host name; redirect not translated",
                "WARN sapwebdisp.pfl:9 icm/HTTP/redirect_6: PORT=\"80/../x\" is not a port "
                "number; redirect not translated",
                "WARN sapwebdisp.pfl:10 icm/HTTP/redirect_7: FROM=\"/a%20b*\" holds %-escapes "
                "(kwd matches the decoded path); redirect not translated",
                "WARN sapwebdisp.pfl:11 icm/HTTP/redirect_8" + loop,
                "WARN sapwebdisp.pfl:12 icm/HTTP/redirect_9" + loop}));
  const Json& mods = Find(r, "UrlMapping", "sap")->at("spec")["modifications"];
  ASSERT_EQ(mods.size(), 1u);
  EXPECT_EQ(mods[0]["rules"],
            "if %{PATH} regmatch ^/v6\n"
            "RegRedirectUrl ^(/v6/.*)$ http://[2001:db8::1]:8443$1 [CODE=permanent]\n");
  ExpectLoadable(r);
}

TEST(ImportTest, RedirectsStayWithinWhatOneRuleFileMayCompile) {
  // 300 redirects with 1,000-character FROM= patterns: their rule file went
  // past the controller's bound on a file's patterns (250,000 RE2
  // instructions), so `validate` refused the UrlMapping, every redirect and
  // the rule files with it, while the import said nothing. The entries past
  // the bound are now left out with a WARN.
  std::string profile = "rdisp/mshost = ms\nms/http_port = 1\n";
  for (int i = 0; i < 300; ++i) {
    profile += "icm/HTTP/redirect_" + std::to_string(i) + " = PREFIX=/p" + std::to_string(i) +
               ", FROM=/p" + std::to_string(i) + "/" + std::string(1000, '?') + ", TO=/t\n";
  }
  ImportResult r = ImportText(profile);
  EXPECT_EQ(r.ExitCode(), 3);
  std::vector<std::string> warnings = Warnings(r);
  ASSERT_FALSE(warnings.empty());
  EXPECT_LT(warnings.size(), 300u);
  for (const std::string& warning : warnings) {
    EXPECT_NE(warning.find("its rule's patterns take the redirects past what one rule file may "
                           "compile; redirect not translated"),
              std::string::npos)
        << warning;
  }
  ExpectLoadable(r);
}

// What a rule file's patterns cost the controller (RE2 instructions).
int64_t RuleCost(const std::string& text) {
  modification::ParseError error;
  auto program = modification::Program::CompileText(text, &error);
  EXPECT_NE(program, nullptr) << error.ToString();
  return program != nullptr ? program->regex_instructions() : 0;
}

// A rule file of about `target` instructions, its patterns named by `tag`.
std::string CostlyRuleFile(const std::string& tag, int64_t target) {
  auto line = [&](int i) {
    return "RegRewriteUrl ^/" + tag + std::to_string(i) + "/x{400}$ /q\n";
  };
  const int64_t per_line = RuleCost(line(0));
  std::string text;
  for (int i = 0; per_line > 0 && i < target / per_line; ++i) {
    text += line(i);
  }
  return text;
}

// What the rule files of each UrlMapping cost together.
std::vector<int64_t> MappingRuleCosts(const ImportResult& r) {
  std::vector<int64_t> costs;
  for (const auto& object : r.objects) {
    if (object["kind"] != "UrlMapping") {
      continue;
    }
    int64_t cost = 0;
    for (const auto& modification : object["spec"].value("modifications", Json::array())) {
      cost += RuleCost(modification["rules"].get<std::string>());
    }
    costs.push_back(cost);
  }
  return costs;
}

TEST(ImportTest, RuleFilesTogetherStayWithinWhatOneUrlMappingMayCompile) {
  // Three files, each within the bound on one file, together past the
  // controller's bound on one UrlMapping's files: `validate` refused the
  // UrlMapping (and every rule and permission in it) while the import
  // exited 0. The file that does not fit is left out with a WARN; the ones
  // after it still go in when they fit.
  Files files = {{"a.txt", CostlyRuleFile("a", 100000)},
                 {"b.txt", CostlyRuleFile("b", 100000)},
                 {"c.txt", CostlyRuleFile("c", 100000)},
                 {"d.txt", "SetHeader X-D v\n"}};
  const int64_t a = RuleCost(files["a.txt"]);
  const int64_t b = RuleCost(files["b.txt"]);
  const int64_t c = RuleCost(files["c.txt"]);
  ASSERT_LT(c, modification::kMaxProgramInstructions);
  ASSERT_GT(a + b + c, modification::kMaxMappingInstructions);
  ASSERT_LE(a + b + RuleCost(files["d.txt"]) + RuleCost("RegRedirectUrl ^/old$ /new [CODE=permanent]\n"),
            modification::kMaxMappingInstructions);
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "icm/HTTP/mod_0 = PREFIX=/a/, FILE=a.txt\n"
      "icm/HTTP/mod_1 = PREFIX=/b/, FILE=b.txt\n"
      "icm/HTTP/mod_2 = PREFIX=/c/, FILE=c.txt\n"
      "icm/HTTP/mod_3 = PREFIX=/d/, FILE=d.txt\n"
      "icm/HTTP/redirect_0 = PREFIX=/old, TO=/new\n",
      files);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r), std::vector<std::string>{
                             "WARN sapwebdisp.pfl:5 icm/HTTP/mod_2: c.txt: its patterns (" +
                             std::to_string(c) +
                             " regex instructions) take the rule files past what one "
                             "UrlMapping's rule files may compile together (250000 regex "
                             "instructions); left out"});
  const Json& mods = Find(r, "UrlMapping", "sap")->at("spec")["modifications"];
  ASSERT_EQ(mods.size(), 4u) << mods.dump().substr(0, 300);
  EXPECT_EQ(mods[0]["rules"], "RegRedirectUrl ^/old$ /new [CODE=permanent]\n");
  EXPECT_EQ(mods[1]["prefix"], "/a/");
  EXPECT_EQ(mods[2]["prefix"], "/b/");
  EXPECT_EQ(mods[3]["prefix"], "/d/");
  for (int64_t cost : MappingRuleCosts(r)) {
    EXPECT_LE(cost, modification::kMaxMappingInstructions);
  }
  ExpectLoadable(r);
}

TEST(ImportTest, RuleFilesCopiedIntoEveryUrlMappingStayWithinTheirShare) {
  // Five SRCVHOST systems: six UrlMappings, each carrying every rule file.
  // The controller checks all UrlMappings' files together within 1,000,000
  // instructions, so each copy gets a sixth of it.
  Files files = {{"a.txt", CostlyRuleFile("a", 100000)},
                 {"b.txt", CostlyRuleFile("b", 100000)}};
  const int64_t a = RuleCost(files["a.txt"]);
  const int64_t b = RuleCost(files["b.txt"]);
  const int64_t share = modification::kMaxClusterInstructions / 6;
  ASSERT_LE(a, share);
  ASSERT_GT(a + b, share);
  ASSERT_LE(a + b, modification::kMaxMappingInstructions);
  std::string profile = "SAPSYSTEMNAME = W01\n";
  for (int i = 0; i < 5; ++i) {
    profile += "wdisp/system_" + std::to_string(i) + " = SID=S0" + std::to_string(i) +
               ", MSHOST=ms" + std::to_string(i) + ".example, MSPORT=8101, SRCVHOST=h" +
               std::to_string(i) + ".example\n";
  }
  profile += "icm/HTTP/mod_0 = PREFIX=/a/, FILE=a.txt\nicm/HTTP/mod_1 = PREFIX=/b/, FILE=b.txt\n";
  ImportResult r = ImportText(profile, files);
  EXPECT_EQ(Warnings(r), std::vector<std::string>{
                             "WARN sapwebdisp.pfl:8 icm/HTTP/mod_1: b.txt: its patterns (" +
                             std::to_string(b) + " regex instructions) take the rule files past " +
                             std::to_string(share) +
                             " regex instructions (all UrlMappings' rule files may compile "
                             "1000000 together, and each of the 6 UrlMappings carries them); "
                             "left out"});
  std::vector<int64_t> costs = MappingRuleCosts(r);
  ASSERT_EQ(costs.size(), 6u);
  int64_t total = 0;
  for (int64_t cost : costs) {
    EXPECT_EQ(cost, a);
    total += cost;
  }
  EXPECT_LE(total, modification::kMaxClusterInstructions);
}

TEST(ImportTest, Latin1RuleFileIsConvertedWithANote) {
  Files files = {{"rules.txt", "# Regeln f\xfcr W01\nSetHeader x y\n"}};
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\nicm/HTTP/mod_0 = PREFIX=/,FILE=rules.txt\n", files);
  EXPECT_EQ(r.ExitCode(), 0);
  EXPECT_EQ(Find(r, "UrlMapping", "sap")->at("spec")["modifications"][0]["rules"],
            "# Regeln f\xc3\xbcr W01\nSetHeader x y\n");
  EXPECT_EQ(
      Lines(r, Diagnostic::Level::kNote),
      std::vector<std::string>{
          "NOTE sapwebdisp.pfl:3 icm/HTTP/mod_0: rules.txt is not UTF-8; read as ISO-8859-1"});
}

TEST(ImportTest, Latin1ProfileValuesBecomeUtf8) {
  // Found by the sap_profile fuzzer: a Latin-1 byte in a redirect target.
  ImportResult r = ImportText(
      "# Web Dispatcher f\xfcr ERP\nrdisp/mshost = ms\nms/http_port = 1\n"
      "icm/HTTP/redirect_0 = PREFIX=/, TO=/\x97"
      "ap/bc\n");
  EXPECT_EQ(Lines(r, Diagnostic::Level::kNote).front(),
            "NOTE sapwebdisp.pfl: not UTF-8; read as ISO-8859-1");
  const Json& mods = Find(r, "UrlMapping", "sap")->at("spec")["modifications"];
  EXPECT_EQ(mods[0]["rules"],
            "RegRedirectUrl ^/$ /\xc2\x97"
            "ap/bc [CODE=permanent]\n");
  for (const auto& object : r.objects) {
    EXPECT_NO_THROW((void)object.dump());
  }
}

// The profile of /tmp/attack's gen_expansion_bomb.py: fan 10, depth 8.
std::string ExpansionBombProfile(const std::string& a0) {
  std::string profile = "SAPSYSTEMNAME = W01\nA0 = " + a0 + "\n";
  for (int k = 1; k <= 8; ++k) {
    profile += "A" + std::to_string(k) + " = ";
    for (int i = 0; i < 10; ++i) {
      profile += "$(A" + std::to_string(k - 1) + ")";
    }
    profile += "\n";
  }
  return profile + "wdisp/system_0 = SID=W01, MSHOST=ms$(A8).example, MSPORT=8101\n";
}

TEST(ImportTest, EmptyExpansionBombIsExpandedOnce) {
  auto start = std::chrono::steady_clock::now();
  ImportResult r = ImportText(ExpansionBombProfile(""));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(r.HasErrors()) << testing::PrintToString(Lines(r, Diagnostic::Level::kError));
  const Json* system = Find(r, "SapSystem", "w01");
  ASSERT_NE(system, nullptr) << testing::PrintToString(Names(r));
  EXPECT_EQ(system->at("spec")["messageServer"]["host"], "ms.example");
}

TEST(ImportTest, ExpansionBeyondTheBudgetIsAnErrorNamingTheParameter) {
  // A0 refers back to A8: nothing can be memoised, the budget stops it.
  auto start = std::chrono::steady_clock::now();
  ImportResult r = ImportText(ExpansionBombProfile("$(A8)"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(r.ExitCode(), 1);
  std::vector<std::string> errors = Lines(r, Diagnostic::Level::kError);
  ASSERT_EQ(errors.size(), 1u) << testing::PrintToString(errors);
  EXPECT_EQ(errors[0].rfind("ERROR sapwebdisp.pfl:2 A0: ", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find(std::to_string(kMaxExpansionSteps)), std::string::npos) << errors[0];
  EXPECT_TRUE(r.objects.empty());
}

// gen_quadratic.py's shape: S systems with their own SRCVHOST (one
// UrlMapping each) and M rule files and redirects, which every UrlMapping
// carries: S x M rules in the output.
std::string QuadraticProfile(int systems, int mods) {
  std::string profile = "SAPSYSTEMNAME = W01\n";
  for (int i = 0; i < systems; ++i) {
    profile += "wdisp/system_" + std::to_string(i) + " = SID=S" + (i % 100 < 10 ? "0" : "") + std::to_string(i % 100) +
               ", MSHOST=ms" + std::to_string(i) + ".example, MSPORT=8101, SRCVHOST=h" +
               std::to_string(i) + ".example\n";
  }
  for (int j = 0; j < mods; ++j) {
    profile += "icm/HTTP/mod_" + std::to_string(j) + " = PREFIX=/p" + std::to_string(j) +
               "/, FILE=rules.txt\n";
  }
  for (int j = 0; j < mods; ++j) {
    profile += "icm/HTTP/redirect_" + std::to_string(j) + " = PREFIX=/r" + std::to_string(j) +
               ", TO=/q" + std::to_string(j) + "\n";
  }
  return profile;
}

TEST(ImportTest, TotalOutputIsBoundedWhileItIsBuilt) {
  int reads = 0;
  FileReader reader = [&reads](const std::string&, std::string* text, std::string* shown,
                               std::string*) {
    ++reads;
    *text = "SetHeader X-A v\n";
    *shown = "rules.txt";
    return ReadStatus::kRead;
  };
  // 1000 x 1000: 115 MB of YAML and 790 MB of memory before the bound.
  auto start = std::chrono::steady_clock::now();
  ImportResult r = Import(QuadraticProfile(1000, 1000), "sapwebdisp.pfl", reader, {});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(r.ExitCode(), 1);
  std::vector<std::string> errors = Lines(r, Diagnostic::Level::kError);
  ASSERT_EQ(errors.size(), 1u) << testing::PrintToString(errors);
  EXPECT_NE(errors[0].find(std::to_string(kMaxOutputBytes)), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("UrlMapping"), std::string::npos) << errors[0];
  EXPECT_TRUE(r.objects.empty());
  // Charged before each object is built: at most one object past the bound.
  EXPECT_GT(r.output_bytes, kMaxOutputBytes);
  EXPECT_LT(r.output_bytes, kMaxOutputBytes + 1024 * 1024);
  // The same file named 1000 times is read once.
  EXPECT_EQ(reads, 1);
}

TEST(ImportTest, OutputUnderTheBoundIsCountedAndKept) {
  ImportResult r = ImportText(QuadraticProfile(3, 4), {{"rules.txt", "SetHeader X-A v\n"}});
  EXPECT_FALSE(r.HasErrors()) << testing::PrintToString(Lines(r, Diagnostic::Level::kError));
  ASSERT_EQ(r.objects.size(), 3u + 6u + 4u) << testing::PrintToString(Names(r));
  std::size_t bytes = 0;
  for (const auto& object : r.objects) {
    bytes += object.dump().size();
  }
  EXPECT_EQ(r.output_bytes, bytes);
  // Every SRCVHOST mapping carries the 4 rule files after the redirects.
  for (const char* name : {"s00", "s01", "s02"}) {
    const Json* mapping = Find(r, "UrlMapping", name);
    ASSERT_NE(mapping, nullptr) << name << testing::PrintToString(Names(r));
    EXPECT_EQ(mapping->at("spec")["modifications"].size(), 5u);
  }
}

TEST(ImportTest, UnreadableFilesAreErrors) {
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "wdisp/permission_table = /usr/sap/W01/sec/missing.txt\n"
      "icm/HTTP/mod_0 = PREFIX=/,FILE=gone.txt\n");
  EXPECT_EQ(r.ExitCode(), 1);
  EXPECT_EQ(Lines(r, Diagnostic::Level::kError),
            (std::vector<std::string>{
                "ERROR sapwebdisp.pfl:3 wdisp/permission_table: cannot read "
                "\"/usr/sap/W01/sec/missing.txt\": no such file",
                "ERROR sapwebdisp.pfl:4 icm/HTTP/mod_0: cannot read \"gone.txt\": no such file"}));
  EXPECT_EQ(ImportText(std::string("rdisp/mshost = a\0b\n", 18)).ExitCode(), 1);
  EXPECT_EQ(ImportText(std::string(kMaxProfileBytes + 1, '#')).ExitCode(), 1);
}

TEST(ImportTest, ListenersTimeoutsAndSizes) {
  // SAP's reference profile, plus timeouts and sizes.
  ImportResult r = ImportText(
      "SAPSYSTEM = 66\n"
      "rdisp/mshost = binmain\n"
      "ms/http_port = 8081\n"
      "wdisp/auto_refresh = 120\n"
      "wdisp/max_servers = 100\n"
      "icm/server_port_0 = PROT=HTTP,PORT=80,TIMEOUT=90,PROCTIMEOUT=600,EXTBIND=1\n"
      "icm/server_port_1 = PROT=HTTP,PORT=8080\n"
      "icm/keep_alive_timeout = 30\n"
      "icm/conn_timeout = 2500\n"
      "icm/HTTP/max_request_size_KB = 1024\n"
      "icm/min_threads = 20\n"
      "mpi/total_size_MB = 100\n"
      "icm/HTTP/logging_0 = PREFIX=/, LOGFILE=access_log-%y-%m-%d, MAXSIZEKB=10000\n");
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r),
            std::vector<std::string>{
                "WARN sapwebdisp.pfl:7 icm/server_port_1: kwd-proxy has one HTTP listener "
                "(icm/server_port_0 is it); this port is left out: add it to the Service in "
                "front (or use a second Service port to the same target)"});
  EXPECT_EQ(r.proxy_flags,
            (std::vector<std::string>{"--listen", "0.0.0.0:80", "--idle-timeout", "90s",
                                      "--response-timeout", "600s", "--connect-timeout", "2500ms",
                                      "--max-body-size", "1048576", "--access-log", "-"}));
  EXPECT_EQ(r.chart_values["proxy"]["extraArgs"],
            (Json::array({"--idle-timeout", "90s", "--response-timeout", "600s",
                          "--connect-timeout", "2500ms", "--max-body-size", "1048576"})));
  EXPECT_EQ(r.chart_values["proxy"]["accessLog"], "-");
  EXPECT_EQ(Find(r, "SapSystem", "sap")->at("spec")["refreshIntervalSeconds"], 120);
  EXPECT_EQ(Find(r, "LogonGroup", "diag")->at("spec")["healthCheck"]["intervalSeconds"], 120);
}

TEST(ImportTest, TlsTerminationClientCertificatesAndReencryption) {
  // Shaped like the X.509 pass-through profile (profile B of the reference).
  ImportResult r = ImportText(
      "ssl/ssl_lib = $(DIR_EXECUTABLE)/libsapcrypto.so\n"
      "ssl/server_pse = $(DIR_INSTANCE)/sec/SAPSSLS.pse\n"
      "icm/server_port_0 = PROT=HTTPS,PORT=443,HOST=10.1.2.3\n"
      "icm/HTTPS/verify_client = 2\n"
      "icm/HTTPS/forward_ccert_as_header = true\n"
      "icm/HTTPS/client_certificate_header_name = SSL_CLIENT_CERT\n"
      "icm/HTTPS/client_key_size_header_name = X_KEYSIZE\n"
      "wdisp/ssl_encrypt = 2\n"
      "wdisp/ssl_auth = 2\n"
      "wdisp/ssl_cred = SAPSSLC.pse\n"
      "wdisp/ssl_certhost = erp.example.com\n"
      "rdisp/mshost = ms\nms/http_port = 8101\n");
  EXPECT_EQ(r.ExitCode(), 3);
  auto warnings = Warnings(r);
  ASSERT_EQ(warnings.size(), 4u) << testing::PrintToString(warnings);
  EXPECT_EQ(warnings[0].rfind("WARN sapwebdisp.pfl:2 ssl/server_pse: the server certificate and "
                              "key are in an SAP PSE",
                              0),
            0u);
  EXPECT_EQ(warnings[1].rfind("WARN sapwebdisp.pfl:4 icm/HTTPS/verify_client: client "
                              "certificates are checked against --tls-client-ca",
                              0),
            0u);
  EXPECT_EQ(warnings[2].rfind("WARN sapwebdisp.pfl:7 icm/HTTPS/client_key_size_header_name: kwd "
                              "sends the header as SSL_CIPHER_USEKEYSIZE",
                              0),
            0u);
  EXPECT_EQ(warnings[3].rfind("WARN sapwebdisp.pfl:9 wdisp/ssl_auth: the client certificate", 0),
            0u);
  EXPECT_EQ(r.proxy_flags,
            (std::vector<std::string>{"--tls-listen", "10.1.2.3:443", "--tls-cert-dir",
                                      "/etc/kwd/tls", "--tls-verify-client", "required",
                                      "--tls-client-ca", "/etc/kwd/tls/client-ca.crt"}));
  EXPECT_EQ(r.chart_values["proxy"]["service"]["https"],
            (Json{{"enabled", true}, {"port", 443}, {"certificateSecrets", {"kwd-tls"}}}));
  EXPECT_EQ(r.chart_values["proxy"]["upstreamTLS"]["clientCertSecrets"],
            Json::array({"kwd-upstream-client"}));
  EXPECT_EQ(Find(r, "LogonGroup", "diag")->at("spec")["upstreamTLS"],
            (Json{{"mode", "reencrypt"},
                  {"serverName", "erp.example.com"},
                  {"clientCertSecret", "kwd-upstream-client"}}));
  ExpectLoadable(r);
}

TEST(ImportTest, EndToEndTlsIsPassthrough) {
  // SAP's minimal profile: an HTTP listener and a PROT=ROUTER one.
  ImportResult r = ImportText(
      "rdisp/mshost = binmain\nms/http_port = 8081\n"
      "icm/server_port_0 = PROT=HTTP,PORT=80\n"
      "icm/server_port_1 = PROT=ROUTER,PORT=443\n"
      "wdisp/HTTPS/dest_logon_group = HTTPS\n"
      "wdisp/HTTPS/max_client_ip_entries = 100000\n"
      "wdisp/HTTPS/sticky_mask = 255.255.255.0\n"
      "wdisp/HTTPS/context_timeout = 600\n");
  EXPECT_EQ(r.ExitCode(), 0) << testing::PrintToString(Warnings(r));
  EXPECT_EQ(r.proxy_flags, (std::vector<std::string>{"--listen", "0.0.0.0:80",
                                                     "--passthrough-listen", "0.0.0.0:443"}));
  EXPECT_EQ(r.chart_values["proxy"]["service"]["passthrough"],
            (Json{{"enabled", true}, {"port", 443}}));
  EXPECT_EQ(Find(r, "UrlMapping", "sap")->at("spec")["passthroughGroup"], "https-https");
  const Json& group = Find(r, "LogonGroup", "https-https")->at("spec");
  EXPECT_EQ(group["backend"], (Json{{"sapSystem", {{"name", "sap"}, {"logonGroup", "HTTPS"}}}}));
  EXPECT_EQ(group["sessionAffinity"]["clientIP"],
            (Json{{"mask", "255.255.255.0"}, {"maxEntries", 100000}, {"idleTimeoutSeconds", 600}}));
  EXPECT_EQ(group["upstreamTLS"], (Json{{"mode", "reencrypt"}}));
  ExpectLoadable(r);
}

TEST(ImportTest, BalancingSessionsAndHeaders) {
  ImportResult r = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\n"
      "wdisp/load_balancing_strategy = simple_weighted_round_robin\n"
      "wdisp/HTTP/esid_support = false\n"
      "wdisp/HTTP/max_session_tab_entries = 1000\n"
      "wdisp/ping_abap_url = /sap/public/ping\n"
      "wdisp/info_timeout = 7\n"
      "is/HTTP/default_root_hdl = j2ee\n"
      "wdisp/add_client_protocol_header = true\n"
      "wdisp/handle_webdisp_ap_header = 0\n"
      "wdisp/add_xforwardedfor_header = false\n");
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r), std::vector<std::string>{
                             "WARN sapwebdisp.pfl:11 wdisp/add_xforwardedfor_header: kwd-proxy "
                             "always sends X-Forwarded-For (and X-Forwarded-Proto); it cannot be "
                             "switched off"});
  const Json& diag = Find(r, "LogonGroup", "diag")->at("spec");
  EXPECT_EQ(diag["strategy"], "simple_weighted_round_robin");
  EXPECT_EQ(diag["sessionAffinity"],
            (Json{{"identifiers", {"sap-contextid", "saplb", "jsessionid"}},
                  {"sessionTable", {{"maxEntries", 1000}}}}));
  EXPECT_EQ(diag["healthCheck"], (Json{{"path", "/sap/public/ping"}, {"timeoutSeconds", 7}}));
  EXPECT_FALSE(Find(r, "LogonGroup", "j2ee")->at("spec")["healthCheck"].contains("path"));
  const Json& mapping = Find(r, "UrlMapping", "sap")->at("spec");
  EXPECT_EQ(mapping["defaultRootHandler"], "java");
  EXPECT_EQ(mapping["sapHeaders"], (Json{{"clientProtocol", true}, {"accessPoints", false}}));
}

TEST(ImportTest, UnknownDuplicateAndUnresolvedParameters) {
  ImportResult r = ImportText(
      "rdisp/mshost = ms\n"
      "ms/http_port = 1\n"
      "wdisp/auto_refesh = 30\n"
      "wdisp/url_prefix_0 = /sap/\n"
      "icm/server_port_01 = PROT=HTTP,PORT=81\n"
      "icm/server_port_1 = PROT=HTTP,PORT=82\n"
      "wdisp/info_timeout = $(UNDEFINED)\n"
      "icm/server_port_2 = PROT=SMTP,PORT=25\n");
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r),
            (std::vector<std::string>{
                "WARN sapwebdisp.pfl:3 wdisp/auto_refesh: unknown parameter, not translated "
                "(did you mean \"wdisp/auto_refresh\"?)",
                "WARN sapwebdisp.pfl:4 wdisp/url_prefix_0: unknown parameter, not translated",
                "WARN sapwebdisp.pfl:5 icm/server_port_01: defined again at line 6; that later "
                "value is the one SAP uses, this one is left out",
                "WARN sapwebdisp.pfl:7 wdisp/info_timeout: unresolved $(UNDEFINED) (define it "
                "in the profile or pass --var NAME=VALUE)",
                "WARN sapwebdisp.pfl:8 icm/server_port_2: PROT=\"SMTP\" is not served by kwd "
                "(HTTP, HTTPS and ROUTER are); listener left out"}));
  EXPECT_EQ(r.proxy_flags, (std::vector<std::string>{"--listen", "0.0.0.0:82"}));
  EXPECT_EQ(r.parameters, 8);
  EXPECT_EQ(r.translated, 3);
  // --var fills in what the profile does not define.
  ImportOptions options;
  options.variables["UNDEFINED"] = "9";
  ImportResult with_var = ImportText(
      "rdisp/mshost = ms\nms/http_port = 1\nwdisp/info_timeout = $(UNDEFINED)\n", {}, options);
  EXPECT_EQ(with_var.ExitCode(), 0);
  EXPECT_EQ(Find(with_var, "LogonGroup", "diag")->at("spec")["healthCheck"]["timeoutSeconds"], 9);
}

TEST(ImportTest, HostileBytesAreEscapedAndBounded) {
  std::string profile = "wdisp/\x1b[31mred = 1\n";
  profile += "rdisp/mshost = " + std::string(5000, 'a') + "\n";
  profile += "icm/server_port_0 = PROT=HTTP,PORT=99999999999999999999\n";
  profile += "wdisp/system_0 = SID=\x01\x02\x03, MSHOST=x, MSPORT=1\n";
  ImportResult r = ImportText(profile);
  EXPECT_EQ(r.ExitCode(), 3);
  for (const auto& d : r.diagnostics) {
    std::string line = d.ToString();
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
    EXPECT_EQ(line.find('\x01'), std::string::npos) << line;
    EXPECT_LT(line.size(), 1000u) << line;
  }
}

TEST(ImportTest, AMegabyteOfJunkStaysFast) {
  std::string profile;
  while (profile.size() + 32 < kMaxProfileBytes) {
    profile += "wdisp/auto_refresx_" + std::to_string(profile.size() % 97) + " = 1\n";
  }
  auto start = std::chrono::steady_clock::now();
  ImportResult r = ImportText(profile);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(r.translated, 0);
}

TEST(ImportTest, AHostSelectsOneSystem) {
  ImportResult r = ImportText(
      "wdisp/system_0 = SID=AA1, MSHOST=a, MSPORT=1, SRCVHOST=erp.example.com\n"
      "wdisp/system_1 = SID=BB1, MSHOST=b, MSPORT=1, SRCVHOST=ERP.example.com;bw.example.com\n");
  EXPECT_EQ(Warnings(r),
            std::vector<std::string>{
                "WARN sapwebdisp.pfl:2 wdisp/system_1: SRCVHOST \"ERP.example.com\" already "
                "selects the system of wdisp/system_0; left out here (kwd gives a host to one "
                "system)"});
  EXPECT_EQ(Find(r, "UrlMapping", "bb1")->at("spec")["hosts"], Json::array({"bw.example.com"}));
}

TEST(ImportTest, NoBackEndIsSaid) {
  ImportResult r = ImportText(
      "ms/http_port = 8101\n"
      "wdisp/server_info_location = /msgserver/text/logon\n"
      "wdisp/permission_table = permtab.txt\n"
      "icm/server_port_0 = PROT=HTTP,PORT=80\n",
      {{"permtab.txt", "D *\n"}});
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(Warnings(r),
            (std::vector<std::string>{
                "WARN sapwebdisp.pfl: no back end: the profile has neither rdisp/mshost nor "
                "wdisp/system_<xx> nor a server info file; no LogonGroup or UrlMapping written",
                "WARN sapwebdisp.pfl:1 ms/http_port: no rdisp/mshost: the message server host is "
                "unknown; not translated",
                "WARN sapwebdisp.pfl:2 wdisp/server_info_location: no rdisp/mshost: the message "
                "server host is unknown; not translated",
                "WARN sapwebdisp.pfl:3 wdisp/permission_table: not translated: no system to apply "
                "it to"}));
  EXPECT_TRUE(r.objects.empty());
  EXPECT_EQ(r.proxy_flags, (std::vector<std::string>{"--listen", "0.0.0.0:80"}));
}

TEST(ImportTest, ObjectsTooLargeForTheApiServerAreSaid) {
  std::string rules;
  while (rules.size() < 1100 * 1024) {
    rules += "SetHeader X-Filler 0123456789012345678901234567890123456789\n";
  }
  ImportResult r =
      ImportText("rdisp/mshost = ms\nms/http_port = 1\nicm/HTTP/mod_0 = PREFIX=/,FILE=r.txt\n",
                 {{"r.txt", rules}});
  EXPECT_EQ(r.ExitCode(), 3);
  // And kwd's rule parser, which the controller runs, refuses the file.
  ASSERT_EQ(Warnings(r).size(), 2u) << testing::PrintToString(Warnings(r));
  EXPECT_EQ(Warnings(r)[0].rfind("WARN sapwebdisp.pfl: UrlMapping sap is ", 0), 0u);
  EXPECT_EQ(Warnings(r)[1].rfind("WARN r.txt icm/HTTP/mod_0: not a rule file kwd reads: ", 0), 0u)
      << Warnings(r)[1];
}

TEST(ImportTest, KubernetesNames) {
  EXPECT_EQ(KubernetesName("Z_FIORI"), "z-fiori");
  EXPECT_EQ(KubernetesName("__A__B__"), "a-b");
  EXPECT_EQ(KubernetesName("!!!"), "");
  EXPECT_EQ(KubernetesName(std::string(80, 'x')).size(), 50u);
}

TEST(ImportTest, SameInputSameOutput) {
  const std::string profile =
      "wdisp/system_1 = SID=B01, MSHOST=b, MSPORT=1, SRCVHOST=b.example.com\n"
      "wdisp/system_0 = SID=A01, MSHOST=a, MSPORT=1\n"
      "icm/server_port_0 = PROT=HTTP,PORT=80\n";
  ImportResult a = ImportText(profile);
  ImportResult b = ImportText(profile);
  ASSERT_EQ(a.objects.size(), b.objects.size());
  for (std::size_t i = 0; i < a.objects.size(); ++i) {
    EXPECT_EQ(ToYaml(a.objects[i]), ToYaml(b.objects[i]));
  }
}

}  // namespace
}  // namespace kwd::importer
