# Run ON the GPU machine (no package registry there): `source scripts/unpack_peers.sh`.
# Unpacks the peer libraries that scripts/pack_peers.sh packed (FLA, FlashQLA, TileLang and its
# deps) into /tmp/peers and puts that folder first on PYTHONPATH for this shell. Sourced, so no
# `set -e` (it would leak into the caller). FLA_FLASH_QLA is deliberately left alone: the
# adapters in gdn/cli/peers.py set it for the FLA path only.
_peers_archive="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.peers/peers.tar.xz"
_peers_dir="${PEERS_DIR:-/tmp/peers}"
if [ ! -f "$_peers_archive" ]; then
  echo "unpack_peers: $_peers_archive missing (run scripts/pack_peers.sh and carry .peers)" >&2
  return 1 2>/dev/null || exit 1
fi
# Re-extract only when the archive changed (the stamp is its size+mtime).
_peers_stamp="$(stat -c '%s %Y' "$_peers_archive")"
if [ "$(cat "$_peers_dir/.stamp" 2>/dev/null)" != "$_peers_stamp" ]; then
  rm -rf "$_peers_dir" && mkdir -p "$_peers_dir" &&
    tar -xJf "$_peers_archive" -C "$_peers_dir" && echo "$_peers_stamp" > "$_peers_dir/.stamp"
fi
case ":${PYTHONPATH:-}:" in
  *":$_peers_dir:"*) ;;
  *) export PYTHONPATH="$_peers_dir${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
unset _peers_archive _peers_dir _peers_stamp
