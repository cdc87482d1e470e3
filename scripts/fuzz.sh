#!/usr/bin/env bash
# Coverage-guided fuzzing of the malloc family with libFuzzer: test/test_ops.c's interpreter
# (call sequences read from bytes, each result checked against a model of the live blocks) as
# the target, trove's sources built in with AddressSanitizer and UBSan, the trove_ API called
# directly (the sanitizers keep their own malloc). Not part of the test command: CTest runs
# the same interpreter on seeded random inputs (ops_*); this is for longer runs by hand.
#
#   scripts/fuzz.sh [seconds=300] [extra libFuzzer flags...]
#   TROVE_PURGE_DELAY_MS=0 scripts/fuzz.sh 600     trove's options apply as usual
#
# Needs clang and its runtime (Debian's clang, libclang-rt-14-dev: installed here if missing).
# Builds into build-fuzz/; the corpus grows in build-fuzz/corpus, a failing input is written
# to build-fuzz/crash-* (replay: build-fuzz/fuzz_ops build-fuzz/crash-...).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
shift || true
if ! command -v clang >/dev/null || ! clang -fsanitize=fuzzer -x c - -o /dev/null \
    2>/dev/null <<<'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }'; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang libclang-rt-14-dev >/dev/null
fi
out=build-fuzz
mkdir -p "$out/corpus"
flags=(-O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -Iinclude -Isrc -Itest)
clang "${flags[@]}" -DTROVE_TEST_API -DTROVE_LIBFUZZER -ftls-model=initial-exec \
  src/os.c src/size_class.c src/segment.c src/page_heap.c src/superblock.c src/heap.c \
  src/large.c src/alloc.c src/options.c src/stats.c src/init.c test/test_ops.c \
  -lpthread -o "$out/fuzz_ops"
cd "$out"
exec ./fuzz_ops -max_total_time="$secs" -max_len=2048 -rss_limit_mb=4096 -timeout=60 \
  -print_final_stats=1 "$@" corpus
