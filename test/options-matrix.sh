#!/bin/bash
# The tests under other values of the TROVE_* options: each option set below is one an
# operator might choose (no huge pages, huge pages always, shared heaps for every thread, one
# arena, no background thread, no purge delay, Hoard's K at its ends, no caches, the size
# classes of cache colour). Every check
# of correctness must hold under each; the checks of the default policy skip themselves there
# (testhelper.h, th_policy_default). A failure is a wrong result, a crash or a hang under an
# option a user may set, so it fails this test.
#
# usage: options-matrix.sh TESTDIR LIBTROVE [SET...]   (TESTDIR: where the test binaries are;
#        LIBTROVE: libtrove.so, preloaded for the programs not linked to trove; SET: the
#        indexes of the option sets to run, all by default)
set -u
dir=$1
lib=$(readlink -f "$2")
shift 2
sets=(
  "TROVE_THP=0"
  "TROVE_THP=2"
  "TROVE_SHARED_THREADS=1"
  "TROVE_ARENAS=1 TROVE_SHARED_THREADS=2"
  "TROVE_BACKGROUND=0"
  "TROVE_BACKGROUND=1 TROVE_PURGE_DELAY_MS=5"
  "TROVE_PURGE_DELAY_MS=0"
  "TROVE_BLOWUP_K=0 TROVE_BLOWUP_F=0.1"
  "TROVE_BLOWUP_K=4096 TROVE_BLOWUP_F=0.9"
  "TROVE_DIRTY_MAX_MB=0 TROVE_LARGE_CACHE_MB=0"
  "TROVE_COLOUR=1"
)
# each test with arguments sized to run for a second or two
tests=(
  "test_api_static"
  "test_misuse_static"
  "test_stress_static 8 10000 1"
  "test_stress_static 64 2000 1"
  "test_xthread_static 6 20000 300 300"
  "test_bursts_api 4 40 200"
  "test_ring_static 4 100"
  "test_fork_static 4"
  "test_enomem_static"
  "PRELOAD test_fork_preload 4"
  "PRELOAD test_cxx"
  "PRELOAD test_dlopen ./libtt_dltest.so"
)
# (not test_stats: its checks are of the default policy's own counters, how much it parks,
# purges and keeps, and of their timing)
pick=("$@")
[ ${#pick[@]} -eq 0 ] && pick=($(seq 0 $((${#sets[@]} - 1))))
fail=0
for i in "${pick[@]}"; do
  envs=${sets[$i]}
  for t in "${tests[@]}"; do
    pre=""
    if [ "${t%% *}" = PRELOAD ]; then pre="LD_PRELOAD=$lib"; t=${t#PRELOAD }; fi
    bin=${t%% *}
    [ -x "$dir/$bin" ] || { echo "FAIL: no $dir/$bin"; fail=1; continue; }
    start=$(date +%s.%N)
    out=$(cd "$dir" && env $envs $pre timeout 120 ./$t 2>&1)
    rc=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    if [ $rc -ne 0 ]; then
      echo "FAIL [$envs] $t: exit $rc ($secs s), output (end):"
      echo "$out" | tail -15
      fail=1
    else
      printf 'ok   [%s] %s%s (%.1f s)\n' "$envs" "${pre:+(preloaded) }" "$t" "$secs"
    fi
  done
done
[ $fail -eq 0 ] && echo "options-matrix: all passed" || echo "options-matrix: FAILED"
exit $fail
