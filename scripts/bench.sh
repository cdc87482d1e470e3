#!/usr/bin/env bash
# The main job: set-up, build, then the benchmark suite under trove, glibc and every peer
# installed (Debian's jemalloc, tcmalloc and mimalloc 2, and mimalloc 3 and snmalloc built from
# source by scripts/peers.sh where it can download them), then the single-thread instruction
# counts (bench/icount, callgrind). Extra arguments go to bench/run (e.g. --quick, --bench
# larson-small,threadtest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/peers.sh
python3 bench/run --build build "$@"
if command -v valgrind >/dev/null 2>&1; then
  python3 bench/icount --build build --out bench/results
else
  echo "note: valgrind is not installed: instruction counts (bench/icount) skipped"
fi
