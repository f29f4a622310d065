# kwd: the README's commands. `make test` is what CI runs (.ci/run).
BUILD_DIR  ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 10
CMAKE_FLAGS ?=
# ccache shares objects between clones when their paths are made relative to
# the checkout (CMakeLists.txt maps the debug info's directories the same way).
export CCACHE_BASEDIR ?= $(CURDIR)

.PHONY: all deps configure build run test unit fuzz-smoke bench format clean help

all: build

help:
	@echo "make build       build build/kwd-controller and build/kwd-proxy"
	@echo "make run         start the quickstart: demo backends and a proxy on 127.0.0.1:8080 (admin :9901)"
	@echo "make test        install missing Debian packages, build, run every test (ctest) and a short fuzz run"
	@echo "make bench       build and run every benchmark, kwd vs HAProxy vs nginx; a summary table"
	@echo "                 at the end (ROUNDS=3 DURATION=5s SHAPES=... SKIP=...: bench/README.md)"
	@echo "make format      clang-format the sources"

deps:
	@./scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what running needs: build packages and curl (no test tools), the three
# binaries (an existing build directory is reused as it is configured; a new one
# is configured without tests). Ctrl-C stops everything and exits 0.
run:
	@KWD_RUN=1 ./scripts/install-deps.sh
	@test -f $(BUILD_DIR)/CMakeCache.txt || cmake -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKWD_BUILD_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target kwd-controller kwd-proxy kwd-demo-backend
	@./scripts/run-quickstart.sh $(BUILD_DIR)

unit: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 300

# A short libFuzzer run per target on top of the corpus replays that ctest runs.
fuzz-smoke: deps
	@for t in $$(ls tests/fuzz/*_fuzz.cc 2>/dev/null | xargs -n1 basename | sed 's/_fuzz.cc//'); do \
	  ./tests/fuzz/run_fuzz.sh $$t $(FUZZ_SECONDS) || exit 1; \
	done

test: unit fuzz-smoke

bench: deps
	@KWD_BENCH_DEPS=1 ./scripts/install-deps.sh
	@cmake -S . -B $(BUILD_DIR)-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DKWD_BUILD_TESTS=OFF -DKWD_BUILD_BENCH=ON >/dev/null
	@cmake --build $(BUILD_DIR)-bench -j $(JOBS)
	@./scripts/run-benchmarks.sh $(BUILD_DIR)-bench

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	@rm -rf $(BUILD_DIR) $(BUILD_DIR)-bench build-fuzz
