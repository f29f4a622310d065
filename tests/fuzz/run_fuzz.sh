#!/bin/sh
# Usage: tests/fuzz/run_fuzz.sh NAME SECONDS
# Builds tests/fuzz/NAME_fuzz.cc with clang + libFuzzer (ASan, UBSan) in
# build-fuzz/ (override: KWD_FUZZ_BUILD_DIR) and fuzzes it for SECONDS,
# starting from the checked-in seeds in tests/fuzz/corpus/NAME. New inputs go
# to build-fuzz/corpus/NAME, crashes to build-fuzz/artifacts/. Exit status is
# libFuzzer's: non-zero when it found a crash or a failed check.
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 NAME SECONDS" >&2
  exit 2
fi
name=$1
seconds=$2
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${KWD_FUZZ_BUILD_DIR:-$source_dir/build-fuzz}

if [ ! -f "$source_dir/tests/fuzz/${name}_fuzz.cc" ]; then
  echo "no fuzz target tests/fuzz/${name}_fuzz.cc" >&2
  exit 2
fi

# Instrument every library for coverage, not only the fuzz entry point.
sanitizers="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer"
if [ ! -f "$build_dir/build.ninja" ]; then
  mkdir -p "$build_dir"
  cmake -S "$source_dir" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_FLAGS="$sanitizers" -DCMAKE_CXX_FLAGS="$sanitizers" \
    -DKWD_BUILD_FUZZ=ON -DKWD_BUILD_TESTS=ON >"$build_dir/configure.log" 2>&1 ||
    { cat "$build_dir/configure.log" >&2; exit 1; }
fi
cmake --build "$build_dir" -j"${KWD_FUZZ_JOBS:-2}" --target "${name}_fuzz"

work_corpus=$build_dir/corpus/$name
mkdir -p "$work_corpus" "$build_dir/artifacts"
seeds=$source_dir/tests/fuzz/corpus/$name
[ -d "$seeds" ] || seeds=
exec "$build_dir/${name}_fuzz" "$work_corpus" $seeds \
  -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$build_dir/artifacts/$name-"
