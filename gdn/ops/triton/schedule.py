"""How the Triton forward's work is cut and placed on the GPU: segments of a sequence (joined by the
affine-map scan) when sequences x heads cannot fill the SMs, pieces of chunks whose WY pass runs
beside the previous piece's walk, and the side streams and device context those launches use.
The numbers behind each rule are in benchmarks/NOTES.md (H200 sweeps)."""
from __future__ import annotations

import contextlib
import functools

import torch


def cdiv(a: int, b: int) -> int:
    """triton.cdiv's ceil(a / b) in plain Python: Triton's costs ~4 us of the host's time a call."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """triton.next_power_of_2 in plain Python (the same host cost saved): the least power of 2 >= n."""
    return 1 << max(int(n) - 1, 0).bit_length()


@functools.cache
def _cuda_facts(index: int) -> tuple[int, int]:
    """(SMs, compute capability's major) of CUDA device ``index``, asked once: each query costs ~10 us
    of the host's time, several a call, which at small shapes is time the GPU waits for."""
    props = torch.cuda.get_device_properties(index)
    return props.multi_processor_count, props.major


def _facts(device: torch.device) -> tuple[int, int]:
    return _cuda_facts(torch.cuda.current_device() if device.index is None else device.index)


def num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return _facts(device)[0]
    return 4                       # Triton's CPU interpreter: small, so small tests exercise the split


def cuda_major(device: torch.device) -> int:
    """The compute capability's major version of CUDA device ``device``."""
    return _facts(device)[1]


def choose_segments(programs: int, num_chunks: int, num_sms: int, programs_per_sm: int = 2,
                    min_chunks: int = 4) -> int:
    """How many segments to cut each sequence into so that the state walk fills the GPU in one wave
    (``programs_per_sm`` resident programs on each of ``num_sms`` SMs), keeping at least
    ``min_chunks`` chunks per segment (the segment maps cost about one extra state walk). Rounded
    down: a second, partial wave takes as long as the first, so more segments than fit only add maps."""
    slots = programs_per_sm * num_sms
    if 2 * programs > slots or num_chunks < 2 * min_chunks:
        return 1
    return max(1, min(slots // programs, num_chunks // min_chunks))


# Dense bf16 calls of few sequences x value heads take the segment maps on fp16 operands (maps="f16")
# rather than one segment (benchmarks/NOTES.md v57): below MAPS_SPLIT_CHUNKS chunks under MAPS_HEADS
# heads; from it while heads^2 x chunks stays within MAPS_BUDGET. MAPS_SPLIT_CHUNKS is the automatic
# split's least chunk count when v56-v57 measured the rule; the split starts at 256 since v62, where
# 9-15 heads were not timed (and calls the split does not take, K = 64 or V not a multiple of 64,
# would walk in order), so the rule keeps 512.
MAPS_HEADS = 16
MAPS_BUDGET = 8 * 8 * 512
MAPS_SPLIT_CHUNKS = 512


def walks_one_segment(heads: int, num_chunks: int, split_min_chunks: int) -> bool:
    """Whether ``heads`` sequences x value heads of ``num_chunks`` chunks each walk one segment on the
    fp16 walk rather than segments joined by maps on fp16 operands, where that walk can run. The maps
    cost the same with any gates, about linear in heads x chunks (an H100, v57, T32k: 0.20 ms at 2
    heads, 0.34 at 4, 0.63 at 8). One segment, below ``split_min_chunks`` (no automatic split), is the
    ordered walk with any gates (~0.3-0.5 ms up to 16k tokens: the maps are faster under 16 heads);
    from there ~0.35-0.5 ms with gates that forget (the split) and ~1 ms a 32k tokens with long memory
    (the ordered walk's chain). A call cannot see its gates first, so the smaller worst-case loss
    decides: maps / forgetting against long / maps, maps^2 against their product, i.e. heads^2 x
    chunks against a constant, where 8 heads at 512 chunks break even (maps 0.63 ms against 0.38 and
    1.07)."""
    if num_chunks < split_min_chunks:
        return heads >= MAPS_HEADS
    return heads * heads * num_chunks > MAPS_BUDGET


def choose_pieces(programs: int, num_chunks: int, chunk_size: int, num_sms: int, flags: bool = False) -> int:
    """How many pieces to cut the chunks into so that the WY pass of one piece runs beside the state
    walk of the previous one: only when the walk takes at most one program per SM (it is then
    latency-bound and leaves room on every SM). Each piece costs the host two kernel launches and
    an event (0.07-0.3 ms of host time a piece on the H200 machine, which a short piece's GPU work
    does not hide), and the WY pass of the first piece runs alone: so at least 4096 tokens a piece,
    8 pieces up to 64k tokens, then pieces of ~8k tokens, at most 16 (the H200 sweeps of
    benchmarks/NOTES.md v6, at chunk size 64: 64 and 128 chunks).
    More than one piece is also what turns on the default overlap="flags" (two launches, whatever
    the length). With ``flags`` (the launcher will take that overlap) 2 pieces from 4096 tokens
    on: at B1 x T4k it took 0.282 ms against 0.345 for the WY pass and then the walk (NOTES.md
    v8); below that the host's launches set the pace."""
    tokens = num_chunks * chunk_size
    if programs > num_sms or num_chunks < 2 or tokens < (4096 if flags else 8192):
        return 1
    return max(2, min(16, num_chunks, tokens // 4096, max(8, tokens // 8192)))


def choose_flag_group(num_chunks: int) -> int:
    """How many chunks the walk of overlap="flags" waits for at once: 8, or 16 from 1024 chunks on.
    Each wait costs the walk a spin on the count and a restart of its pipelined loads; larger groups
    wait less often but make the walk's start wait for more of the WY pass. On the H200 (benchmarks/
    NOTES.md v8, same calls, B = 1 at chunk size 64) groups of 16 were 2.2-3.3% faster than 8 at
    T = 128k, the same at 32k, and 1-3% slower at 8k and 16k."""
    return 16 if num_chunks >= 1024 else 8


_SIDE_STREAMS: dict[tuple[int, int, int, int], torch.cuda.Stream] = {}


@contextlib.contextmanager
def side_streams(device: torch.device, count: int = 1, priorities: tuple[int, ...] | None = None):
    """(main, side, ...): the caller's stream and ``count`` side streams, each starting after the work
    queued so far; the caller's stream waits for all of them on exit. By default the first, for the
    state walk, has the highest priority (-2), any further one the next highest (-1), so that none
    queues behind the WY passes the caller's stream holds; ``priorities`` gives each side stream's instead (lower is higher, 0 the
    default streams'). Nones off CUDA: the interpreter runs everything in order."""
    if device.type != "cuda":
        yield (None,) * (count + 1)
        return
    main = torch.cuda.current_stream(device)
    # Side streams per caller stream: callers on different streams (or threads, or a graph being
    # captured) never queue behind each other's walks.
    sides = []
    for j in range(count):
        priority = priorities[j] if priorities is not None else (-2 if j == 0 else -1)
        key = (main.device.index, main.cuda_stream, j, priority)
        side = _SIDE_STREAMS.get(key)
        if side is None:
            # Out-of-range priorities are clamped to the device's range (walk and outputs may share one).
            side = _SIDE_STREAMS[key] = torch.cuda.Stream(device=main.device, priority=priority)
        side.wait_stream(main)
        sides.append(side)
    try:
        yield (main, *sides)
    finally:
        for side in sides:
            main.wait_stream(side)


def on_stream(stream):
    """Launch on ``stream``; None (off CUDA, see side_streams): on the current one."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def on_tensor_device(fn):
    """Run ``fn`` with q's CUDA device current: Triton launches on the current device's current
    stream, and the side stream's events must order kernels of q's device."""
    @functools.wraps(fn)
    def on_device(q, *args, **kwargs):
        if q.is_cuda:
            with torch.cuda.device(q.device):
                return fn(q, *args, **kwargs)
        return fn(q, *args, **kwargs)
    return on_device
