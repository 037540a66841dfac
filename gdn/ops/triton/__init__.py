"""Triton kernels for NVIDIA GPUs (and Triton's CPU interpreter with TRITON_INTERPRET=1).

wy:         the chunk math (decays, WY triangular inverse, chunk loading) and the parallel WY kernel.
chunk_fwd:  the segment maps and the state walk that writes the outputs; sequences are cut into
            exactly-joined segments when batch x heads cannot fill the GPU.
forward:    the launcher (triton_forward): the WY pass, the maps, the walk; pieces and streams.
walk_f16, walk_gluon, walk_gluon_t: the state walk on fp16 operands (Triton, then Gluon on S, on S^T).
split_walk: one long sequence's walk in certified segments (automatic per head, from 16k tokens).
split_dot:  fp32-accurate products on bf16 matrix units.
addressing: [tokens, heads, dim] offsets (int64 per chunk, int32 inside).
configs:    named launcher configurations (tests, compile report, GPU timing).
causal_conv1d: the layer's short convolution.
"""
from .forward import triton_forward

__all__ = ["triton_forward"]
