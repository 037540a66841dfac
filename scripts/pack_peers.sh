#!/usr/bin/env bash
# Pack the peer libraries (FLA, FlashQLA and FlashQLA's TileLang stack) for the GPU machine,
# which has Python 3.12 / torch / triton / einops but no package registry. We download the exact
# wheels for cp312 manylinux x86_64 here, unzip them into one folder (a wheel is a zip whose root
# is importable as-is for these packages) and ship that folder as .peers/peers.tar.xz (~53 MB; the
# device run carries at most 64 MiB). On the GPU machine: `source scripts/unpack_peers.sh`.
# Idempotent: the output is rebuilt from scratch on every run; .peers/ is git-ignored.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.peers"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# Versions pinned to the ones measured in shared/GUIDE.md section 2.
PEERS=(
  fla-core==0.6.0
  flash-qla==0.1.3
  tilelang==0.1.15
  apache-tvm-ffi==0.1.12
  torch-c-dlpack-ext==0.1.5
  z3-solver==4.15.4.0
)

# Target the GPU machine's interpreter, not ours. --no-deps: torch/triton/einops are already
# there. Several manylinux tags, since each wheel picks its own glibc floor.
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux1_x86_64 \
         manylinux_2_5_x86_64 any; do
  PLATFORMS+=(--platform "$p")
done

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$WORK/wheels" "${PEERS[@]}" 2> >(grep -v 'is ignored: it is neither' >&2)

mkdir -p "$WORK/site"
for whl in "$WORK"/wheels/*.whl; do
  unzip -q -o "$whl" -d "$WORK/site"
done
# Drop what no import needs: stray bytecode and wheel .data dirs (only z3's 22 MB CLI binary;
# tilelang links z3/lib/libz3.so through its rpath, which the unzipped layout keeps).
find "$WORK/site" -name __pycache__ -type d -prune -exec rm -rf {} +
rm -rf "$WORK"/site/*.data

mkdir -p "$OUT"
(cd "$WORK/site" && tar -cf - .) | xz -6 -T0 > "$OUT/peers.tar.xz.tmp"
mv "$OUT/peers.tar.xz.tmp" "$OUT/peers.tar.xz"
(cd "$WORK/wheels" && for w in *.whl; do
   printf '%s %s %s\n' "$w" "$(stat -c %s "$w")" "$(sha256sum "$w" | cut -d' ' -f1)"
 done) > "$OUT/MANIFEST.txt"

echo "wrote $OUT/peers.tar.xz ($(du -h "$OUT/peers.tar.xz" | cut -f1)), $(wc -l < "$OUT/MANIFEST.txt") wheels"
