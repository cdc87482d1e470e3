#!/usr/bin/env bash
# The main job: set-up, build, then the benchmark suite under trove, glibc and every peer
# installed. Extra arguments go to bench/run (e.g. --quick, --bench larson-small,threadtest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec python3 bench/run --build build "$@"
