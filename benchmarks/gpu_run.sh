#!/usr/bin/env bash
# On the GPU machine (no package registry): unpack the peers, check correctness, time everything.
# Usage (device tool, carry .peers and .tcache): bash benchmarks/gpu_run.sh [check|bench|all|SECTION...]
#   check: every gpu_check.py section; bench: `gdn bench` with the peers (its default, six shapes x
#   two gate regimes x two l2norm regimes, took ~540 s on an H100 in v50: cut it with BENCH_ARGS
#   "--shapes ..." or "--l2norm on" to stay inside one call's 600 s); all: both (the default);
#   any gpu_check.py section names (correct, kernels, time, profile, once, host): those sections,
#   each in its own process, its whole output kept in $OUT/<section>.log (<section>-$TAG.log when
#   TAG is set, so that a second run of a section keeps the first one's log) and printed; "pytest"
#   among them runs the test files in $GDN_PYTEST (default tests/ops/triton) on the GPU the same way
#   (stopped at SECTION_TIMEOUT by SIGINT; verbose, one line a test as it ends, because twice on the
#   GPU machine (NOTES.md v64) the SIGINT ended pytest without its summary of failures; a test
#   past $GDN_TEST_HANG_S, default 150, prints its stack); a gpu_check.py section still running 10 s
#   before SECTION_TIMEOUT prints its stacks and ends (a hung kernel, NOTES.md v45); "sweep"
#   runs benchmarks/knob_sweep.py on the GPU ($GDN_SWEEP_ARGS, default 60 single-knob cases from
#   seed 0, no case started after $GDN_SWEEP_MINUTES, default 4);
#   "hard" runs benchmarks/hard_inputs.py with the peers ($GDN_HARD_ARGS: its arguments);
#   "cache" writes Triton's cache to $OUT/triton-cache.tar.xz (scripts/triton_cache.sh: merge it into
#   .tcache/ with `bash scripts/precompile_triton.sh --merge ARCHIVE none`, and later calls start with
#   those kernels compiled). Every call writes the machine's Triton build to $OUT/triton-build.json
#   first: kept as benchmarks/gpu-triton-build.json, it lets that script compile here, for the GPU,
#   what the next calls will launch.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
OUT="${OUT:-/tmp/gdn_out}"
mkdir -p "$OUT"
source scripts/triton_cache.sh
save_triton_build             # (first: a call cut short still brings its $OUT back)
what="${1:-all}"
case "$what" in
    check|bench|all) ;;
    *)
        for section in "$@"; do
            if [[ "$section" == cache ]]; then
                save_triton_cache
                continue
            fi
            # Each section's whole output to $OUT/<section>[-TAG].log, and printed.
            case "$section" in
                pytest)
                    # A test past faulthandler_timeout prints its stack (a hung kernel or a compile).
                    # shellcheck disable=SC2086  # GDN_PYTEST is a list of paths
                    timeout -s INT -k 30 "${SECTION_TIMEOUT:-400}" python3 -m pytest -v -rf --tb=short \
                        -p no:cacheprovider --durations=15 -o faulthandler_timeout="${GDN_TEST_HANG_S:-150}" \
                        ${GDN_PYTEST:-tests/ops/triton} ;;
                hard)
                    # Hard inputs inside the limits, ours beside the peers (benchmarks/hard_inputs.py).
                    source scripts/unpack_peers.sh
                    # shellcheck disable=SC2086  # GDN_HARD_ARGS is a list of arguments
                    timeout "${SECTION_TIMEOUT:-400}" python3 benchmarks/hard_inputs.py ${GDN_HARD_ARGS:-} ;;
                sweep)
                    # shellcheck disable=SC2086  # GDN_SWEEP_ARGS is a list of arguments
                    timeout "${SECTION_TIMEOUT:-400}" python3 benchmarks/knob_sweep.py --device cuda \
                        --minutes "${GDN_SWEEP_MINUTES:-4}" ${GDN_SWEEP_ARGS:---cases 60 --knobs single} ;;
                *)
                    # Its stacks and its end 10 s before the timeout's silent kill (gpu_check.hang_guard).
                    GDN_HANG_S=$(( ${SECTION_TIMEOUT:-400} - 10 )) \
                        timeout "${SECTION_TIMEOUT:-400}" python3 benchmarks/gpu_check.py "$section" ;;
            esac 2>&1 | tee "$OUT/$section${TAG:+-$TAG}.log"
        done
        exit 0 ;;
esac
if [[ "$what" == check || "$what" == all ]]; then
    python3 benchmarks/gpu_check.py 2>&1 | tee "$OUT/gpu_check.log"
fi
if [[ "$what" == bench || "$what" == all ]]; then
    source scripts/unpack_peers.sh
    # BENCH_ARGS is shell text (eval): config names hold spaces, e.g. BENCH_ARGS="--configs 'walk loads'".
    eval "python3 -m gdn bench --out \"\$OUT/bench\" ${BENCH_ARGS:-}" 2>&1 | tee "$OUT/bench${TAG:+-$TAG}.log"
fi
