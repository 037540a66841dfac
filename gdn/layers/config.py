"""The shape of one Gated DeltaNet (linear-attention) layer, read from a transformers config.json.

Two published families share the math and differ in how the input projections are laid out:

- Qwen3.5 (``model_type`` ``qwen3_5`` / ``qwen3_5_moe``, text fields possibly nested under
  ``text_config``): four projections ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``.
- Qwen3-Next (``qwen3_next``): two fused projections ``in_proj_qkvz``, ``in_proj_ba`` whose output
  rows are grouped per key head (see ``GatedDeltaNet._project_qwen3_next``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

# model_type -> projection layout. The "_text" types are what a nested text_config carries.
_LAYOUTS = {
    "qwen3_5": "qwen3_5",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "qwen3_next": "qwen3_next",
}
LAYOUTS = ("qwen3_5", "qwen3_next")


@dataclass
class GatedDeltaNetConfig:
    """Hyper-parameters of one Gated DeltaNet layer (all other layers of the model are ignored)."""

    hidden_size: int = 2048          # model width: input and output features of the layer
    num_k_heads: int = 16            # H: query/key heads (config: linear_num_key_heads)
    num_v_heads: int = 32            # HV: value heads, a multiple of H; value head h reads q/k head h // (HV // H)
    head_k_dim: int = 128            # K: query/key head size (config: linear_key_head_dim)
    head_v_dim: int = 128            # V: value head size (config: linear_value_head_dim)
    conv_kernel_size: int = 4        # W: taps of the depthwise causal conv over q/k/v (linear_conv_kernel_dim)
    rms_norm_eps: float = 1e-6       # epsilon of the gated RMSNorm on the op's output
    hidden_act: str = "silu"         # activation after the conv; Qwen3.5 and Qwen3-Next both use SiLU
    layout: str = "qwen3_5"          # projection layout: "qwen3_5" (4 projections) or "qwen3_next" (2 fused)
    # Per-layer kind for the whole model ("linear_attention" / "full_attention"): lets
    # from_pretrained refuse a full-attention layer index with a clear message.
    layer_types: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        for name in ("hidden_size", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "conv_kernel_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.rms_norm_eps, (int, float)) or not 0 < self.rms_norm_eps < 1:
            raise ValueError(f"rms_norm_eps must be a float in (0, 1), got {self.rms_norm_eps!r}")
        if self.num_v_heads % self.num_k_heads:
            raise ValueError(
                f"num_v_heads ({self.num_v_heads}) must be a multiple of num_k_heads ({self.num_k_heads})"
            )
        if not isinstance(self.layer_types, (list, tuple)) or not all(isinstance(t, str) for t in self.layer_types):
            raise ValueError(f"layer_types must be a list of strings, got {self.layer_types!r}")
        if self.hidden_act not in ("silu", "swish"):
            raise ValueError(f"hidden_act must be 'silu' (what Qwen3.5 / Qwen3-Next use), got {self.hidden_act!r}")

    @property
    def key_dim(self) -> int:
        """H * K: width of all query (or all key) heads together."""
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        """HV * V: width of all value heads together (also of the gate z and of the op's output)."""
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: q, k and v side by side (2 * H * K + HV * V)."""
        return 2 * self.key_dim + self.value_dim

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "GatedDeltaNetConfig":
        """Build from a transformers-style config dict (the content of ``config.json``).

        Accepts Qwen3.5 / Qwen3.5-MoE (text fields at the top or under ``text_config``) and Qwen3-Next.
        A missing ``layer_types`` is derived from ``full_attention_interval`` (default 4) as
        transformers does: layer i is full attention when ``(i + 1) % interval == 0``.
        """
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict (config.json content), got {type(config).__name__}")
        model_type = config.get("model_type")
        text = config.get("text_config") or config
        if not isinstance(text, Mapping):
            raise ValueError(f"config's text_config must be a dict, got {type(text).__name__}")
        layout = _LAYOUTS.get(text.get("model_type", model_type)) or _LAYOUTS.get(model_type)
        if layout is None:
            raise ValueError(
                f"config has model_type {model_type!r}; expected one of {sorted(_LAYOUTS)} "
                "(a Qwen3.5 or Qwen3-Next config)"
            )
        required = ("hidden_size", "linear_num_key_heads", "linear_num_value_heads",
                    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim")
        missing = [k for k in required if k not in text]
        if missing:
            raise ValueError(f"config is missing the linear-attention field(s) {missing}")
        layer_types = text.get("layer_types")
        if layer_types is None and "num_hidden_layers" in text:
            interval = text.get("full_attention_interval", 4)
            if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
                raise ValueError(f"config's full_attention_interval must be a positive int, got {interval!r}")
            n_layers = text["num_hidden_layers"]
            if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 0:
                raise ValueError(f"config's num_hidden_layers must be an int >= 0, got {n_layers!r}")
            layer_types = [
                "full_attention" if (i + 1) % interval == 0 else "linear_attention"
                for i in range(n_layers)
            ]
        return cls(
            hidden_size=text["hidden_size"],
            num_k_heads=text["linear_num_key_heads"],
            num_v_heads=text["linear_num_value_heads"],
            head_k_dim=text["linear_key_head_dim"],
            head_v_dim=text["linear_value_head_dim"],
            conv_kernel_size=text["linear_conv_kernel_dim"],
            rms_norm_eps=text.get("rms_norm_eps", 1e-6),
            hidden_act=text.get("hidden_act", "silu"),
            layout=layout,
            # (anything but a list goes as it is, for __post_init__ to refuse by name)
            layer_types=[] if layer_types is None else list(layer_types) if isinstance(layer_types, (list, tuple))
            else layer_types,
        )

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "GatedDeltaNetConfig":
        """Read ``config.json`` (a file, or a directory holding one)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        if not os.path.isfile(path):
            raise ValueError(f"path: no config.json at {path}")
        return cls.from_dict(read_json(path))


def read_json(file: str):
    """A JSON file's contents; a malformed one is a ValueError naming the file."""
    with open(file) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{file} is not valid JSON: {err}") from None
