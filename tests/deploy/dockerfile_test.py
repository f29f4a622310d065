#!/usr/bin/python3
"""Checks the Dockerfile by reading it (no docker engine needed).

Usage: dockerfile_test.py [unittest args]; the binaries are looked up in
$KWD_BINARY_DIR (the build tree: kwd-controller, kwd-proxy, kwd-demo-backend).
"""
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
BINARIES = ("kwd-controller", "kwd-proxy", "kwd-demo-backend")


def parse_dockerfile(path):
    """[(instruction, argument text)] with continuations joined and comments dropped."""
    instructions = []
    pending = ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.lstrip().startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            if line.strip():
                keyword, _, rest = line.strip().partition(" ")
                instructions.append((keyword.upper(), " ".join(rest.split())))
    return instructions


def stages(instructions):
    """[{'from': image, 'name': alias, 'body': [(instruction, text)]}]"""
    result = []
    for keyword, text in instructions:
        if keyword == "FROM":
            words = text.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append({"from": words[0], "name": name, "body": []})
        elif result:
            result[-1]["body"].append((keyword, text))
    return result


def apt_installed_packages(run_text):
    """Package names of every `apt-get install` in a RUN command."""
    packages = []
    for command in re.split(r"&&|;", run_text):
        words = shlex.split(command)
        if len(words) >= 2 and words[0] == "apt-get" and "install" in words:
            after = words[words.index("install") + 1:]
            packages += [w for w in after if not w.startswith("-")]
    return packages


def candidate_paths(path):
    """A library path as dpkg may have recorded it (usr-merge: /lib vs /usr/lib)."""
    candidates = {path, os.path.realpath(path)}
    for p in list(candidates):
        if p.startswith("/usr/lib/"):
            candidates.add(p[len("/usr"):])
        elif p.startswith("/lib/") or p.startswith("/lib64/"):
            candidates.add("/usr" + p)
    return candidates


def packages_of(paths):
    """{path: Debian package} from dpkg's file lists (one pass; dpkg -S per file is slow)."""
    wanted = {c: path for path in paths for c in candidate_paths(path)}
    found = {}
    info = "/var/lib/dpkg/info"
    for name in os.listdir(info):
        if not name.endswith(".list"):
            continue
        package = name[:-len(".list")].split(":")[0]
        with open(os.path.join(info, name), errors="replace") as f:
            for line in f:
                path = wanted.get(line.rstrip("\n"))
                if path is not None:
                    found[path] = package
    return found


def dependency_closure(packages):
    result = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
         "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        capture_output=True, text=True, check=True)
    names = set()
    for line in result.stdout.splitlines():
        if line and not line.startswith(" "):
            names.add(line.strip().strip("<>").split(":")[0])
    return names


class Dockerfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stages = stages(parse_dockerfile(os.path.join(SOURCE_DIR, "Dockerfile")))
        cls.build = cls.stages[0]
        cls.runtime = cls.stages[-1]

    def runs(self, stage):
        return [text for keyword, text in stage["body"] if keyword == "RUN"]

    def test_stages_are_debian_bookworm(self):
        self.assertEqual(len(self.stages), 2)
        self.assertEqual((self.build["from"], self.build["name"]), ("debian:bookworm", "build"))
        self.assertEqual((self.runtime["from"], self.runtime["name"]),
                         ("debian:bookworm-slim", "runtime"))

    def test_build_stage_reuses_install_deps_and_builds_release_without_tests(self):
        runs = " ".join(self.runs(self.build))
        self.assertIn("KWD_BUILD_ONLY=1 ./scripts/install-deps.sh", runs)
        self.assertIn("-DCMAKE_BUILD_TYPE=Release", runs)
        self.assertIn("-DKWD_BUILD_TESTS=OFF", runs)
        self.assertIn("-G Ninja", runs)
        for binary in BINARIES:
            self.assertIn(binary, runs)
        # The options named are the project's own.
        with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
            options = set(re.findall(r"option\((KWD_\w+)", f.read()))
        for option in re.findall(r"-D(KWD_\w+)=", runs):
            self.assertIn(option, options)

    def test_runtime_runs_as_non_root(self):
        users = [text for keyword, text in self.runtime["body"] if keyword == "USER"]
        self.assertTrue(users)
        user = users[-1].split(":")[0]
        self.assertNotIn(user, ("root", "0"))
        self.assertEqual(users[-1], "65532:65532")
        runs = " ".join(self.runs(self.runtime))
        self.assertRegex(runs, r"useradd [^&]*--uid 65532")
        self.assertRegex(runs, r"groupadd [^&]*--gid 65532")

    def test_runtime_copies_the_three_binaries_from_the_build_stage(self):
        copies = [text for keyword, text in self.runtime["body"] if keyword == "COPY"]
        copied = {}
        for text in copies:
            words = text.split()
            self.assertEqual(words[0], "--from=build", text)
            source, target = words[1], words[-1]
            copied[os.path.basename(source)] = target
        for binary in BINARIES:
            self.assertEqual(copied.get(binary), f"/usr/local/bin/{binary}")

    def test_runtime_has_no_dev_packages_and_cleans_apt_lists(self):
        packages = [p for r in self.runs(self.runtime) for p in apt_installed_packages(r)]
        self.assertIn("ca-certificates", packages)
        for p in packages:
            self.assertFalse(p.endswith("-dev"), p)
        self.assertIn("rm -rf /var/lib/apt/lists/*", " ".join(self.runs(self.runtime)))

    def test_runtime_packages_exist(self):
        packages = [p for r in self.runs(self.runtime) for p in apt_installed_packages(r)]
        self.assertGreaterEqual(len(packages), 6)
        for p in packages:
            result = subprocess.run(["apt-cache", "show", "--no-all-versions", p],
                                    capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, f"apt-cache knows no package {p}")
            self.assertIn(f"Package: {p}", result.stdout)

    def loaded_libraries(self):
        """Paths of every shared library the binaries load (ldd)."""
        libraries = set()
        for binary in BINARIES:
            path = os.path.join(BINARY_DIR, binary)
            self.assertTrue(os.access(path, os.X_OK), f"build {path} first")
            ldd = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
            self.assertNotIn("not found", ldd, binary)
            for line in ldd.splitlines():
                match = re.match(r"\s*(\S+) => (/\S+)", line) or re.match(r"\s*(/\S+) \(", line)
                if match:  # linux-vdso has no file: it is in the kernel
                    libraries.add(match.group(match.lastindex))
        return libraries

    def test_runtime_packages_cover_every_shared_library(self):
        packages = [p for r in self.runs(self.runtime) for p in apt_installed_packages(r)]
        available = dependency_closure(packages)
        libraries = self.loaded_libraries()
        owners = packages_of(libraries)
        self.assertEqual(sorted(libraries - set(owners)), [], "libraries no package ships")
        needed = {}
        for library, package in owners.items():
            needed.setdefault(package, set()).add(os.path.basename(library))
        self.assertIn("libc6", needed)
        missing = {p: sorted(libs) for p, libs in needed.items() if p not in available}
        self.assertEqual(missing, {}, "libraries whose packages the runtime stage lacks")

    def test_runtime_installs_no_library_the_binaries_do_not_load(self):
        # Each library package ships a library some binary loads (cpprestsdk
        # was left behind once kwd served its admin ports itself).
        packages = [p for r in self.runs(self.runtime) for p in apt_installed_packages(r)]
        loaded = set(packages_of(self.loaded_libraries()).values())
        unused = sorted(p for p in packages if p != "ca-certificates" and p not in loaded)
        self.assertEqual(unused, [], "runtime packages no binary loads a library of")


def dockerignore_patterns():
    with open(os.path.join(SOURCE_DIR, ".dockerignore")) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def ignored(path, patterns):
    """Docker's rule for these simple patterns: a pattern matches the path or a parent folder."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(prefix, pattern) or
               (pattern.startswith("**/") and fnmatch.fnmatchcase(parts[-1], pattern[3:]))
               for pattern in patterns for prefix in prefixes)


class BuildContext(unittest.TestCase):
    """The build stage's cmake configure works on what .dockerignore lets into the context."""

    def test_configure_with_the_dockerfile_flags(self):
        runs = [text for stage in stages(parse_dockerfile(os.path.join(SOURCE_DIR, "Dockerfile")))[:1]
                for keyword, text in stage["body"] if keyword == "RUN" and "cmake -S" in text]
        self.assertEqual(len(runs), 1)
        configure = shlex.split(runs[0].split("&&")[0])
        self.assertEqual(configure[:5], ["cmake", "-S", ".", "-B", "/build"])
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=SOURCE_DIR,
                                capture_output=True, text=True, check=True).stdout.splitlines()
        patterns = dockerignore_patterns()
        context = [p for p in listed if not ignored(p, patterns)]
        self.assertIn("CMakeLists.txt", context)
        self.assertFalse([p for p in context if p.startswith("build/") or p.startswith("tests/")])
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "src")
            for path in context:
                origin = os.path.join(SOURCE_DIR, path)
                if not os.path.isfile(origin):
                    continue  # deleted in the work tree
                os.makedirs(os.path.dirname(os.path.join(source, path)), exist_ok=True)
                shutil.copy2(origin, os.path.join(source, path))
            argv = ["cmake", "-S", source, "-B", os.path.join(tmp, "build"), *configure[5:]]
            result = subprocess.run(argv, capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            targets = subprocess.run(["ninja", "-C", os.path.join(tmp, "build"), "-t", "targets", "all"],
                                     capture_output=True, text=True, check=True).stdout
            for binary in BINARIES:
                self.assertRegex(targets, rf"(?m)^{re.escape(binary)}:")


class DockerIgnore(unittest.TestCase):
    def test_build_trees_and_git_stay_out_of_the_context(self):
        with open(os.path.join(SOURCE_DIR, ".dockerignore")) as f:
            patterns = {line.strip() for line in f if line.strip() and not line.startswith("#")}
        for pattern in (".git", "build", "build-*"):
            self.assertIn(pattern, patterns)
        # Nothing the build stage needs is ignored.
        for needed in ("scripts", "proto", "common", "controller", "dataplane", "demo",
                       "CMakeLists.txt", "cmake"):
            self.assertNotIn(needed, patterns)


if __name__ == "__main__":
    unittest.main()
