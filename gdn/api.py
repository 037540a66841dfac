"""The public op: argument contract, dtype policy, variable-length batches, backend choice."""
from __future__ import annotations

import torch

from .checks import check_flag, check_inputs, check_seqlens
from .ops.chunk import chunk_forward
from .ops.common import triton_interpreting
from .ops.recurrent import recurrent_forward
from .ops.scan import scan_forward

TORCH_ALGORITHMS = {"recurrent": recurrent_forward, "chunk": chunk_forward, "scan": scan_forward}


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                     cu_seqlens=None, use_qk_l2norm=False, chunk_size=64, backend="auto"):
    r"""Gated DeltaNet (the gated delta rule), exactly.

    Per sequence and value head, with a K x V state S::

        S_t = exp(g_t) * S_{t-1}
        S_t = S_t + beta_t * k_t (v_t - S_t^T k_t)^T
        o_t = scale * S_t^T q_t

    Args:
        q: ``[B, T, H, K]`` queries.
        k: ``[B, T, H, K]`` keys.
        v: ``[B, T, HV, V]`` values; HV a multiple of H, value head h reads q/k head ``h // (HV // H)``
            (grouped value heads, no copies).
        g: ``[B, T, HV]`` natural-log decay per token (<= 0 for a decay; float32 recommended).
            "recurrent", "chunk" and "scan" take any g down to -inf (a reset: e^g = 0) at their
            dtype's accuracy: "chunk" and "scan" form decays from float64 cumulative sums, with g
            floored at -1e4 (its e^g is 0 already). "triton" forms them from float32 sums within a
            chunk (as FLA's and FlashQLA's kernels do), with g floored at -128 as loaded (e^-128 is
            0 in float32, so exact for g <= 0; -inf is a reset, not NaN): several resets in one
            chunk leave its later decays ~1e-4 off (fp32 inputs, a reset every 13 tokens: o
            1.1e-5, S 6e-5 from float64). A NaN in g stays NaN in o.
        beta: ``[B, T, HV]`` write strength (usually in [0, 1]; up to 2 / |k|^2 keeps the recurrence
            stable). "triton" with bf16 / fp16 inputs runs its state walk on fp16 operands (11 bits),
            with T diag(beta) in two fp16 parts where a chunk's beta and keys need it (beta past 1
            on near-parallel keys, where each step is nearly a reflection, which carries rounding
            errors on: identical keys at beta 1.99 gave o and S 1e-1 off before, ~5e-3 now;
            benchmarks/NOTES.md v67). Without l2norm T diag(beta) is kept in fp16 as is, so beta
            past ~6e4 gives NaN and entries below ~1e-4 lose bits (NOTES.md v66); "chunk" keeps
            fp32's accuracy there.
        scale: output scale, default ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` state before the first token of each sequence (zeros if None).
        output_final_state: also return the state after the last token of each sequence.
        cu_seqlens: ``[N + 1]`` int32/int64 boundaries of N packed sequences (B must be 1); each
            sequence starts from its own initial state. Empty sequences are allowed.
        use_qk_l2norm: l2-normalise q and k over K first (Qwen3.5's ``use_qk_l2norm_in_kernel``).
            Without it the keys should keep beta |k|^2 <= 2 (else the recurrence itself may grow),
            and "triton" takes bf16 / fp16 q and k into fp16 matrix products as given: exact for
            entries of magnitude 2^-16 to 65504; a larger entry overflows to inf and gives NaN in o
            (never a quiet error; gdn.ops.triton.walk_f16); smaller ones lose bits to fp16's
            subnormals (absolute error <= 2^-25): a q or k whose rows are all that small (say
            entries ~1e-6) gives o with a large relative error there. Normalise, or pass fp32.
        chunk_size: tokens per chunk (a power of two; 64 by default); "triton" takes 16, 32 or 64.
        backend: "recurrent" (token by token), "chunk" (WY chunks, seed 002), "scan" (chunk affine
            maps + parallel prefix scan, seed 000), "triton" (GPU kernels, bf16/fp16/fp32 inputs), or
            "auto": "triton" for CUDA tensors when Triton is installed, no gradient is needed, no
            input is float64, K and V are at most 256 and chunk_size is 16, 32 or 64; on other
            devices "recurrent" up to RECURRENT_MAX_T (2) tokens (a decode step: 1.1-1.8x faster
            than "chunk" there, BENCHMARKS.md), else "chunk". In "chunk" and "scan" a sequence
            shorter than chunk_size runs as one chunk of the next power of two (the same maps on
            fewer padding tokens).
            Gradients flow through every backend; "triton" has no backward kernels yet, so a call
            that needs gradients runs the "chunk" backend on the same device instead. "triton" can
            be captured in a CUDA graph (torch.cuda.graph): no kernel of the capture waits on one
            it is not ordered after (the schedule then differs from the eager call's at B = 1;
            the results are checked against the float64 reference, and bit for bit against the
            eager call where the sequence is split into segments).

    Returns:
        ``(o, final_state)``: o ``[B, T, HV, V]`` in v's dtype; final_state ``[N, HV, K, V]`` float32
        (float64 when any input is float64), or None unless ``output_final_state``.

    Accumulation is float32 (float64 for float64 inputs) whatever the input dtype; "triton" takes q
    and k in the wider of their two dtypes.

    Causality holds for finite inputs. A NaN or inf in one token's inputs reaches the outputs of every
    token of its chunk in "chunk", "scan" and "triton" (their products mix a chunk's tokens, and a
    masked product is 0 x NaN), where "recurrent" keeps it from earlier tokens: pad with zeros, not
    with uninitialised memory.

    Example::

        >>> import torch, gdn
        >>> B, T, H, HV, K, V = 1, 100, 2, 4, 64, 64
        >>> q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
        >>> v = torch.randn(B, T, HV, V)
        >>> g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV))
        >>> beta = torch.rand(B, T, HV)
        >>> o, S = gdn.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True, output_final_state=True)
        >>> o.shape, S.shape
        (torch.Size([1, 100, 4, 64]), torch.Size([1, 4, 64, 64]))
        >>> cu = torch.tensor([0, 30, 30, 100])           # three packed sequences, one empty
        >>> o, S = gdn.gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, output_final_state=True)
        >>> S.shape
        torch.Size([3, 4, 64, 64])
    """
    check_inputs(q, k, v, g, beta, scale, initial_state, cu_seqlens, chunk_size, backend,
                 output_final_state, use_qk_l2norm)
    K = q.shape[-1]
    scale = K ** -0.5 if scale is None else float(scale)
    chunk_size = int(chunk_size)                         # (numpy's ints too: checked as numbers.Integral)
    backend = resolve_backend(backend, q, k, v, g, beta, initial_state, chunk_size=chunk_size)

    if backend == "triton":
        from .ops.triton import triton_forward
        o, S = triton_forward(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                              output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                              use_qk_l2norm=use_qk_l2norm, chunk_size=chunk_size)
        return o, S

    tensors = (q, k, v, g, beta) + ((initial_state,) if initial_state is not None else ())
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    qc, kc, vc, gc, bc = (t.to(dtype) for t in (q, k, v, g, beta))
    S0 = None if initial_state is None else initial_state.to(dtype)
    forward = TORCH_ALGORITHMS[backend]

    if cu_seqlens is None:
        o, S = _run_dense(forward, qc, kc, vc, gc, bc, scale, S0, chunk_size, use_qk_l2norm)
    else:
        # Each packed sequence runs as its own batch of one: exact, and no padding work.
        outs, states = [], []
        bounds = cu_seqlens.tolist()
        check_seqlens(bounds, q.shape[1])       # checked again as read: the slices below trust them
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            s0 = None if S0 is None else S0[i:i + 1]
            o_i, S_i = _run_dense(forward, qc[:, a:b], kc[:, a:b], vc[:, a:b], gc[:, a:b], bc[:, a:b],
                                  scale, s0, chunk_size, use_qk_l2norm)
            outs.append(o_i)
            states.append(S_i)
        o, S = torch.cat(outs, dim=1), torch.cat(states, dim=0)
    return o.to(v.dtype), (S if output_final_state else None)


def _run_dense(forward, q, k, v, g, beta, scale, S0, chunk_size, use_qk_l2norm):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if T == 0:
        S = q.new_zeros(B, HV, K, V) if S0 is None else S0.clone()
        return v.new_zeros(B, 0, HV, V), S
    # A sequence shorter than a chunk is one chunk either way: padded to the next power of two
    # rather than to chunk_size, the same maps on fewer zero tokens (at T = 12-32 on the CPU 1.4-3.8x
    # faster than one chunk of 64: benchmarks/NOTES.md, forty-seventh session).
    chunk_size = min(chunk_size, 1 << (T - 1).bit_length())
    return forward(q, k, v, g, beta, scale, S0, chunk_size, use_qk_l2norm)


# On the CPU the chunk algorithm's fixed costs (the chunk's inverse, its layout copies) outweigh one
# or two token steps: chunk / recurrent measured 1.1-1.8x at T = 1, 0.83-1.6x at T = 2, 0.56-1.43x
# at T = 4 and 0.26-0.43x at T = 32, at four shapes (BENCHMARKS.md, CPU: a decode step); the large
# state (B8, HV32) is where the recurrence loses first, each token a pass over it.
RECURRENT_MAX_T = 2


def resolve_backend(backend: str, *tensors, chunk_size: int = 64) -> str:
    """The concrete algorithm for ``backend`` on the op's tensors (q, k, v, g, beta, initial_state; q
    alone will do) (see :func:`gated_delta_rule`)."""
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    float64 = any(t is not None and t.dtype == torch.float64 for t in tensors)
    on_cuda = tensors[0].is_cuda
    if backend == "auto":
        # The kernels compute in float32 at best: float64 inputs get the exact float64 chunk algorithm.
        # Head dims past TRITON_MAX_HEAD_DIM (the kernels' tiles) take it too.
        head_dims = (tensors[0].shape[-1],) + ((tensors[2].shape[-1],) if len(tensors) > 2 else ())   # K, V
        kernels_fit = (on_cuda and not float64 and chunk_size in TRITON_CHUNK_SIZES
                       and all(d <= TRITON_MAX_HEAD_DIM for d in head_dims))
        if kernels_fit and not needs_grad and triton_available():
            return "triton"
        if not on_cuda and tensors[0].shape[1] <= RECURRENT_MAX_T:
            return "recurrent"
        return "chunk"
    if backend == "triton":
        if needs_grad:
            return "chunk"
        if float64:
            raise ValueError("backend='triton' computes in float32 (bf16/fp16/fp32 inputs); for float64 inputs "
                             "use backend='chunk' (or 'auto')")
        if not triton_available():
            raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
        if not on_cuda and not triton_interpreting():
            raise ValueError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 to run the kernels "
                             "on CPU tensors in Triton's interpreter)")
    return backend


TRITON_CHUNK_SIZES = (16, 32, 64)      # 128 needs more shared memory than an H200 SM has (v3 notes)
TRITON_MAX_HEAD_DIM = 256              # K and V (gdn.ops.triton.plan refuses larger ones by name)


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """FLA-compatible name and arguments (``fla.ops.gated_delta_rule.chunk_gated_delta_rule``).

    Same tensors and layouts as :func:`gated_delta_rule` (q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``,
    g, beta ``[B, T, HV]``, states ``[N, HV, K, V]``); runs the fastest exact backend for the device.
    Returns ``(o, final_state)``."""
    check_flag("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)       # (by the caller's name)
    return gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                            output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                            use_qk_l2norm=use_qk_l2norm_in_kernel, backend="auto")


def fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     cu_seqlens=None):
    """FLA-compatible name and arguments (``fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule``):
    the token-by-token algorithm, what decode (one token per sequence) uses. Same tensors as
    :func:`chunk_gated_delta_rule`. Returns ``(o, final_state)``."""
    check_flag("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    return gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                            output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                            use_qk_l2norm=use_qk_l2norm_in_kernel, backend="recurrent")
