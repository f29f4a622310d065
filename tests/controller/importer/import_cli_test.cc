// Black-box tests of `kwd-controller import`: the real binaries on the
// checked-in profile directories under examples/import/. The imported YAML
// must pass `kwd-controller validate`, and `kwd-proxy explain` on the
// compiled snapshot must route a table of URLs as the profile would.
//
// Fields of the wave-3 contract that the import emits (UrlMapping
// spec.modifications, spec.sapHeaders, spec.system) are being added to the
// CRD and compile separately. Each test asks the built `validate` whether it
// knows a field (a probe object); a field it does not know yet is removed
// from the imported YAML before validate/compile, and the test says so in
// its output. Once the fields land, the full output is validated.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/command.h"

namespace {

namespace fs = std::filesystem;

using RunResult = kwd::testing::CommandResult;
using kwd::testing::ShellQuote;

std::string ReadFile(const fs::path& path) {
  return kwd::testing::ReadFileOrEmpty(path);
}

std::string Quote(const std::string& text) {
  return ShellQuote(text);
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

class ImportCliTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("kwd_import_" +
            std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  RunResult Run(const std::string& binary, const std::string& args) {
    return kwd::testing::RunCommand(
        "timeout 60 " + Quote(std::string(KWD_BINARY_DIR) + "/" + binary) + " " + args, dir_);
  }

  RunResult Controller(const std::string& args) { return Run("kwd-controller", args); }

  static std::string Example(const std::string& name) {
    return std::string(KWD_SOURCE_DIR) + "/examples/import/" + name + "/sapwebdisp.pfl";
  }

  // Compiles `resources` and explains each URL: "group kind status rule".
  std::vector<std::string> Explain(const fs::path& resources,
                                   const std::vector<std::string>& urls) {
    RunResult compiled = Controller("compile --source=dir:" + Quote(resources.string()));
    EXPECT_EQ(compiled.exit_code, 0) << compiled.err;
    fs::path snapshot = dir_ / "snapshot.json";
    std::ofstream(snapshot) << compiled.out;
    std::vector<std::string> decisions;
    for (const std::string& url : urls) {
      RunResult r = Run("kwd-proxy",
                        "explain --snapshot " + Quote(snapshot.string()) + " --url " + Quote(url));
      EXPECT_EQ(r.exit_code, 0) << r.err;
      nlohmann::json line =
          nlohmann::json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
      if (line.is_discarded()) {
        decisions.push_back("unparsable: " + r.out);
        continue;
      }
      auto text = [](const nlohmann::json& v) {
        return v.is_null() ? std::string("-") : v.is_string() ? v.get<std::string>() : v.dump();
      };
      decisions.push_back(url + " -> " + text(line["group"]) + " " + text(line["kind"]) + " " +
                          text(line["status"]) + " " + text(line["rule"]) + " " +
                          text(line["reason"]));
    }
    return decisions;
  }

  fs::path dir_;
};

std::vector<std::string> Diagnostics(const std::string& err, const std::string& level) {
  std::vector<std::string> out;
  for (const std::string& line : SplitLines(err)) {
    if (line.rfind(level + " ", 0) == 0) {
      out.push_back(line);
    }
  }
  return out;
}

TEST_F(ImportCliTest, CompleteProfileTranslatesValidatesAndRoutesAsSapWould) {
  fs::path out = dir_ / "out";
  RunResult r =
      Controller("import --profile " + Quote(Example("static")) + " -o " + Quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Diagnostics(r.err, "WARN"), std::vector<std::string>{}) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("import: 19 parameters: 19 translated"), std::string::npos) << r.err;
  EXPECT_EQ(ReadFile(out / "proxy-flags.txt"),
            "--listen 0.0.0.0:8000 --idle-timeout 120s --response-timeout 300s "
            "--connect-timeout 3000ms --max-body-size 52428800\n");
  YAML::Node values = YAML::LoadFile((out / "values.yaml").string());
  EXPECT_EQ(values["proxy"]["service"]["httpPort"].as<int>(), 8000);
  EXPECT_FALSE(fs::exists(out / "resources" / "sapsystems.yaml"));  // servers from info.icr

  // The rule file, byte for byte, in spec.modifications.
  std::vector<YAML::Node> mappings =
      YAML::LoadAllFromFile((out / "resources" / "urlmappings.yaml").string());
  ASSERT_EQ(mappings.size(), 1u);
  EXPECT_EQ(mappings[0]["spec"]["modifications"][0]["prefix"].as<std::string>(), "/");
  EXPECT_EQ(mappings[0]["spec"]["modifications"][0]["rules"].as<std::string>(),
            ReadFile(std::string(KWD_SOURCE_DIR) + "/examples/import/static/rules.txt"));

  RunResult validated = Controller("validate --source=dir:" + Quote((out / "resources").string()));
  EXPECT_EQ(validated.exit_code, 0) << validated.out << validated.err;
  EXPECT_EQ(validated.out, "ok: 5 objects\n");

  // The permission table, URL map, group file and servers of the profile.
  EXPECT_EQ(Explain(out / "resources", {"/sap/bc/gui/sap/its/webgui/x", "/sap/public/bc/ur/x.js",
                                        "/sap/bc/ping", "/sap/bc/webdynpro/sap/app", "/irj/portal",
                                        "/index.html", "/cgi-bin/test.cgi", "/other/x", "/"}),
            (std::vector<std::string>{
                "/sap/bc/gui/sap/its/webgui/x -> default/webgui abap - "
                "/sap/bc/gui/sap/its/webgui/ balance",
                "/sap/public/bc/ur/x.js -> default/public abap - /sap/public/ balance",
                "/sap/bc/ping -> default/diag abap - /sap/ balance",
                "/sap/bc/webdynpro/sap/app -> default/diag abap 403 /sap/ denied",
                "/irj/portal -> default/j2ee java - /irj/ balance",
                "/index.html -> default/diag abap - root balance",
                "/cgi-bin/test.cgi -> default/j2ee java 403 default denied",
                "/other/x -> default/j2ee java 403 default denied",
                "/ -> default/diag abap - root balance",
            }));
}

TEST_F(ImportCliTest, StdoutCarriesObjectsWithFlagsAndValuesAsComments) {
  RunResult r = Controller("import --profile " + Quote(Example("static")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("# kwd-controller import --profile ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("#   --listen 0.0.0.0:8000 --idle-timeout 120s"), std::string::npos);
  std::vector<YAML::Node> docs =
      YAML::Load(r.out).IsNull() ? std::vector<YAML::Node>{} : YAML::LoadAll(r.out);
  ASSERT_EQ(docs.size(), 5u);
  EXPECT_EQ(docs[0]["kind"].as<std::string>(), "LogonGroup");
  EXPECT_EQ(docs[4]["kind"].as<std::string>(), "UrlMapping");
  // Same input, same bytes.
  EXPECT_EQ(Controller("import --profile " + Quote(Example("static"))).out, r.out);
}

TEST_F(ImportCliTest, MultiSystemProfileSaysWhatIsLeftOutAndExits3) {
  fs::path out = dir_ / "out";
  RunResult r =
      Controller("import --profile " + Quote(Example("fiori")) + " -o " + Quote(out.string()));
  ASSERT_EQ(r.exit_code, 3) << r.err;
  const std::string pfl = Example("fiori");
  std::vector<std::string> warnings = Diagnostics(r.err, "WARN");
  ASSERT_EQ(warnings.size(), 3u) << r.err;
  EXPECT_EQ(warnings[0].rfind("WARN " + pfl +
                                  ":8 ssl/server_pse: the server certificate and key "
                                  "are in an SAP PSE, which kwd cannot read",
                              0),
            0u)
      << warnings[0];
  EXPECT_EQ(warnings[1], "WARN " + pfl +
                             ":19 wdisp/system_1: SRCSRV=\"*:433\" names no listener of this "
                             "profile (a typo?); kwd does not select systems by listener and "
                             "ignores it");
  EXPECT_EQ(warnings[2],
            "WARN " + pfl + ":22 wdisp/url_prefix_0: unknown parameter, not translated");
  // The root redirect is a rule now.
  EXPECT_NE(r.err.find("NOTE " + pfl + ":21 icm/HTTP/redirect_0: written as a RegRedirectUrl rule"),
            std::string::npos)
      << r.err;
  std::vector<YAML::Node> mappings =
      YAML::LoadAllFromFile((out / "resources" / "urlmappings.yaml").string());
  ASSERT_EQ(mappings.size(), 1u);
  EXPECT_EQ(mappings[0]["spec"]["modifications"][0]["rules"].as<std::string>(),
            "RegRedirectUrl ^/$ /sap/bc/ui2/flp [CODE=permanent]\n");
  EXPECT_EQ(ReadFile(out / "proxy-flags.txt"),
            "--tls-listen 0.0.0.0:443 --tls-cert-dir /etc/kwd/tls --idle-timeout 120s\n");

  // Servers come from the message servers at run time: validate may only
  // miss those (live state), nothing else.
  RunResult validated = Controller("validate --source=dir:" + Quote((out / "resources").string()));
  for (const std::string& line : SplitLines(validated.out)) {
    if (line.rfind("ok: ", 0) == 0) {
      continue;
    }
    EXPECT_NE(line.find("ResolvedRefs=False NoServerList"), std::string::npos) << line;
  }
  EXPECT_EQ(Explain(out / "resources", {"/sap/opu/odata/sap/api/x", "/sap/bc/ui2/flp",
                                        "/sap/public/bc/ui5/x", "/index.html"}),
            (std::vector<std::string>{
                "/sap/opu/odata/sap/api/x -> default/gw1-diag abap 503 /sap/opu/odata/ no-server",
                "/sap/bc/ui2/flp -> default/fe1-diag abap 503 /sap/bc/ no-server",
                "/sap/public/bc/ui5/x -> default/fe1-diag abap 503 /sap/public/bc/ no-server",
                "/index.html -> - java 503 root no-server",
            }));
}

TEST_F(ImportCliTest, UnreadableInputExits1AndWritesNothing) {
  fs::path out = dir_ / "out";
  RunResult missing = Controller("import --profile " + Quote((dir_ / "nope.pfl").string()) +
                                 " -o " + Quote(out.string()));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err.rfind("ERROR " + (dir_ / "nope.pfl").string() + ": cannot read", 0), 0u)
      << missing.err;

  fs::path profile = dir_ / "sapwebdisp.pfl";
  std::ofstream(profile) << "rdisp/mshost = ms\nms/http_port = 8101\n"
                            "wdisp/permission_table = $(DIR_INSTANCE)/sec/permtab.txt\n";
  RunResult r =
      Controller("import --profile " + Quote(profile.string()) + " -o " + Quote(out.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ERROR " + profile.string() +
                       ":3 wdisp/permission_table: cannot read \"/sec/permtab.txt\": no such file "
                       "in " +
                       dir_.string()),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(r.out, "");

  RunResult device = Controller("import --profile /dev/zero");
  EXPECT_EQ(device.exit_code, 1);
  EXPECT_EQ(device.err, "ERROR /dev/zero: not a regular file\n");

  // --files DIR is where the named files are.
  fs::path files = dir_ / "files";
  fs::create_directories(files);
  std::ofstream(files / "permtab.txt") << "P /sap/*\nD *\n";
  RunResult found = Controller("import --profile " + Quote(profile.string()) + " --files " +
                               Quote(files.string()) + " -o " + Quote(out.string()));
  EXPECT_EQ(found.exit_code, 0) << found.err;
  EXPECT_NE(ReadFile(out / "resources" / "urlmappings.yaml").find("pattern: \"/sap/*\""),
            std::string::npos);
}

// A bundle whose rule file is a link out of the --files directory (here to
// a stand-in for ~/.kube/config): not read, said, and nothing of it written.
TEST_F(ImportCliTest, LinksOutOfTheFilesDirectoryAreRefused) {
  fs::path bundle = dir_ / "bundle";
  fs::create_directories(bundle);
  std::ofstream(dir_ / "secret.txt") << "SECRET-TOKEN-abc123\n";
  fs::create_symlink(dir_ / "secret.txt", bundle / "rules.txt");
  std::ofstream(bundle / "real.txt") << "SetHeader X-Inside yes\n";
  fs::create_symlink("real.txt", bundle / "inside.txt");
  fs::create_directories(bundle / "adir.txt");
  fs::path profile = bundle / "sapwebdisp.pfl";
  std::ofstream(profile) << "wdisp/system_0 = SID=ABC, MSHOST=ms.example, MSPORT=8101\n"
                            "icm/HTTP/mod_0 = PREFIX=/, FILE=rules.txt\n"
                            "icm/HTTP/mod_1 = PREFIX=/in/, FILE=inside.txt\n"
                            "icm/HTTP/mod_2 = PREFIX=/dir/, FILE=adir.txt\n";
  fs::path out = dir_ / "out";
  // --files defaults to the profile's directory; given as a link to it, too.
  fs::create_symlink(bundle, dir_ / "bundle-link");
  for (const std::string& files : {std::string(), " --files " + Quote((dir_ / "bundle-link").string())}) {
    RunResult r = Controller("import --profile " + Quote(profile.string()) + files + " -o " +
                             Quote(out.string()));
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find(":2 icm/HTTP/mod_0: cannot read \"rules.txt\": "), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("outside"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(":4 icm/HTTP/mod_2: cannot read \"adir.txt\": "), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("ERROR"), std::string::npos) << r.err;
    std::string mappings = ReadFile(out / "resources" / "urlmappings.yaml");
    EXPECT_EQ(mappings.find("SECRET"), std::string::npos) << mappings;
    // A link that stays inside is followed.
    EXPECT_NE(mappings.find("SetHeader X-Inside yes"), std::string::npos) << mappings;
  }
}

// Rule files each within the bound on one file but together past the
// controller's bound on one UrlMapping's files: the import exited 0 and
// `validate` refused the UrlMapping. Now the file that does not fit is left
// out with a WARN, and what is written validates.
TEST_F(ImportCliTest, RuleFilesPastTheUrlMappingBoundAreLeftOutAndTheOutputValidates) {
  fs::path bundle = dir_ / "bundle";
  fs::create_directories(bundle);
  const fs::path example = fs::path(Example("static")).parent_path();
  for (const auto& entry : fs::directory_iterator(example)) {
    fs::copy_file(entry.path(), bundle / entry.path().filename());
  }
  // About 100,000 RE2 instructions each (240 patterns of about 415).
  for (const std::string name : {"a", "b", "c"}) {
    std::ofstream file(bundle / (name + ".txt"));
    for (int i = 0; i < 240; ++i) {
      file << "RegRewriteUrl ^/" << name << i << "/x{400}$ /q\n";
    }
  }
  std::ofstream(bundle / "sapwebdisp.pfl", std::ios::app)
      << "icm/HTTP/mod_1 = PREFIX=/a/, FILE=a.txt\n"
         "icm/HTTP/mod_2 = PREFIX=/b/, FILE=b.txt\n"
         "icm/HTTP/mod_3 = PREFIX=/c/, FILE=c.txt\n";
  fs::path out = dir_ / "out";
  RunResult r = Controller("import --profile " + Quote((bundle / "sapwebdisp.pfl").string()) +
                           " -o " + Quote(out.string()));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  std::vector<std::string> warnings = Diagnostics(r.err, "WARN");
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_NE(warnings[0].find(" icm/HTTP/mod_3: " + (bundle / "c.txt").string() +
                             ": its patterns ("),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("take the rule files past what one UrlMapping's rule files may "
                             "compile together (250000 regex instructions); left out"),
            std::string::npos)
      << warnings[0];
  std::vector<YAML::Node> mappings =
      YAML::LoadAllFromFile((out / "resources" / "urlmappings.yaml").string());
  ASSERT_EQ(mappings.size(), 1u);
  EXPECT_EQ(mappings[0]["spec"]["modifications"].size(), 3u);  // rules.txt, a, b
  RunResult validated = Controller("validate --source=dir:" + Quote((out / "resources").string()));
  EXPECT_EQ(validated.exit_code, 0) << validated.out << validated.err;
  EXPECT_EQ(validated.out, "ok: 5 objects\n");
}

// A rule file kwd's rule parser does not read: the controller would reject
// the UrlMapping, so the import says where and exits 3.
TEST_F(ImportCliTest, RuleFileThatDoesNotParseIsAWarnWithLineAndColumn) {
  fs::path profile = dir_ / "sapwebdisp.pfl";
  std::ofstream(profile) << "rdisp/mshost = ms\nms/http_port = 8101\n"
                            "icm/HTTP/mod_0 = PREFIX=/, FILE=rules.txt\n";
  std::ofstream(dir_ / "rules.txt") << "SetHeader X-A v\nRegRewriteUrl ^/(a /b\n";
  RunResult r = Controller("import --profile " + Quote(profile.string()) + " -o " +
                           Quote((dir_ / "out").string()));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("WARN " + (dir_ / "rules.txt").string() + ":2:15 icm/HTTP/mod_0: "),
            std::string::npos)
      << r.err;
}

TEST_F(ImportCliTest, UsageAndHelp) {
  RunResult help = Controller("import --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--profile", "--files", "-o, --output", "--namespace", "--var",
                           "--system-name", "--tls-secret", "WARN file:line parameter: why"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(Controller("import").exit_code, 2);
  EXPECT_EQ(Controller("import --profile").exit_code, 2);
  EXPECT_EQ(Controller("import --profile x --var NOEQUALS").exit_code, 2);
  EXPECT_EQ(Controller("import --profile x --namespace Bad_NS").exit_code, 2);
  EXPECT_EQ(Controller("import --profile x --bogus").exit_code, 2);
  EXPECT_NE(Controller("--help").out.find("import"), std::string::npos);
}

}  // namespace
