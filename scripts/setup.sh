#!/usr/bin/env bash
# Installs what trove's build, tests and benchmarks need on a fresh Debian machine, then
# configures and builds the project in build/. Safe to run again: it skips what is there.
#   scripts/setup.sh            build tools, peers (jemalloc, tcmalloc, mimalloc), matplotlib
#   TROVE_SETUP_APPS=1 scripts/setup.sh   also the real programs bench/apps/run times (sqlite3,
#                               node, ruby, Ghostscript, z3, RocksDB's db_bench)
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for cmd in cmake ninja gcc g++ python3 valgrind; do
  command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$cmd")
done
pkgs=()
[ ${#need_apt[@]} -gt 0 ] && pkgs+=(cmake ninja-build gcc g++ python3 valgrind)
[ -x /usr/bin/time ] || pkgs+=(time)
lib=/usr/lib/x86_64-linux-gnu
[ -e $lib/libjemalloc.so.2 ] || pkgs+=(libjemalloc2)
[ -e $lib/libtcmalloc_minimal.so.4 ] || pkgs+=(libtcmalloc-minimal4)
[ -e $lib/libmimalloc.so.2 ] || pkgs+=(libmimalloc2.0)
command -v gzip >/dev/null 2>&1 || pkgs+=(gzip)
if [ "${TROVE_SETUP_APPS:-0}" = 1 ]; then
  for app in sqlite3:sqlite3 node:nodejs ruby:ruby gs:ghostscript z3:z3 db_bench:rocksdb-tools; do
    command -v "${app%%:*}" >/dev/null 2>&1 || pkgs+=("${app#*:}")
  done
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${pkgs[*]}"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null ||
      echo "setup: warning: apt-get could not install all of: ${pkgs[*]}"
  else
    echo "setup: warning: missing ${pkgs[*]} and not root: peers that are missing are skipped"
  fi
fi
if [ "${TROVE_SETUP_PLOTS:-1}" = 1 ] && ! python3 -c 'import matplotlib' 2>/dev/null; then
  python3 -m pip install -q matplotlib 2>/dev/null ||
    echo "setup: warning: matplotlib not installed: benchmark plots are skipped"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
