"""gdn: exact and fast Gated DeltaNet operators for PyTorch.

    o, final_state = gdn.gated_delta_rule(q, k, v, g, beta, output_final_state=True)

Three algorithms compute the same numbers (gdn.ops.recurrent, gdn.ops.chunk, gdn.ops.scan), plus fused
Triton kernels for NVIDIA GPUs (gdn.ops.triton). FLA-compatible names: chunk_gated_delta_rule,
fused_recurrent_gated_delta_rule.
"""
from .api import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, gated_delta_rule
from .ops.common import release_workspace

__version__ = "0.1.0"
__all__ = ["gated_delta_rule", "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "release_workspace",
           "__version__"]
