# Run ON the GPU machine: `source scripts/triton_cache.sh` (benchmarks/gpu_run.sh does).
# A fresh GPU machine compiles every kernel variant again: most of a first call's time in the tests
# and the correct section. This keeps Triton's cache between sessions:
#   - Triton's cache goes to $TRITON_CACHE_DIR (default /tmp/gdn_triton_cache), binaries only
#     (TRITON_STORE_BINARY_ONLY: each kernel's cubin, metadata and source, all a cache hit loads;
#     this setting is not part of Triton's cache key);
#   - the archive .tcache/triton-cache.tar.xz (git-ignored; carry .tcache) is unpacked into it
#     when it changed since the last unpack on this machine;
#   - `save_triton_cache` writes the cache to $OUT/triton-cache.tar.xz (a device call brings back
#     files of at most 16 MiB; past that, only the kernels compiled on this machine): copy it to
#     .tcache/ here, and the next session's calls carry it.
# A kernel whose source changed misses (the source is part of the key) and is compiled as before.
# Sourced, so no `set -e` (it would leak into the caller).
_gdn_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "${TRITON_CACHE_DIR:-/tmp/gdn_triton_cache}"
export TRITON_CACHE_DIR="$(cd "${TRITON_CACHE_DIR:-/tmp/gdn_triton_cache}" && pwd)"     # (absolute: group files name it)
export TRITON_STORE_BINARY_ONLY=1
_tcache_archive="${GDN_TRITON_ARCHIVE:-$_gdn_root/.tcache/triton-cache.tar.xz}"

_tcache_groups_here() {
  # Each kernel's group file names its files by absolute path, in the cache where it was packed
  # (another folder, or the one benchmarks/precompile.py compiled into): named in this one. Written
  # in place, so that the kernels' folders keep their times (the newest are kept first, and
  # save_triton_cache's "new" are those compiled after the unpack).
  "${PYTHON:-python3}" - "$TRITON_CACHE_DIR" <<'EOF_PY'
import json, os, sys
root = sys.argv[1]
for key in os.listdir(root):
    folder = os.path.join(root, key)
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.startswith("__grp__") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                group = json.load(f)
            named = group.get("child_paths") or {}        # (none: Triton reads the group as no entry)
            paths = {child: os.path.join(folder, os.path.basename(path)) for child, path in named.items()}
            if paths != named:
                with open(os.path.join(folder, name), "w") as f:
                    json.dump({"child_paths": paths}, f)
EOF_PY
}
if [ -f "$_tcache_archive" ]; then
  _tcache_stamp="$(stat -c '%s %Y' "$_tcache_archive")"
  if [ "$(cat "$TRITON_CACHE_DIR/.stamp" 2>/dev/null)" != "$_tcache_stamp" ]; then
    tar -xJf "$_tcache_archive" -C "$TRITON_CACHE_DIR" && _tcache_groups_here && echo "$_tcache_stamp" > "$TRITON_CACHE_DIR/.stamp" &&
      echo "triton_cache: $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l) kernels from $_tcache_archive"
  fi
fi
unset _gdn_root _tcache_archive _tcache_stamp
unset -f _tcache_groups_here

triton_cache_kernels() {
  # The cache's kernels, one folder each (named by its key), as ./KEY lines, newest first: so packed,
  # alike kernels lie together and xz packs them a fifth smaller. Arguments: find's tests (-newer F).
  (cd "$TRITON_CACHE_DIR" && find . -mindepth 1 -maxdepth 1 -type d "$@" -printf '%T@ ./%P\n' | sort -rn |
     cut -d' ' -f2-)
}

save_triton_build() {
  # $OUT/triton-build.json: this machine's Triton build (benchmarks/triton_build.py). Kept here as
  # benchmarks/gpu-triton-build.json, it lets scripts/precompile_triton.sh compile for this machine.
  local build="${OUT:-/tmp/gdn_out}/triton-build.json"
  mkdir -p "$(dirname "$build")"
  if "${PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/../benchmarks/triton_build.py" > "$build.tmp"; then
    mv "$build.tmp" "$build"
  else
    rm -f "$build.tmp"
    echo "triton_cache: no triton-build.json" >&2
    return 1
  fi
}

save_triton_cache() {
  # The whole cache; past the limit (16 MiB) only the kernels this machine compiled (newer than the
  # unpack's stamp), so that an archive that grew with sessions still brings back what is new.
  local out="${OUT:-/tmp/gdn_out}/triton-cache.tar.xz" limit="${GDN_TRITON_CACHE_MAX:-16777216}"
  mkdir -p "$(dirname "$out")"
  out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"         # (packed from inside the cache)
  local entries dirs
  for entries in all new; do
    if [ "$entries" = all ]; then
      dirs="$(triton_cache_kernels)"
    else
      dirs="$(triton_cache_kernels -newer .stamp 2>/dev/null)"
      [ -n "$dirs" ] || break      # (no unpacked archive, or no kernel compiled since)
    fi
    if ! (set -o pipefail
          cd "$TRITON_CACHE_DIR" &&
            { [ -z "$dirs" ] || printf '%s\n' "$dirs"; } | tar --exclude='*.tmp.pid_*' -cf - -T - | xz -6 -T0 > "$out") ||
         [ ! -s "$out" ]; then
      echo "triton_cache: packing the cache failed; nothing kept" >&2
      rm -f "$out"
      return 1
    fi
    local bytes
    bytes="$(stat -c %s "$out")"
    if [ "$bytes" -le "$limit" ]; then
      echo "triton_cache: $(tar -tJf "$out" | grep -c '\.cubin$') kernels ($entries), $bytes bytes in $out"
      return 0
    fi
    echo "triton_cache: $entries: $bytes bytes, over the $limit a device call brings back" >&2
  done
  rm -f "$out"
  return 1
}
