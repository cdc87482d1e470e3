#!/usr/bin/env bash
# The test command: set-up, build, the whole CTest suite, then the stress tests again in
# AddressSanitizer+UBSan and ThreadSanitizer builds (which call the trove_ API directly).
set -euo pipefail
cd "$(dirname "$0")/.."
TROVE_SETUP_PLOTS=0 scripts/setup.sh
jobs=$(nproc)
status=0
(cd build && ctest --output-on-failure -j"$jobs" --timeout 600 --repeat until-pass:2) || status=1
if [ "${TROVE_SKIP_SANITIZERS:-0}" != 1 ]; then
  for san in address undefined thread; do
    echo "== sanitizer build: $san"
    cmake -S . -B "build-$san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DTROVE_SANITIZE="$san" >/dev/null
    cmake --build "build-$san"
    (cd "build-$san" && ctest --output-on-failure -j"$jobs" --timeout 600 --repeat until-pass:2) || status=1
  done
fi
exit $status
