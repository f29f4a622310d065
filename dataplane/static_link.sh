#!/bin/sh
# Link launcher for kwd-proxy (RULE_LAUNCH_LINK, option KWD_PROXY_STATIC_DEPS):
# runs the link command CMake made with every third-party library that has a
# static archive next to its shared one (gRPC, protobuf, abseil, OpenSSL, re2,
# c-ares, zlib) taken from the archive instead, libstdc++/libgcc static, no
# PIE, and unused sections dropped. libc, libm and the other glibc libraries
# stay shared.
#
# Why: RSS counts every resident page of a mapped library, and a library that
# other processes use is wholly in the page cache, so the kernel's fault-around
# maps most of it: an idle kwd-proxy had 12.4 MiB of shared-library pages
# resident (libcrypto 3.4, libprotobuf 2.6, libgrpc 2.1 though unused with
# --snapshot, libstdc++ 1.5). Linked statically only the code kwd calls is in
# the binary, and no PIE means no relocated copies of vtables.
#
# If a library other than glibc's would stay shared (no archive for it), the
# command runs unchanged: a shared C++ library next to a static libstdc++
# would load a second one.
set -eu
keep_shared="c m dl rt pthread gcc_s atomic"
out=""
first_lib=""
missing=""
for arg in "$@"; do
  case $arg in
    *.so | *.so.[0-9]*)
      base=${arg##*/}
      name=${base%%.so*}
      archive="${arg%/*}/$name.a"
      if [ -f "$archive" ]; then
        arg=$archive
      else
        missing="$missing $arg"
      fi
      [ -n "$first_lib" ] || { first_lib=1; out="$out -Wl,--start-group"; }
      ;;
    -l*)
      lib=${arg#-l}
      case " $keep_shared " in
        *" $lib "*) ;;
        *)
          archive=""
          for dir in /usr/lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
            [ -f "$dir/lib$lib.a" ] && { archive="$dir/lib$lib.a"; break; }
          done
          if [ -n "$archive" ]; then arg=$archive; else missing="$missing $arg"; fi
          ;;
      esac
      [ -n "$first_lib" ] || { first_lib=1; out="$out -Wl,--start-group"; }
      ;;
    *.a)
      [ -n "$first_lib" ] || { first_lib=1; out="$out -Wl,--start-group"; }
      ;;
  esac
  out="$out $arg"
done
if [ -n "$missing" ]; then
  echo "static_link.sh: no static archive for$missing; linking kwd-proxy against shared libraries" >&2
  exec "$@"
fi
[ -z "$first_lib" ] || out="$out -Wl,--end-group"
# With lld: the functions an idle proxy runs placed together, in the order of
# kwd-proxy.order (made by symbol_order.sh, which says why), and static
# initialisers and cold code in sections of their own (.text.startup,
# .text.unlikely) as GNU ld's default script does. Idle RSS with a
# 100-group snapshot 10.4 -> 8.1 MiB (bench/memory_bench.sh). Without lld the
# link is the same, unordered.
order="$(cd "$(dirname "$0")" && pwd)/kwd-proxy.order"
layout=""
if command -v ld.lld >/dev/null 2>&1 && [ -f "$order" ]; then
  layout="-fuse-ld=lld -Wl,-z,keep-text-section-prefix -Wl,--symbol-ordering-file=$order"
  layout="$layout -Wl,--no-warn-symbol-ordering"
fi
# shellcheck disable=SC2086  # the link command's words, none with spaces
exec $out -static-libstdc++ -static-libgcc -no-pie -Wl,--gc-sections $layout
