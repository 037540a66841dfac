"""Load one Gated DeltaNet layer from a checkpoint directory as published on the Hub.

A directory holds ``config.json`` and either ``model.safetensors``, several ``*.safetensors``, or
shards listed in ``model.safetensors.index.json``. Only the files holding the wanted layer are
opened and only that layer's tensors are read (safetensors reads lazily), so loading one layer of
an 80B model costs one layer's memory. Every expected tensor must be present with the right shape
and nothing else may sit under the layer's prefix: a partial or mismatched load fails loudly.
"""
from __future__ import annotations

import glob
import os

import torch

from ..checks import FLOAT_DTYPES
from .config import GatedDeltaNetConfig, read_json

# Where a layer's tensors live: text-only models (Qwen3-Next, Qwen3.5 *ForCausalLM) and the
# multimodal Qwen3.5 checkpoints (text tower under model.language_model).
PREFIXES = ("model.layers.{i}.linear_attn.", "model.language_model.layers.{i}.linear_attn.")
INDEX_FILE = "model.safetensors.index.json"


def load_gated_deltanet(path: str | os.PathLike, layer_idx: int, *, device=None, dtype=None, cls=None):
    """Build layer ``layer_idx`` of the checkpoint at ``path`` with its weights.

    Args:
        path: checkpoint directory (config.json + safetensors).
        layer_idx: index of a linear-attention layer of the model.
        device: where the parameters go (default: CPU).
        dtype: cast every floating tensor to this dtype (default: keep each tensor's checkpoint dtype).
        cls: the module class (default :class:`gdn.layers.GatedDeltaNet`).
    Returns:
        the module in eval mode.
    Raises:
        ValueError: no config/safetensors, a full-attention or out-of-range ``layer_idx``, a missing,
            unexpected or wrongly shaped tensor (the message names it).
    """
    from safetensors import safe_open

    if cls is None:
        from .gated_deltanet import GatedDeltaNet as cls
    if dtype is not None and (not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES):
        raise ValueError(f"dtype must be one of {', '.join(map(str, FLOAT_DTYPES))} or None, got {dtype!r}")
    if device is not None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"device must be a torch.device or its name, got {device!r} ({err})") from None
        if device.type == "cuda" and not torch.cuda.is_available():       # before any tensor is read
            raise ValueError(f"device {device} asked for, but torch sees no CUDA device here")
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"path must be a checkpoint directory, got {path!r}")
    config = GatedDeltaNetConfig.from_json_file(path)
    _check_layer_idx(config, layer_idx)

    # Expected names and shapes, from the module itself built on the meta device (no memory).
    module = cls(config, layer_idx, device="meta")
    expected = {name: tuple(t.shape) for name, t in module.state_dict().items()}

    found: dict[str, tuple[str, str]] = {}          # local name -> (file, checkpoint key)
    prefixes = [p.format(i=layer_idx) for p in PREFIXES]
    for file, keys in _layer_keys(path, prefixes):
        with safe_open(file, framework="pt") as f:
            names = f.keys() if keys is None else keys
            absent = [] if keys is None else sorted(set(keys) - set(f.keys()))
            if absent:
                raise ValueError(f"{INDEX_FILE} lists {absent[0]} in {os.path.basename(file)}, which does not hold it")
            for key in names:
                prefix = next((p for p in prefixes if key.startswith(p)), None)
                if prefix is None:
                    continue
                local = key[len(prefix):]
                if local in found:
                    other_file, other_key = found[local]
                    if other_key != key:
                        raise ValueError(f"layer {layer_idx}: tensor {local!r} found under two prefixes "
                                         f"({other_key!r} and {key!r})")
                    # (without an index: another *.safetensors in the folder)
                    raise ValueError(f"layer {layer_idx}: tensor {key!r} is in two files, {other_file} "
                                     f"and {file}; keep one (or list the shards in {INDEX_FILE})")
                found[local] = (file, key)

    if not found:
        raise ValueError(f"no tensor of layer {layer_idx} in {path} (looked for keys starting with "
                         f"{' or '.join(repr(p) for p in prefixes)})")
    first_local, (_, first_key) = next(iter(found.items()))
    prefix_used = first_key[: len(first_key) - len(first_local)]
    missing = sorted(set(expected) - set(found))
    if missing:
        raise ValueError(f"checkpoint {path} is missing tensor(s) of layer {layer_idx}: "
                         f"{', '.join(prefix_used + m for m in missing)}")
    unexpected = sorted(set(found) - set(expected))
    if unexpected:
        raise ValueError(f"checkpoint {path} has unexpected tensor(s) for a {config.layout} Gated DeltaNet "
                         f"layer: {', '.join(found[u][1] for u in unexpected)}")

    state = {}
    by_file: dict[str, list[str]] = {}
    for local, (file, _) in found.items():
        by_file.setdefault(file, []).append(local)
    for file, locals_ in by_file.items():
        with safe_open(file, framework="pt") as f:
            for local in locals_:
                key = found[local][1]
                shape = tuple(f.get_slice(key).get_shape())
                if shape != expected[local]:
                    raise ValueError(f"tensor {key} has shape {list(shape)}, expected {list(expected[local])} "
                                     f"(from config.json)")
                t = f.get_tensor(key)
                if not t.is_floating_point():
                    raise ValueError(f"tensor {key} is {t.dtype}, expected a floating-point tensor")
                if dtype is not None:
                    t = t.to(dtype)
                state[local] = t
    module.load_state_dict(state, strict=True, assign=True)
    if device is not None:
        module.to(device)
    return module.eval()


def _check_layer_idx(config: GatedDeltaNetConfig, layer_idx) -> None:
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, int) or layer_idx < 0:
        raise ValueError(f"layer_idx must be a non-negative int, got {layer_idx!r}")
    types = config.layer_types
    if not types:
        return
    if layer_idx >= len(types):
        raise ValueError(f"layer_idx {layer_idx} is out of range: the model has {len(types)} layers")
    if types[layer_idx] != "linear_attention":
        linear = [i for i, t in enumerate(types) if t == "linear_attention"]
        shown = ", ".join(map(str, linear[:12])) + (", ..." if len(linear) > 12 else "")
        raise ValueError(f"layer_idx {layer_idx} is a {types[layer_idx]!r} layer, not a Gated DeltaNet "
                         f"(linear_attention) layer; linear-attention layers are {shown}")


def _layer_keys(path: str, prefixes: list[str]):
    """Yield ``(file, keys)`` for the safetensors files that may hold the layer: from the shard
    index when there is one (keys known, other shards never opened), else every ``*.safetensors``
    in the directory (keys None: the file's own key list is scanned)."""
    index = os.path.join(path, INDEX_FILE)
    if os.path.isfile(index):
        index_json = read_json(index)
        weight_map = index_json.get("weight_map") if isinstance(index_json, dict) else None
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index} must be a JSON object with a \"weight_map\" object (tensor name -> file)")
        per_file: dict[str, list[str]] = {}
        for key, file in weight_map.items():
            if any(key.startswith(p) for p in prefixes):
                per_file.setdefault(file, []).append(key)
        for file, keys in sorted(per_file.items()):
            full = os.path.join(path, file)
            if not os.path.isfile(full):
                raise ValueError(f"{INDEX_FILE} lists {file} (holding {keys[0]}) but {full} does not exist")
            yield full, keys
        return
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise ValueError(f"path: no *.safetensors (nor {INDEX_FILE}) in {path}")
    for file in files:
        yield file, None
