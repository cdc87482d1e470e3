#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libtrove.so (design: a drop-in replacement for any
# dynamically linked program).
#   test_preload.sh <libtrove.so> <test_cxx> <test_dlopen> <libtrove_dltest.so>
# - python3 (pymalloc, and PYTHONMALLOC=malloc so that every object goes through malloc):
#   8 threads building and dropping dicts, lists and strings; inside Python, trove_version
#   resolves through ctypes and returns a string
# - sort and gzip/gunzip on ~20 MB of generated data: output identical to the run without
#   trove (and the TROVE_HEAP_MAP file written at exit shows that trove was the allocator)
# - bash, itself preloaded, doing string work
# - test_cxx (C++ containers, threads, every operator new/delete form, bad_alloc)
# - test_dlopen (a library that allocates in its constructor, loaded and closed many times)
# - TROVE_SHOW_STATS=1 /bin/true exits 0 and prints statistics
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 <libtrove.so> <test_cxx> <test_dlopen> <libtrove_dltest.so>" >&2; exit 2; }
lib=$(readlink -f "$1")
cxx=$2
dlo=$3
dll=$4
[ -f "$lib" ] || { echo "FAIL: no $lib" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trove-preload.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }
ok() { echo "ok $*"; }
pre() { env LD_PRELOAD="$lib" "$@"; }

# ---- python ----
pycode='
import ctypes, random, sys, threading
lib = ctypes.CDLL(None)
f = lib.trove_version            # AttributeError unless trove is loaded
f.restype = ctypes.c_char_p
v = f()
assert isinstance(v, bytes) and len(v) > 0, v
errors = []
def work(seed):
    try:
        r = random.Random(seed)
        keep = []
        for it in range(60):
            d = {(str(i) + "-") * r.randint(1, 5): [i] * r.randint(0, 30) for i in range(800)}
            l = ["x" * r.randint(0, 400) + str(i) for i in range(800)]
            s = "".join(l[: r.randint(0, 800)])
            t = tuple(bytearray(r.randint(0, 5000)) for _ in range(20))
            keep.append((d, s))
            if len(keep) > 5:
                keep.pop(r.randrange(len(keep)))
            assert len(d) == 800 and all(e.endswith(str(i)) for i, e in enumerate(l))
            del d, l, s, t
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
assert not errors, errors
print("python", sys.version.split()[0], "with", v.decode())
'
if command -v python3 >/dev/null 2>&1; then
  for pm in pymalloc malloc; do
    if out=$(pre PYTHONMALLOC=$pm python3 -c "$pycode" 2>&1); then
      ok "python3 (PYTHONMALLOC=$pm): $out"
    else
      fail "python3 under trove (PYTHONMALLOC=$pm): $out"
    fi
  done
else
  echo "skip: no python3"
fi

# ---- sort, gzip, gunzip on ~20 MB ----
awk 'BEGIN { x = 12345
  for (i = 0; i < 600000; i++) {
    x = (x * 69069 + 1) % 4294967296
    printf "%010d %s line %d %s\n", x, substr("abcdefghijklmnopqrstuvwxyz", x % 26 + 1, x % 7 + 1), i, (i % 3 ? "" : "tail")
  } }' >"$tmp/data"
size=$(wc -c <"$tmp/data")
[ "$size" -gt 15000000 ] || fail "generated only $size bytes"
sort -S 64M --parallel=2 "$tmp/data" >"$tmp/sorted.ref"
# (sort closes stderr before exit, so trove's presence shows as its heap map file)
if pre TROVE_HEAP_MAP="$tmp/sort.json" sort -S 64M --parallel=2 "$tmp/data" >"$tmp/sorted" 2>"$tmp/sort.err"; then
  if ! cmp -s "$tmp/sorted" "$tmp/sorted.ref"; then fail "sort under trove: output differs"
  elif ! [ -s "$tmp/sort.json" ]; then fail "sort: trove was not in use (no TROVE_HEAP_MAP file)"
  else ok "sort ($size bytes): identical output"; fi
else
  fail "sort under trove failed: $(tail -5 "$tmp/sort.err")"
fi
sort -n -r -k3 -S 8M "$tmp/data" >"$tmp/sorted2.ref"
if pre sort -n -r -k3 -S 8M "$tmp/data" >"$tmp/sorted2" && cmp -s "$tmp/sorted2" "$tmp/sorted2.ref"; then
  ok "sort -n -r -k3 with a small buffer (temporary files): identical output"
else
  fail "sort -n -r -k3 under trove: failed or output differs"
fi
gzip -n -6 -c "$tmp/data" >"$tmp/data.gz.ref"
if pre gzip -n -6 -c "$tmp/data" >"$tmp/data.gz" && cmp -s "$tmp/data.gz" "$tmp/data.gz.ref"; then
  ok "gzip: identical output"
else
  fail "gzip under trove: failed or output differs"
fi
if pre gunzip -c "$tmp/data.gz.ref" >"$tmp/data.out" && cmp -s "$tmp/data.out" "$tmp/data"; then
  ok "gunzip: identical output"
else
  fail "gunzip under trove: failed or output differs"
fi

# ---- bash itself ----
if out=$(pre bash -c 's=""; for i in $(seq 1 3000); do s="$s$i,"; a[$i]="$s"; done; unset a; echo ${#s}' 2>&1) &&
   [ "$out" = 13893 ]; then
  ok "bash string work"
else
  fail "bash under trove: $out"
fi

# ---- C++ ----
if out=$(pre "$cxx" 2>&1); then ok "test_cxx: $(echo "$out" | tail -1)"; else fail "test_cxx under trove:
$out"; fi

# ---- dlopen ----
if out=$(pre "$dlo" "$dll" 2>&1); then ok "$out"; else fail "test_dlopen under trove:
$out"; fi

# ---- TROVE_SHOW_STATS=1 true ----
if pre TROVE_SHOW_STATS=1 /bin/true 2>"$tmp/true.err"; then
  if grep -q "trove" "$tmp/true.err"; then ok "TROVE_SHOW_STATS=1 true: exit 0, statistics printed"
  else fail "TROVE_SHOW_STATS=1 true printed no statistics"; fi
else
  fail "TROVE_SHOW_STATS=1 true exited with $?"
fi

if [ $failed -ne 0 ]; then echo "test_preload: FAILED" >&2; exit 1; fi
echo "test_preload: all checks passed"
