#!/usr/bin/env bash
# Builds the newer peers that Debian does not ship, for the benchmark suite (bench/run,
# bench/apps/run, bench/icount pick up what is here): mimalloc 3 and snmalloc, into
# build/peers/ (libmimalloc3.so, libsnmallocshim.so). Their sources come from crates.io, where
# the Rust bindings carry a copy of each allocator's C/C++ sources (pinned below, checked by
# SHA-256). Safe to run again: it skips what is built. On a machine that cannot download them
# or build them it says so and exits 0: the suite then runs without these peers.
#   scripts/peers.sh              build both
#   PEERS_DIR=/path scripts/peers.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${PEERS_DIR:-build/peers}
mkdir -p "$out/src" || exit 0

# name version sha256 of the .crate (a .tar.gz)
MI_CRATE=(libmimalloc-sys 0.1.49 6a45a52f43e1c16f667ccfe4dd8c85b7f7c204fd5e3bf46c5b0db9a5c3c0b8e9)
SN_CRATE=(snmalloc-sys 0.7.6 f09c93c55f9a2b8dab75738a83c771231c5f408af65b8657433fe5bc93cc76cb)

warn() { echo "peers: $*: skipped" >&2; }

fetch() {   # name version sha256 -> unpacks into $out/src/name-version, prints that path
  local name=$1 ver=$2 sum=$3 dir="$out/src/$1-$2" file="$out/src/$1-$2.crate"
  if [ ! -d "$dir" ]; then
    if [ ! -f "$file" ]; then
      command -v curl >/dev/null 2>&1 || { warn "curl missing, cannot download $name"; return 1; }
      curl -sSfL --retry 2 -o "$file.part" "https://static.crates.io/crates/$name/$name-$ver.crate" ||
        { rm -f "$file.part"; warn "downloading $name $ver failed"; return 1; }
      mv "$file.part" "$file"
    fi
    echo "$sum  $file" | sha256sum -c --quiet - >/dev/null 2>&1 ||
      { rm -f "$file"; warn "$name $ver: checksum mismatch"; return 1; }
    tar -xzf "$file" -C "$out/src" || { warn "unpacking $name failed"; return 1; }
  fi
  echo "$dir"
}

# mimalloc 3: one translation unit (src/static.c) with the flags its CMake build uses for the
# overriding shared library (the crate leaves out the cmake/ helpers its CMakeLists needs).
if [ ! -f "$out/libmimalloc3.so" ]; then
  if src=$(fetch "${MI_CRATE[@]}"); then
    m="$src/c_src/mimalloc/v3"
    if ${CC:-gcc} -O3 -DNDEBUG -fPIC -shared -fvisibility=hidden -ftls-model=initial-exec \
         -fno-builtin-malloc -Wno-deprecated -DMI_SHARED_LIB -DMI_SHARED_LIB_EXPORT \
         -DMI_MALLOC_OVERRIDE -I"$m/include" "$m/src/static.c" -o "$out/libmimalloc3.so.part" \
         -lpthread; then
      mv "$out/libmimalloc3.so.part" "$out/libmimalloc3.so"
      v=$(sed -n 's/^#define MI_MALLOC_VERSION \([0-9]*\).*/\1/p' "$m/include/mimalloc.h")
      echo "peers: built $out/libmimalloc3.so (mimalloc $((v / 10000)).$((v / 100 % 100)).$((v % 100)))"
    else
      warn "building mimalloc 3 failed"
    fi
  fi
fi

# snmalloc: its own CMake build, the LD_PRELOAD shim only (C++20).
if [ ! -f "$out/libsnmallocshim.so" ]; then
  if src=$(fetch "${SN_CRATE[@]}"); then
    b="$out/src/snmalloc-build"
    gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    if cmake -S "$src/upstream" -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
         -DSNMALLOC_BUILD_TESTING=OFF >/dev/null &&
       cmake --build "$b" --target snmallocshim >/dev/null; then
      cp "$b/libsnmallocshim.so" "$out/libsnmallocshim.so"
      echo "peers: built $out/libsnmallocshim.so (snmalloc from $(basename "$src"))"
    else
      warn "building snmalloc failed"
    fi
  fi
fi
exit 0
