"""gdn.integrations.transformers: a patched tiny Qwen3.5 / Qwen3.5-MoE / Qwen3-Next gives transformers'
logits and greedy tokens, its linear-attention math runs through gdn (prefill and decode), whatever
transformers bound at import (e.g. FLA's kernels, which crash on CPU tensors), and it all undoes."""
import functools
import importlib
import importlib.util
import io

import pytest
import torch

import gdn
from gdn.integrations.transformers import (MODELING_MODULES, REPLACEMENTS, causal_conv1d_update, is_patched, patch,
                                           patch_transformers, transformers_torch_code, unpatch,
                                           unpatch_transformers)
from tests.layers.conv_reference import random_conv_inputs, reference_conv
from tests.layers.tiny_models import no_grad_and_torch_code, tiny_model  # noqa: F401 (fixture)
from tests.tolerances import assert_close

MODULE_OF = dict(zip(["qwen3_5", "qwen3_5_moe", "qwen3_next"], MODELING_MODULES))
NEW_TOKENS = 6


@pytest.fixture(autouse=True)
def _reference_setup(no_grad_and_torch_code):
    """"transformers" below means its own torch code, whatever kernels it bound at import."""


@pytest.fixture
def gdn_calls(monkeypatch):
    """Counts calls of gdn's two FLA-compatible entry points (the stand-ins look them up per call)."""
    calls = {"chunk": 0, "recurrent": 0}
    for name, key in [("chunk_gated_delta_rule", "chunk"), ("fused_recurrent_gated_delta_rule", "recurrent")]:
        original = getattr(gdn, name)

        def counting(*args, _original=original, _key=key, **kwargs):
            calls[_key] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(gdn, name, counting)
    return calls


def prompt(batch=2, T=21, seed=0):
    return torch.randint(0, 128, (batch, T), generator=torch.Generator().manual_seed(seed))


def greedy(model, ids):
    out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                         pad_token_id=0)
    return out[:, ids.shape[1]:]


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe", "qwen3_next"])
def test_patched_model_matches_transformers(kind, gdn_calls):
    model, ids = tiny_model(kind), prompt()
    logits, tokens = model(ids).logits, greedy(model, ids)
    assert gdn_calls == {"chunk": 0, "recurrent": 0}

    assert patch(model) is model and is_patched(model)
    assert_close(model(ids).logits, logits, rtol=2e-5, name=f"{kind} logits")
    assert gdn_calls["chunk"] == 3                               # one per linear-attention layer
    assert torch.equal(greedy(model, ids), tokens)
    assert gdn_calls["recurrent"] == 3 * (NEW_TOKENS - 1)        # decode went through gdn too

    unpatch(model)
    assert not is_patched(model) and "forward" not in vars(model.model.layers[0].linear_attn)
    before = dict(gdn_calls)
    assert_close(model(ids).logits, logits, rtol=0, name="unpatched logits")
    assert gdn_calls == before


def test_left_padded_batch():
    model, ids = tiny_model("qwen3_next"), prompt()
    mask = torch.ones_like(ids)
    mask[1, :5], ids[1, :5] = 0, 0                               # second row left-padded
    logits = model(ids, attention_mask=mask).logits
    tokens = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    patch(model)
    assert_close(model(ids, attention_mask=mask).logits, logits, rtol=2e-5, name="logits")
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                      pad_token_id=0), tokens)


def test_patch_is_idempotent_per_model_and_keeps_weights(gdn_calls):
    patched, other = tiny_model("qwen3_5"), tiny_model("qwen3_5")
    weights = {k: v.clone() for k, v in patched.state_dict().items()}
    patch(patched)
    patch(patched)
    for k, v in patched.state_dict().items():
        assert torch.equal(v, weights[k]), k
    other(prompt())                                              # a model not patched: transformers' path
    assert gdn_calls["chunk"] == 0
    patched(prompt())
    assert gdn_calls["chunk"] == 3


def test_works_when_transformers_bound_kernels_that_fail_on_cpu(monkeypatch):
    """What happens with fla-core installed: transformers binds FLA's Triton kernels at import and
    they fail on CPU tensors. Simulate by binding functions that raise."""
    model, ids = tiny_model("qwen3_5"), prompt()
    logits, tokens = model(ids).logits, greedy(model, ids)
    module = importlib.import_module(MODULE_OF["qwen3_5"])

    def crash(*args, **kwargs):
        raise RuntimeError("0 active drivers ([]). There should only be one.")

    for name in REPLACEMENTS:
        monkeypatch.setattr(module, name, crash)
    with pytest.raises(RuntimeError, match="active drivers"):
        model(ids)
    patch(model)
    assert_close(model(ids).logits, logits, rtol=2e-5, name="logits")
    assert torch.equal(greedy(model, ids), tokens)
    unpatch(model)


def test_patch_transformers_covers_models_created_later(gdn_calls):
    reference = tiny_model("qwen3_5_moe")
    ids = prompt(batch=1)
    logits = reference(ids).logits
    originals = {name: getattr(importlib.import_module(name), "causal_conv1d_fn") for name in MODELING_MODULES}
    try:
        assert patch_transformers() == list(MODELING_MODULES)
        patch_transformers()                                     # twice: no-op, originals kept
        model = tiny_model("qwen3_5_moe")                        # same seed, same weights
        assert is_patched(model)
        assert_close(model(ids).logits, logits, rtol=2e-5, name="logits")
        assert gdn_calls["chunk"] == 3
    finally:
        unpatch_transformers()
    for name, fn in originals.items():
        assert getattr(importlib.import_module(name), "causal_conv1d_fn") is fn
    assert not is_patched(reference)


def accelerate_hook(module, calls: list):
    """What accelerate's add_hook_to_module does (device_map offload): the forward in _old_forward,
    the instance's forward a partial that runs the hook around it."""
    module._hf_hook = object()
    module._old_forward = module.forward

    def new_forward(module, *args, **kwargs):
        calls.append(type(module).__name__)
        return module._old_forward(*args, **kwargs)
    module.forward = functools.partial(new_forward, module)


def linear_layers(model):
    return [m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")]


@pytest.mark.parametrize("hooked", ["before", "after"])
def test_patch_keeps_accelerate_hooks(hooked, gdn_calls):
    """A hook added before the patch still runs, around gdn's forward; one added after the patch
    survives unpatch, around transformers' forward (before: the patch dropped the first, unpatch
    deleted the second)."""
    model, ids = tiny_model("qwen3_5"), prompt()
    logits = model(ids).logits
    hooks = []
    if hooked == "before":
        for layer in linear_layers(model):
            accelerate_hook(layer, hooks)
    patch(model)
    if hooked == "after":
        for layer in linear_layers(model):
            accelerate_hook(layer, hooks)
    assert is_patched(model)
    assert_close(model(ids).logits, logits, rtol=2e-5, name="logits")
    assert gdn_calls["chunk"] == 3 and len(hooks) == 3
    unpatch(model)
    assert not is_patched(model)
    assert_close(model(ids).logits, logits, rtol=0, name="logits after unpatch")
    assert gdn_calls["chunk"] == 3 and len(hooks) == 6


def test_patch_refuses_a_forward_it_would_drop():
    model = tiny_model("qwen3_5")
    layer = linear_layers(model)[0]
    layer.forward = lambda *args, **kwargs: None
    with pytest.raises(ValueError, match="its forward was replaced on the instance"):
        patch(model)


def test_a_pickled_patch_is_not_claimed_and_patches_again(gdn_calls):
    """Functions pickle by name, so a loaded copy of a patched model runs transformers' forward:
    is_patched says so, and patch() applies again."""
    model, ids = tiny_model("qwen3_5"), prompt()
    buffer = io.BytesIO()
    torch.save(patch(model), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert not is_patched(loaded)
    loaded(ids)
    assert gdn_calls["chunk"] == 0
    patch(loaded)
    assert is_patched(loaded)
    assert_close(loaded(ids).logits, model(ids).logits, rtol=0, name="logits")
    assert gdn_calls["chunk"] == 6
    unpatch(loaded)
    assert not is_patched(loaded)


def test_process_wide_patch_is_undone_by_its_own_call(gdn_calls):
    """unpatch(model) cannot undo patch_transformers() (it would silently do nothing); inside
    transformers_torch_code() the models run transformers' functions, not gdn's stand-ins."""
    model, ids = tiny_model("qwen3_5"), prompt()
    try:
        patch_transformers()
        with pytest.raises(ValueError, match="unpatch_transformers"):
            unpatch(model)
        with transformers_torch_code():
            model(ids)
        assert gdn_calls["chunk"] == 0
        model(ids)
        assert gdn_calls["chunk"] == 3
    finally:
        unpatch_transformers()


def test_patch_refuses_a_model_without_gated_deltanet():
    with pytest.raises(ValueError, match="no transformers Gated DeltaNet layer"):
        patch(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="model must be"):
        patch("model")


@pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="fla-core not installed")
@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_next"])
def test_with_fla_core_installed(kind, monkeypatch):
    """The real case: transformers bound FLA's Triton kernels, which fail on CPU tensors."""
    model, ids = tiny_model(kind), prompt()
    logits, tokens = model(ids).logits, greedy(model, ids)         # transformers' torch code
    monkeypatch.undo()                                              # back to what transformers bound
    with pytest.raises(RuntimeError):
        model(ids)
    patch(model)
    assert_close(model(ids).logits, logits, rtol=2e-5, name=f"{kind} logits")
    assert torch.equal(greedy(model, ids), tokens)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_patched_model_on_cuda():
    model, ids = tiny_model("qwen3_5"), prompt()
    logits, tokens = model(ids).logits, greedy(model, ids)
    patch(model.cuda())
    assert_close(model(ids.cuda()).logits, logits, rtol=1e-4, name="cuda logits")
    assert torch.equal(greedy(model, ids.cuda()).cpu(), tokens)


@pytest.mark.parametrize("L", [0, 2])
def test_conv_update_from_a_state_shorter_than_the_window(L):
    """causal_conv1d_update with a conv state of L < W - 1 inputs: zeros before them (as a conv with
    zero left padding), and the state rolled in place to the last L inputs. (Mutant: the zero padding
    dropped: the conv then refused the [B, D, L] state.)"""
    x, w, b, _ = random_conv_inputs(2, 1, 12, 4, state=False, seed=13)
    state = torch.randn(2, 12, L, generator=torch.Generator().manual_seed(14))
    padded = torch.cat([torch.zeros(2, 12, 3 - L), state], dim=-1)
    y_ref, final_ref = reference_conv(x, w, b, padded)
    conv_state = state.clone()
    y = causal_conv1d_update(x.transpose(1, 2), conv_state, w, b, activation="silu")
    assert_close(y.transpose(1, 2), y_ref, rtol=1e-6, name="y")
    assert torch.equal(conv_state, final_ref[:, :, 3 - L:].float())
