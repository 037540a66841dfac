"""Triton kernels for NVIDIA GPUs (and Triton's CPU interpreter with TRITON_INTERPRET=1).

chunk_fwd: the fused forward (WY factors + state walk + outputs), split into exactly-joined segments
           when batch x heads cannot fill the GPU.
wy:        the chunk math (decays, WY triangular inverse) as device functions.
causal_conv1d: the layer's short convolution.
"""
from .chunk_fwd import triton_forward

__all__ = ["triton_forward"]
