#!/usr/bin/env bash
# The suite on a machine with more cores than this one, which has no compiler or package
# registry of ours: build here, carry the build, run there.
#
#   scripts/many-cores.sh prepare [--perf]
#       here: a Release build of trove and the benchmark programs, and the peers' libraries
#       (Debian's from /usr/lib, mimalloc 3 and snmalloc from scripts/peers.sh), copied into
#       .peers/ (ignored by git; about 3 MiB), which the other machine gets as a carried path.
#       --perf: this machine's perf and the libraries it links (not the C library's), into
#       .peers/perf (about 30 MiB); the lent machine has no perf, and there
#         LD_LIBRARY_PATH=.peers/perf .peers/perf/perf record -e cpu-clock -o /tmp/x.data -- \
#           env -u LD_LIBRARY_PATH LD_PRELOAD=.peers/build/libtrove.so .peers/build/bench/...
#       samples on the clock (it has no hardware counters either).
#   scripts/many-cores.sh run OUTDIR [BUDGET_S] [bench/run options...]
#       there: bench/run on the programs in .peers/, one benchmark at a time (the issue's four
#       first), until BUDGET_S seconds (default 400) have passed; then everything, with the
#       machine's description (CPUs, model, transparent huge page settings), is packed into
#       OUTDIR/many-cores.tgz: one file, since the device tool brings back only a few. A
#       benchmark cut short by the budget leaves its progress lines (each run's value) in its
#       .err file. Options after the budget go to bench/run (default: --threads 1,2,4,8,16
#       --reps 3 --scale 0.3 --timeout 40); BENCHES="a b c" picks the benchmarks.
#       Back here: `bench/run --scoreboard DIR` and `bench/run --replot DIR --cores 16` on a
#       folder holding the benchmarks' CSV files joined as latest.csv.
#
# docs/BENCHMARKS.md ("16 cores") has the tables such runs gave, and how they were taken.
set -euo pipefail
cd "$(dirname "$0")/.."
P=.peers

case "${1:-}" in
prepare)
  cmake -S . -B build-many -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-many -j"$(nproc)" >/dev/null
  [ -f build/peers/libmimalloc3.so ] || bash scripts/peers.sh
  rm -rf "$P" && mkdir -p "$P/build/bench" "$P/build/peers" "$P/lib"
  cp build-many/libtrove.so "$P/build/"
  for f in build-many/bench/*; do
    if [ -f "$f" ] && [ -x "$f" ]; then cp "$f" "$P/build/bench/"; fi
  done
  cp build/peers/*.so "$P/build/peers/" 2>/dev/null || true
  for l in libjemalloc.so.2 libtcmalloc_minimal.so.4 libmimalloc.so.2; do
    if [ -e "/usr/lib/x86_64-linux-gnu/$l" ]; then cp -L "/usr/lib/x86_64-linux-gnu/$l" "$P/lib/"; fi
  done
  if [ "${2:-}" = --perf ]; then
    perf=$(readlink -f "$(command -v perf)")
    mkdir -p "$P/perf" && cp -L "$perf" "$P/perf/perf"
    ldd "$perf" | awk '/=>/ {print $3}' | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
      while read -r l; do cp -L "$l" "$P/perf/"; done
  fi
  du -sh "$P"
  echo "carry [\"$P\"] and run: scripts/many-cores.sh run \$OUT"
  ;;
run)
  out=${2:?usage: scripts/many-cores.sh run OUTDIR [BUDGET_S] [bench/run options]}
  shift 2
  budget=400
  if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then budget=$1; shift; fi
  opts=("$@")
  if [ ${#opts[@]} -eq 0 ]; then opts=(--threads 1,2,4,8,16 --reps 3 --scale 0.3 --timeout 40); fi
  work=$(mktemp -d)
  {
    echo "cpus: $(nproc)"
    grep -m1 "model name" /proc/cpuinfo || true
    for f in enabled defrag; do
      echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>/dev/null || echo '?')"
    done
    uname -a
    ldd --version 2>&1 | sed -n 1p  # sed reads it all: head would leave ldd a SIGPIPE, fatal under pipefail
  } >"$work/machine.txt"
  benches=${BENCHES:-"larson-small threadtest shbench-small cache-scratch larson-large shbench-large
    mtmalloctest xmalloc cache-thrash active-false passive-false mstress blowup-rr blowup-pc
    handoff-in handoff-out rptest workset-wide phases-small aligned reallocgrow largebuf idlers"}
  start=$SECONDS
  for b in $benches; do
    if [ $((SECONDS - start)) -ge "$budget" ]; then
      echo "budget spent: $b and after not run" | tee -a "$work/machine.txt"
      break
    fi
    left=$((budget - (SECONDS - start)))
    PYTHONUNBUFFERED=1 timeout "$left" python3 bench/run --build "$P/build" --no-build \
      --trove "$P/build/libtrove.so" --lib-dir "$P/lib" --peer-dir "$P/build/peers" \
      --bench "$b" "${opts[@]}" --no-plots --markdown --out "$work/$b" \
      >"$work/$b.txt" 2>"$work/$b.err" || echo "$b: cut short or failed" >>"$work/machine.txt"
    echo "$b done at $((SECONDS - start)) s"
  done
  mkdir -p "$out"
  tar czf "$out/many-cores.tgz" -C "$work" .
  echo "wrote $out/many-cores.tgz"
  ;;
*)
  sed -n 2,20p "$0"
  exit 2
  ;;
esac
