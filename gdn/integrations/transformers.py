"""Run the linear-attention layers of transformers' Qwen3.5 / Qwen3.5-MoE / Qwen3-Next through gdn.

transformers (5.x) computes these layers in ``<Model>GatedDeltaNet.forward``, which calls four
module-level functions of its modeling file: ``torch_chunk_gated_delta_rule`` (prefill),
``torch_recurrent_gated_delta_rule`` (decode), ``causal_conv1d_fn`` and ``causal_conv1d_update``
(the short conv, prefill / decode). At import, transformers binds each name to FLA's or the
causal-conv1d package's kernel when those are importable, else to its reference torch code; FLA's
Triton kernels then get CPU tensors too and crash. Everything else in the layer (projections,
gates, norm, cache bookkeeping) is plain torch and stays as it is.

So gdn swaps exactly those four functions for its own, with the same signatures, and leaves weights,
module structure and transformers' cache handling untouched:

- ``patch(model)`` / ``unpatch(model)``: one model. Each layer's ``forward`` is replaced (on the
  instance) by a copy of the class's forward whose global names resolve to gdn's functions; other
  models in the process keep transformers' behaviour.
- ``patch_transformers()`` / ``unpatch_transformers()``: process-wide, by rebinding the four names
  in the modeling modules: every model of these families, created before or after, runs on gdn.

One difference on purpose: for a packed batch (``cu_seq_lens_q`` passed through the model's
kwargs), gdn's conv does not leak across sequence boundaries; transformers' torch conv does.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import types

import torch

import gdn
from gdn.layers.conv import causal_conv1d

# The modeling modules whose Gated DeltaNet layers call the four functions below.
MODELING_MODULES = (
    "transformers.models.qwen3_5.modeling_qwen3_5",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
    "transformers.models.qwen3_next.modeling_qwen3_next",
)
_PATCHED_FLAG = "_gdn_patched"


# --- gdn's stand-ins, with transformers' signatures ------------------------------------------------

def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None,
                           scale=None, **unused):
    """Stand-in for transformers' ``torch_chunk_gated_delta_rule`` (prefill).

    Args:
        query, key: ``[B, T, H, K]``; value: ``[B, T, HV, V]``; g, beta: ``[B, T, HV]``.
        initial_state: ``[N, HV, K, V]`` float32 or None. cu_seqlens: ``[N+1]`` or None.
        chunk_size and any other keyword (transformers forwards the model's kwargs) are ignored:
        gdn picks its own chunking.
    Returns:
        ``(o [B, T, HV, V] in value's dtype, final_state [N, HV, K, V] float32 or None)``.
    """
    return gdn.chunk_gated_delta_rule(query, key, value, g, beta, scale=scale, initial_state=initial_state,
                                      output_final_state=output_final_state,
                                      use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens)


def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, cu_seqlens=None, scale=None, **unused):
    """Stand-in for transformers' ``torch_recurrent_gated_delta_rule`` (decode, one token per
    sequence). Same tensors as :func:`chunk_gated_delta_rule`."""
    return gdn.fused_recurrent_gated_delta_rule(query, key, value, g, beta, scale=scale,
                                                initial_state=initial_state,
                                                output_final_state=output_final_state,
                                                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                                cu_seqlens=cu_seqlens)


def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
    """Stand-in for transformers' ``causal_conv1d_fn`` (prefill conv, zero left padding).

    Args:
        hidden_states: ``[B, D, T]`` (transformers' channels-first view of the projection).
        weight: ``[D, W]``; bias: ``[D]`` or None; activation: "silu" or None.
        kwargs: the model's kwargs; ``cu_seq_lens_q`` (packed batch, B == 1, T == its last entry)
            keeps the conv inside each sequence.
    Returns:
        ``[B, D, T]`` in hidden_states' dtype.
    """
    x = hidden_states.transpose(1, 2)                         # [B, T, D], a view
    cu = kwargs.get("cu_seq_lens_q")
    if cu is not None and not (x.shape[0] == 1 and cu.numel() >= 2 and int(cu[-1]) == x.shape[1]):
        cu = None                                             # not the packed tokens themselves
    y, _ = causal_conv1d(x, weight, bias, cu_seqlens=cu, activation=activation)
    return y.transpose(1, 2)


def causal_conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None, **kwargs):
    """Stand-in for transformers' ``causal_conv1d_update`` (decode conv, state updated in place).

    Args:
        hidden_states: ``[B, D, T]`` new inputs (T = 1 in decode).
        conv_state: ``[B, D, L]`` the last L inputs (transformers keeps L = W), updated in place to
            the last L inputs after these.
        weight: ``[D, W]``; bias: ``[D]`` or None; activation: "silu" or None.
    Returns:
        ``[B, D, T]`` in hidden_states' dtype.
    """
    W, L = weight.shape[-1], conv_state.shape[-1]
    previous = conv_state[:, :, max(L - (W - 1), 0):]
    if previous.shape[-1] < W - 1:                            # a shorter state: zeros before it
        previous = torch.nn.functional.pad(previous, (W - 1 - previous.shape[-1], 0))
    y, _ = causal_conv1d(hidden_states.transpose(1, 2), weight, bias, initial_state=previous,
                         activation=activation)
    if L:
        conv_state.copy_(torch.cat([conv_state, hidden_states.to(conv_state.dtype)], dim=-1)[:, :, -L:])
    return y.transpose(1, 2)


# Name in the modeling module -> gdn's function.
REPLACEMENTS = {
    "torch_chunk_gated_delta_rule": chunk_gated_delta_rule,
    "torch_recurrent_gated_delta_rule": recurrent_gated_delta_rule,
    "causal_conv1d_fn": causal_conv1d_fn,
    "causal_conv1d_update": causal_conv1d_update,
}


# --- one model ----------------------------------------------------------------------------------

def patch(model: torch.nn.Module) -> torch.nn.Module:
    """Make one transformers Qwen3.5 / Qwen3.5-MoE / Qwen3-Next model compute its Gated DeltaNet
    layers with gdn (prefill and decode). Weights and modules are untouched; reversible with
    :func:`unpatch`; patching twice is a no-op. A layer with accelerate's hook (device_map offload)
    keeps it: the hook's inner forward is the one replaced. A patched model does not stay patched
    through pickling (functions pickle by name): :func:`is_patched` then says False, and patching
    the loaded model again works.

    Args:
        model: any ``nn.Module`` containing transformers ``*GatedDeltaNet`` layers (a CausalLM,
            the base model, or a single layer).
    Returns:
        the same model.
    Raises:
        ValueError: the model has no such layer, or a layer's forward was replaced on the instance
            by something else (patching would drop it).
    """
    layers = _gated_deltanet_layers(model)
    if not layers:
        raise ValueError(f"model: no transformers Gated DeltaNet layer (from {', '.join(MODELING_MODULES)}) "
                         f"found in {type(model).__name__}")
    for layer in layers:
        if _runs_patch(layer):
            continue
        _drop_stale_patch(layer)
        # accelerate's hooks (add_hook_to_module) call module._old_forward from module.forward.
        target = "_old_forward" if hasattr(layer, "_hf_hook") and hasattr(layer, "_old_forward") else "forward"
        previous = vars(layer).get(target)
        if previous is not None and getattr(previous, "__func__", None) is not type(layer).forward:
            raise ValueError(f"cannot patch {type(layer).__name__}: its {target} was replaced on the instance "
                             f"by {previous!r}, which patching would drop")
        forward = _rebind_globals(type(layer).forward, sys.modules[type(layer).__module__])
        forward._gdn_patched = True
        bound = types.MethodType(forward, layer)
        setattr(layer, target, bound)
        setattr(layer, _PATCHED_FLAG, (target, previous))
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`patch` on this model: each layer's forward goes back to what it was (its class's,
    or the one accelerate's hook wraps; a hook added after the patch is kept).

    Raises:
        ValueError: the model runs on gdn through :func:`patch_transformers` (undo that with
            :func:`unpatch_transformers`).
    """
    layers = _gated_deltanet_layers(model)
    process_wide = sorted({type(layer).__module__ for layer in layers} & set(_ORIGINALS))
    if process_wide:
        raise ValueError(f"{', '.join(process_wide)} runs on gdn process-wide (patch_transformers()): "
                         "unpatch_transformers() undoes that")
    for layer in layers:
        state = getattr(layer, _PATCHED_FLAG, None)
        if not state:
            continue
        target, previous = state
        for name in ("forward", "_old_forward"):        # a hook added after the patch wraps ours
            if _is_ours(vars(layer).get(name)):
                _restore(layer, name, previous if name == target else types.MethodType(type(layer).forward, layer))
        delattr(layer, _PATCHED_FLAG)
    return model


def _restore(layer, name: str, previous) -> None:
    """The instance attribute ``name`` back to ``previous`` (None: none, the class's forward)."""
    if previous is None:
        delattr(layer, name)
    else:
        setattr(layer, name, previous)


def is_patched(model: torch.nn.Module) -> bool:
    """True when every Gated DeltaNet layer of ``model`` runs on gdn (by :func:`patch` or
    :func:`patch_transformers`)."""
    layers = _gated_deltanet_layers(model)
    return bool(layers) and all(_runs_patch(layer) or type(layer).__module__ in _ORIGINALS for layer in layers)


def _is_ours(method) -> bool:
    return getattr(getattr(method, "__func__", None), "_gdn_patched", False)


def _runs_patch(layer) -> bool:
    """The layer's forward (or the one its accelerate hook calls) is patch's copy."""
    return bool(getattr(layer, _PATCHED_FLAG, None)) and any(
        _is_ours(vars(layer).get(name)) for name in ("forward", "_old_forward"))


def _drop_stale_patch(layer) -> None:
    """A patch's record on a layer that no longer runs it (unpickled: the forward it installed came
    back as the class's function, which pickles by name): put the layer back as before the patch."""
    state = getattr(layer, _PATCHED_FLAG, None)
    if not state:
        return
    target, previous = state
    if getattr(vars(layer).get(target), "__func__", None) is type(layer).forward:
        _restore(layer, target, previous)
    delattr(layer, _PATCHED_FLAG)


def _gated_deltanet_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return [m for m in model.modules()
            if type(m).__module__ in MODELING_MODULES and type(m).__name__.endswith("GatedDeltaNet")]


def _rebind_globals(func, module: types.ModuleType):
    """A copy of ``func`` (possibly a decorator's wrapper around it) whose functions defined in
    ``module`` see gdn's replacements instead of the module's four globals. The module itself is
    not modified: the copy gets its own globals dict (a snapshot of the module's)."""
    target = module.__dict__
    new_globals = dict(target)
    new_globals.update(REPLACEMENTS)

    def rebuild(f, depth=0):
        if f.__globals__ is target:
            return _copy_function(f, new_globals, f.__closure__)
        if not f.__closure__ or depth > 4:
            return None
        # A decorator's wrapper (e.g. transformers' force_accelerate_hooks): rebuild the wrapped
        # function found in its closure and a wrapper around the copy.
        cells, changed = [], False
        for cell in f.__closure__:
            inner = cell.cell_contents if _cell_filled(cell) else None
            copy = rebuild(inner, depth + 1) if isinstance(inner, types.FunctionType) else None
            cells.append(types.CellType(copy) if copy is not None else cell)
            changed |= copy is not None
        return _copy_function(f, f.__globals__, tuple(cells)) if changed else None

    rebuilt = rebuild(func)
    if rebuilt is None:
        raise ValueError(f"cannot patch {func.__qualname__}: its code is not from {module.__name__} "
                         "(was the layer's forward replaced by another integration?)")
    return rebuilt


def _copy_function(f, globals_, closure):
    g = types.FunctionType(f.__code__, globals_, f.__name__, f.__defaults__, closure)
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__ = f.__qualname__
    g.__doc__ = f.__doc__
    g.__dict__.update(f.__dict__)
    return g


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


# --- process-wide -------------------------------------------------------------------------------

_ORIGINALS: dict[str, dict[str, object]] = {}     # module name -> {function name: original}


def patch_transformers() -> list[str]:
    """Process-wide: every transformers Qwen3.5 / Qwen3.5-MoE / Qwen3-Next model, existing or
    created afterwards, runs its Gated DeltaNet layers on gdn. Reversible with
    :func:`unpatch_transformers`; calling twice is a no-op.

    Returns:
        the modeling modules that were patched (those this transformers version has).
    """
    patched = []
    for name in MODELING_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        missing = [f for f in REPLACEMENTS if not hasattr(module, f)]
        if missing:
            raise RuntimeError(f"{name} has no {missing}: this transformers version computes its Gated "
                               "DeltaNet layers differently; gdn's patch does not know it")
        if name not in _ORIGINALS:
            _ORIGINALS[name] = {f: getattr(module, f) for f in REPLACEMENTS}
            for f, replacement in REPLACEMENTS.items():
                setattr(module, f, replacement)
        patched.append(name)
    return patched


def unpatch_transformers() -> None:
    """Undo :func:`patch_transformers` (restore transformers' own functions)."""
    for name, originals in list(_ORIGINALS.items()):
        module = sys.modules[name]
        for f, original in originals.items():
            setattr(module, f, original)
        del _ORIGINALS[name]


@contextlib.contextmanager
def transformers_torch_code():
    """Within the block, the modeling modules call transformers' own torch functions, even where
    transformers bound FLA's / causal-conv1d's kernels at import (``functools.wraps`` kept the torch
    function in ``__wrapped__``). For comparing with transformers' reference on any machine; the
    module functions in place before the block are restored after it."""
    saved = []
    try:
        for name in MODELING_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            for f in REPLACEMENTS:
                fn = getattr(module, f)
                saved.append((module, f, fn))
                original = _ORIGINALS.get(name, {}).get(f, fn)        # transformers', not gdn's stand-in
                setattr(module, f, getattr(original, "__wrapped__", original))
        yield
    finally:
        for module, f, fn in reversed(saved):
            setattr(module, f, fn)
