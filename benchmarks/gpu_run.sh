#!/usr/bin/env bash
# On the GPU machine (no package registry): unpack the peers, check correctness, time everything.
# Usage (device tool, carry .peers): bash benchmarks/gpu_run.sh [check|bench|all]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
OUT="${OUT:-/tmp/gdn_out}"
mkdir -p "$OUT"
what="${1:-all}"
if [[ "$what" == check || "$what" == all ]]; then
    python3 benchmarks/gpu_check.py 2>&1 | tee "$OUT/gpu_check.log"
fi
if [[ "$what" == bench || "$what" == all ]]; then
    source scripts/unpack_peers.sh
    python3 -m gdn bench --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
fi
