"""Layers built on the op: the Gated DeltaNet layer of Qwen3.5 / Qwen3-Next and its parts.

    layer = gdn.layers.GatedDeltaNet.from_pretrained("path/to/Qwen3.5-checkpoint", layer_idx=0)
    cache = gdn.layers.GatedDeltaNetCache()
    y = layer(x, cache=cache)            # prefill  x [B, T, hidden]
    y1 = layer(x1, cache=cache)          # decode   x1 [B, 1, hidden]
"""
from .cache import GatedDeltaNetCache
from .config import GatedDeltaNetConfig
from .conv import causal_conv1d
from .gated_deltanet import GatedDeltaNet
from .norm import GatedRMSNorm, gated_rms_norm

__all__ = ["GatedDeltaNet", "GatedDeltaNetConfig", "GatedDeltaNetCache", "GatedRMSNorm", "causal_conv1d",
           "gated_rms_norm"]
