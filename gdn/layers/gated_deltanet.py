"""The Gated DeltaNet layer of Qwen3.5 and Qwen3-Next (the "linear_attn" of their linear-attention
layers), computed with gdn's op.

    x [B, T, hidden]
      -> projections: mixed q|k|v [B, T, 2HK + HV*V], gate z [B, T, HV, V], b and a [B, T, HV]
      -> depthwise causal conv1d + SiLU over q|k|v (state: last W-1 inputs)
      -> q, k [B, T, H, K], v [B, T, HV, V]; beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
      -> gdn.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True)   (state: [N, HV, K, V] float32)
      -> gated RMSNorm(o, z) per value head -> out_proj -> [B, T, hidden]

Parameter names are the checkpoints' (``in_proj_qkv``, ``conv1d``, ``A_log``, ...), so a layer's
tensors load with no renaming. q/k heads are never repeated for the value heads: the op reads
q/k head ``h // (HV // H)`` for value head h.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

import gdn

from ..checks import check_cu_seqlens
from .cache import GatedDeltaNetCache
from .config import GatedDeltaNetConfig
from .conv import causal_conv1d
from .norm import GatedRMSNorm


class GatedDeltaNet(nn.Module):
    """One Gated DeltaNet layer, Qwen3.5 or Qwen3-Next layout (``config.layout``).

    Parameters (checkpoint names under ``model.layers.{i}.linear_attn.``), with D = 2HK + HV*V:
        Qwen3.5: ``in_proj_qkv.weight [D, hidden]``, ``in_proj_z.weight [HV*V, hidden]``,
        ``in_proj_b.weight [HV, hidden]``, ``in_proj_a.weight [HV, hidden]``;
        Qwen3-Next: ``in_proj_qkvz.weight [D + HV*V, hidden]``, ``in_proj_ba.weight [2HV, hidden]``;
        both: ``conv1d.weight [D, 1, W]``, ``dt_bias [HV]``, ``A_log [HV]``, ``norm.weight [V]``,
        ``out_proj.weight [hidden, HV*V]``.
    """

    def __init__(self, config: GatedDeltaNetConfig, layer_idx: int | None = None, *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        if not isinstance(config, GatedDeltaNetConfig):
            raise ValueError(f"config must be a GatedDeltaNetConfig, got {type(config).__name__}")
        self.config = config
        self.layer_idx = layer_idx
        c, kw = config, {"device": device, "dtype": dtype}
        if c.layout == "qwen3_5":
            self.in_proj_qkv = nn.Linear(c.hidden_size, c.conv_dim, bias=False, **kw)
            self.in_proj_z = nn.Linear(c.hidden_size, c.value_dim, bias=False, **kw)
            self.in_proj_b = nn.Linear(c.hidden_size, c.num_v_heads, bias=False, **kw)
            self.in_proj_a = nn.Linear(c.hidden_size, c.num_v_heads, bias=False, **kw)
        else:
            self.in_proj_qkvz = nn.Linear(c.hidden_size, c.conv_dim + c.value_dim, bias=False, **kw)
            self.in_proj_ba = nn.Linear(c.hidden_size, 2 * c.num_v_heads, bias=False, **kw)
        # Depthwise: one W-tap filter per q/k/v channel. Kept as nn.Conv1d for the checkpoint's
        # [D, 1, W] weight; its forward is never called (gdn.layers.conv does the causal part).
        self.conv1d = nn.Conv1d(c.conv_dim, c.conv_dim, c.conv_kernel_size, groups=c.conv_dim,
                                padding=c.conv_kernel_size - 1, bias=False, **kw)
        self.dt_bias = nn.Parameter(torch.ones(c.num_v_heads, **kw))
        # Decay rates A drawn from [1, 16) and stored as log (FLA's init); checkpoints overwrite them.
        self.A_log = nn.Parameter(torch.empty(c.num_v_heads, **kw))
        self.norm = GatedRMSNorm(c.head_v_dim, eps=c.rms_norm_eps, **kw)
        self.out_proj = nn.Linear(c.value_dim, c.hidden_size, bias=False, **kw)
        if self.A_log.device.type != "meta":
            with torch.no_grad():
                self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1, 16).log())

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, layer_idx: int, *,
                        device: torch.device | str | None = None, dtype: torch.dtype | None = None
                        ) -> "GatedDeltaNet":
        """Load layer ``layer_idx`` from a checkpoint directory (config.json + safetensors, sharded or
        not), reading only that layer's tensors. See :func:`gdn.layers.loading.load_gated_deltanet`."""
        from .loading import load_gated_deltanet

        return load_gated_deltanet(path, layer_idx, device=device, dtype=dtype, cls=cls)

    def forward(self, hidden_states: torch.Tensor, cache: GatedDeltaNetCache | None = None,
                cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """Run the layer.

        Args:
            hidden_states: ``[B, T, hidden]`` (the layer's dtype).
            cache: a :class:`GatedDeltaNetCache`. Empty: start from zero states and store the states
                after the last token. Filled: continue every sequence from it (T == 1 is decode and
                runs the recurrent algorithm; T > 1 continues a prefill). None: no states kept.
            cu_seqlens: ``[N+1]`` int boundaries of N packed sequences, with B == 1; conv and
                recurrence restart at every boundary (or continue from the cache's N states).
        Returns:
            ``[B, T, hidden]`` in hidden_states' dtype.
        """
        if not isinstance(hidden_states, torch.Tensor):
            raise TypeError(f"hidden_states must be a torch.Tensor, got {type(hidden_states).__name__}")
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.config.hidden_size:
            raise ValueError(f"hidden_states must be [B, T, {self.config.hidden_size}], "
                             f"got {tuple(hidden_states.shape)}")
        if cache is not None and not isinstance(cache, GatedDeltaNetCache):
            raise ValueError(f"cache must be a GatedDeltaNetCache, got {type(cache).__name__}")
        dtype = self.out_proj.weight.dtype
        if hidden_states.dtype != dtype and not torch.is_autocast_enabled(hidden_states.device.type):
            raise TypeError(f"hidden_states must be in the layer's dtype {dtype} (or under torch.autocast), "
                            f"got {hidden_states.dtype}")
        mixed_qkv, z, b, a = self.project(hidden_states)
        o = self.mix(mixed_qkv, z, b, a, cache=cache, cu_seqlens=cu_seqlens)
        return self.out_proj(o)

    def project(self, hidden_states: torch.Tensor):
        """The input projections.

        Args:
            hidden_states: ``[B, T, hidden]``.
        Returns:
            mixed_qkv ``[B, T, 2HK + HV*V]`` (q heads, k heads, v heads), z ``[B, T, HV, V]``,
            b ``[B, T, HV]``, a ``[B, T, HV]``, all in the layer's dtype.
        """
        c = self.config
        B, T, _ = hidden_states.shape
        if c.layout == "qwen3_5":
            mixed_qkv = self.in_proj_qkv(hidden_states)
            z = self.in_proj_z(hidden_states).view(B, T, c.num_v_heads, c.head_v_dim)
            return mixed_qkv, z, self.in_proj_b(hidden_states), self.in_proj_a(hidden_states)
        return self._project_qwen3_next(hidden_states)

    def _project_qwen3_next(self, hidden_states):
        """Qwen3-Next fuses q|k|v|z and b|a into two projections whose rows are grouped per key head:
        for key head h the rows are [q_h (K), k_h (K), v of its G value heads (G*V), z of them (G*V)],
        and for b|a: [b of its G value heads, a of them]. Regroup into the Qwen3.5 order (all q
        heads, all k heads, all v heads), which is what conv1d's channels follow."""
        c = self.config
        B, T, _ = hidden_states.shape
        H, K, HV, V = c.num_k_heads, c.head_k_dim, c.num_v_heads, c.head_v_dim
        G = HV // H
        qkvz = self.in_proj_qkvz(hidden_states).view(B, T, H, 2 * K + 2 * G * V)
        q, k, v, z = torch.split(qkvz, [K, K, G * V, G * V], dim=-1)          # per key head
        mixed_qkv = torch.cat([q.reshape(B, T, H * K), k.reshape(B, T, H * K), v.reshape(B, T, HV * V)], dim=-1)
        ba = self.in_proj_ba(hidden_states).view(B, T, H, 2 * G)
        b, a = torch.split(ba, [G, G], dim=-1)
        return mixed_qkv, z.reshape(B, T, HV, V), b.reshape(B, T, HV), a.reshape(B, T, HV)

    def mix(self, mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor, *,
            cache: GatedDeltaNetCache | None = None, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """Everything between the input projections and out_proj: conv, gates, the op, gated norm.

        Args:
            mixed_qkv: ``[B, T, 2HK + HV*V]``; z: ``[B, T, HV, V]``; b, a: ``[B, T, HV]``.
            cache, cu_seqlens: as in :meth:`forward`.
        Returns:
            ``[B, T, HV*V]`` in mixed_qkv's dtype (out_proj's input).
        """
        c = self.config
        B, T, _ = mixed_qkv.shape
        H, K, HV, V = c.num_k_heads, c.head_k_dim, c.num_v_heads, c.head_v_dim
        if cu_seqlens is not None:
            check_cu_seqlens(cu_seqlens, B, T)     # before the cache's count reads it
        N = B if cu_seqlens is None else cu_seqlens.numel() - 1
        continuing = cache is not None and not cache.is_empty
        if continuing and cache.batch_size != N:
            raise ValueError(f"cache holds {cache.batch_size} sequences but the input has {N}")
        if cache is not None:
            cache.check((N, mixed_qkv.shape[-1], c.conv_kernel_size - 1), (N, HV, K, V))

        conv_out, conv_state = causal_conv1d(
            mixed_qkv, self.conv1d.weight, self.conv1d.bias,
            initial_state=cache.conv_state if continuing else None,
            output_final_state=cache is not None, cu_seqlens=cu_seqlens, activation="silu")
        q, k, v = torch.split(conv_out, [H * K, H * K, HV * V], dim=-1)
        q, k, v = q.view(B, T, H, K), k.view(B, T, H, K), v.view(B, T, HV, V)

        # Gates in float32 whatever the layer's dtype (A_log.exp() overflows in fp16).
        beta = b.float().sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())

        o, state = gdn.gated_delta_rule(
            q, k, v, g, beta, scale=K ** -0.5,
            initial_state=cache.recurrent_state if continuing else None,
            output_final_state=cache is not None, cu_seqlens=cu_seqlens, use_qk_l2norm=True,
            # Decode (one token per sequence, states in hand) is the recurrence itself.
            backend="recurrent" if continuing and T == 1 else "auto")
        if cache is not None:
            cache.update(conv_state, state)
        return self.norm(o, z).reshape(B, T, HV * V)

    def extra_repr(self) -> str:
        c = self.config
        return (f"layout={c.layout}, hidden={c.hidden_size}, H={c.num_k_heads}, HV={c.num_v_heads}, "
                f"K={c.head_k_dim}, V={c.head_v_dim}, W={c.conv_kernel_size}, layer_idx={self.layer_idx}")

