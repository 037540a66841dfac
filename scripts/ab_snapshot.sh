#!/usr/bin/env bash
# Snapshot the gdn package of a git revision beside the working tree's, for timing the two in one
# process on the GPU machine (benchmarks/snapshots.py): gdn/ of REV goes to .ab/gdn_NAME (NAME
# defaults to REV's short hash), a package of its own whose kernels compile and cache apart from
# ours. .ab/ is git-ignored: name it in the device call's carry. Then a config "ab:NAME" (or
# "ab:NAME/<config of that revision>") in gpu_check.py's sections runs the snapshot.
# Usage: bash scripts/ab_snapshot.sh REV [NAME]   (AB_DIR: another folder than .ab, for the tests)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REV="${1:?usage: ab_snapshot.sh REV [NAME]}"
NAME="${2:-$(git -C "$ROOT" rev-parse --short "$REV")}"
[[ "$NAME" =~ ^[A-Za-z0-9_]+$ ]] || { echo "NAME must be letters, digits or _ (a package name), got '$NAME'" >&2; exit 2; }
AB_DIR="${AB_DIR:-$ROOT/.ab}"
DEST="$AB_DIR/gdn_$NAME"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

git -C "$ROOT" archive "$REV" gdn | tar -x -C "$WORK"
rm -rf "$DEST"
mkdir -p "$AB_DIR"
mv "$WORK/gdn" "$DEST"
echo "$REV $(git -C "$ROOT" rev-parse "$REV")" > "$DEST/SNAPSHOT"
echo "gdn of $REV at $DEST: config names ab:$NAME or ab:$NAME/<config>"
