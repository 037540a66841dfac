#!/usr/bin/env bash
# On the GPU machine: ncu --set full of one kernel of the second call of gpu_check.py's once section
# (the first compiles), its details page, its warp stalls by SASS line (ncu_stalls.py), its executed
# instructions by source line (ncu_lines.py, from the same kernel compiled by compile_report.py) and
# what its most stalled instructions wait for (ncu_waits.py: the scoreboards and who set them) into $OUT.
# Usage: bash benchmarks/ncu_kernel.sh TAG CONFIG BxT [KERNEL_REGEX, default _chunk_fwd_kernel]
#   CONFIG is a name of gdn/ops/triton/configs.py ("a&b" merges). Use one with pieces=1: under ncu the
#   kernels run one at a time, so a walk that waits on the WY pass beside it would wait forever.
#   "ab:NAME/CONFIG" profiles a snapshot (scripts/ab_snapshot.sh, carry .ab): no lines or waits file then.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
OUT="${OUT:-/tmp/gdn_out}"
mkdir -p "$OUT"
tag="$1" config="$2" shape="$3" kernel="${4:-_chunk_fwd_kernel}"
rep="/tmp/ncu-$tag"
GDN_CONFIGS="$config" GDN_ONCE="$shape" timeout "${SECTION_TIMEOUT:-400}" \
    ncu --set full --import-source yes -k "regex:$kernel" --launch-skip 1 --launch-count 1 -f -o "$rep" \
    python3 benchmarks/gpu_check.py once 2>&1 | tail -5
ncu -i "$rep.ncu-rep" --page details > "$OUT/ncu-$tag-details.txt"
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu-$tag-source.csv"
python3 benchmarks/ncu_stalls.py "$OUT/ncu-$tag-source.csv" 25 | tee "$OUT/ncu-$tag-stalls.txt"
grep -E "Duration|Registers Per|Shared Memory Config|Executed Ipc A|Local Memory Spilling Req" \
    "$OUT/ncu-$tag-details.txt" | head -8
# Executed instructions by source line: the same kernel compiled with line info (KERNEL must then be
# the kernel's name, not a partial pattern). ncu profiled the first call's second launch of it where a
# call launches it twice (compile_report's <kernel>.1.ptx), else the second call's; ncu_lines refuses
# a mismatch.
if [[ "$config" == ab:* ]]; then
    # compile_report builds the working tree's gdn only: a snapshot's kernel has no listing here.
    echo "$config is a snapshot's config (gpu_check's ab:): its duration and stalls above, no lines or waits file"
    exit 0
fi
asm="/tmp/asm-$tag/${config//[^A-Za-z0-9_.+-]/_}"
python3 benchmarks/compile_report.py --variants "$config" --shape "${shape/x/,}" --dump "/tmp/asm-$tag" > /dev/null
ptx="$asm/$kernel.ptx"
[[ -f "$asm/$kernel.1.ptx" ]] && ptx="$asm/$kernel.1.ptx"
if [[ -f "$ptx" ]]; then
    python3 benchmarks/ncu_lines.py "$OUT/ncu-$tag-source.csv" "$ptx" --top 40 | tee "$OUT/ncu-$tag-lines.txt"
    python3 benchmarks/ncu_waits.py "$OUT/ncu-$tag-source.csv" "$ptx" --top 15 > "$OUT/ncu-$tag-waits.txt"
    head -20 "$OUT/ncu-$tag-waits.txt"
else
    echo "no $ptx: KERNEL '$kernel' is not a kernel's name that $config launches at $shape (no lines file)"
fi
