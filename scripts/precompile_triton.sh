#!/usr/bin/env bash
# The Triton cache a GPU call carries (.tcache/triton-cache.tar.xz, which scripts/triton_cache.sh
# unpacks there), made here: the current archive, plus each --merge ARCHIVE (e.g. the one a GPU
# call's `gpu_run.sh cache` brought back), plus the kernels of LIST compiled on this machine for the
# GPU machine's Triton build (benchmarks/precompile.py; LIST "none" compiles nothing), packed again
# to fit beside .peers and .ab in what a call carries (64 MiB), the oldest kernels left out first.
# Compiling needs benchmarks/gpu-triton-build.json (the GPU's build: every gpu_run.sh call writes it
# to $OUT), or GDN_TRITON_BUILD naming another build's file. PYTHON: the project's (default python3).
#   bash scripts/precompile_triton.sh [--merge ARCHIVE]... [LIST]      (LIST: benchmarks/precompile.txt)
# GDN_TRITON_ARCHIVE: another archive than .tcache's to start from and write.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archive="${GDN_TRITON_ARCHIVE:-$root/.tcache/triton-cache.tar.xz}"     # (made if missing)
merge=()
while [ "${1:-}" = --merge ]; do
  merge+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")")
  shift 2
done
list="${1:-$root/benchmarks/precompile.txt}"
[ "$list" = none ] || list="$(cd "$(dirname "$list")" && pwd)/$(basename "$list")"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

export TRITON_CACHE_DIR="$stage/cache" GDN_TRITON_ARCHIVE="$archive"
unpacked() {          # whether triton_cache.sh unpacked archive $1 (its stamp) into the staging cache
  [ "$(cat "$TRITON_CACHE_DIR/.stamp" 2>/dev/null)" = "$(stat -c '%s %Y' "$1")" ]
}
source "$root/scripts/triton_cache.sh"             # the current archive, unpacked into the staging cache
if [ -f "$archive" ] && ! unpacked "$archive"; then
  echo "precompile_triton: could not unpack $archive" >&2
  exit 1
fi
for extra in ${merge[@]+"${merge[@]}"}; do
  if [ ! -f "$extra" ]; then
    echo "precompile_triton: no archive $extra to merge" >&2
    exit 1
  fi
  GDN_TRITON_ARCHIVE="$extra" source "$root/scripts/triton_cache.sh"
  unpacked "$extra" || { echo "precompile_triton: could not unpack $extra" >&2; exit 1; }
done
if [ "$list" != none ]; then
  "${PYTHON:-python3}" "$root/benchmarks/precompile.py" "$list" ${GDN_TRITON_BUILD:+--build "$GDN_TRITON_BUILD"}
fi

# What a call carries: 64 MiB for the working tree (git's files, and those it does not ignore),
# .tcache, .peers and .ab (the A/B snapshots) together, less a MiB.
others="$( (du -scb "$root/.peers" "$root/.ab" 2>/dev/null || true) | tail -n 1 | cut -f1)"   # (either may be missing)
tree="$(cd "$root" && git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null |
  tail -n 1 | cut -f1)"
limit="${GDN_TRITON_CARRY_MAX:-$((64 * 1048576 - ${others:-0} - ${tree:-0} - 1048576))}"
mkdir -p "$stage/out"
mapfile -t kernels < <(triton_cache_kernels)
[ ${#kernels[@]} -gt 0 ] || { echo "precompile_triton: no kernel to pack" >&2; exit 1; }
cd "$TRITON_CACHE_DIR"
keep=${#kernels[@]}
while :; do
  printf '%s\n' "${kernels[@]:0:keep}" | tar --exclude='*.tmp.pid_*' -cf - -T - | xz -6 -T0 > "$stage/out/cache.tar.xz"
  bytes="$(stat -c %s "$stage/out/cache.tar.xz")"
  [ "$bytes" -gt "$limit" ] || break
  [ "$keep" -gt 1 ] || { echo "precompile_triton: one kernel is over $limit bytes" >&2; exit 1; }
  echo "precompile_triton: $keep kernels take $bytes bytes, over $limit: the oldest tenth left out"
  keep=$((keep - (keep + 9) / 10))
done
mkdir -p "$(dirname "$archive")"
mv "$stage/out/cache.tar.xz" "$archive"
echo "precompile_triton: $keep kernels of ${#kernels[@]}, $bytes bytes in $archive"
