"""gdn's GatedDeltaNet, loaded from a saved checkpoint, against the transformers layer it was saved
from: prefill, decode, prefill + decode, chunked prefill, packed (varlen) batches."""
import pytest
import torch

from gdn.layers import GatedDeltaNet, GatedDeltaNetCache
from tests.tolerances import assert_close

LAYER = 1
RTOL = 2e-5          # float32, relative in norm (tests/tolerances.py)


def hf_layer(model, i=LAYER):
    return model.model.layers[i].linear_attn


def hf_stream(model, pieces, i=LAYER):
    """transformers' layer over consecutive pieces [B, T_j, hidden] with its own cache."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    layer = hf_layer(model, i)
    return torch.cat([layer(p, cache_params=cache) for p in pieces], dim=1), cache


def ours_stream(layer, pieces, cache=None):
    cache = GatedDeltaNetCache() if cache is None else cache
    return torch.cat([layer(p, cache=cache) for p in pieces], dim=1), cache


def inputs(B, T, seed=0, hidden=64):
    return torch.randn(B, T, hidden, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def loaded(saved):
    kind, model, path = saved
    return kind, model, GatedDeltaNet.from_pretrained(path, LAYER)


@pytest.mark.parametrize("T", [1, 37, 130])          # 130: three chunks of 64, the last partial
def test_prefill_matches_transformers(loaded, T):
    kind, model, ours = loaded
    x = inputs(2, T, seed=T)
    assert_close(ours(x), hf_layer(model)(x), rtol=RTOL, name=f"{kind} prefill T={T}")


def test_prefill_then_decode_matches_transformers_and_one_prefill(loaded):
    kind, model, ours = loaded
    x = inputs(2, 45, seed=1)
    pieces = [x[:, :40]] + [x[:, t:t + 1] for t in range(40, 45)]
    y, cache = ours_stream(ours, pieces)
    y_hf, hf_cache = hf_stream(model, pieces)
    assert_close(y, y_hf, rtol=RTOL, name=f"{kind} prefill+decode vs transformers")
    assert_close(y, ours(x), rtol=RTOL, name=f"{kind} prefill+decode vs one prefill of T+n")
    hf_state = hf_cache.layers[LAYER]
    assert cache.recurrent_state.dtype == torch.float32
    assert_close(cache.recurrent_state, hf_state.recurrent_states[0], rtol=RTOL, name="recurrent state")
    # transformers keeps the last W conv inputs, gdn the last W-1.
    assert torch.equal(cache.conv_state, hf_state.conv_states[0][:, :, 1:])


def test_decode_uses_the_recurrent_backend(loaded, monkeypatch):
    import gdn

    _, _, ours = loaded
    seen = []
    original = gdn.gated_delta_rule
    monkeypatch.setattr(gdn, "gated_delta_rule", lambda *a, **kw: seen.append(kw["backend"]) or original(*a, **kw))
    cache = GatedDeltaNetCache()
    ours(inputs(1, 8), cache=cache)
    ours(inputs(1, 1), cache=cache)
    assert seen == ["auto", "recurrent"]


def test_decode_from_a_short_prefill_and_chunked_prefill(loaded):
    kind, model, ours = loaded
    x = inputs(3, 20, seed=2)
    # Prefill shorter than the conv kernel, then decode: the conv state is partly zeros.
    pieces = [x[:, :2]] + [x[:, t:t + 1] for t in range(2, 6)]
    assert_close(ours_stream(ours, pieces)[0], hf_stream(model, pieces)[0], rtol=RTOL, name=f"{kind} short")
    # Prefill in three pieces carrying the cache = one prefill.
    assert_close(ours_stream(ours, [x[:, :7], x[:, 7:8], x[:, 8:20]])[0], ours(x), rtol=RTOL, name="chunked")


def test_varlen_matches_each_sequence_alone(loaded):
    kind, model, ours = loaded
    lengths = [9, 1, 0, 70, 3]
    xs = [inputs(1, n, seed=10 + j) for j, n in enumerate(lengths)]
    cu = torch.tensor([0] + lengths).cumsum(0)
    cache = GatedDeltaNetCache()
    y = ours(torch.cat(xs, dim=1), cache=cache, cu_seqlens=cu)
    expected = torch.cat([hf_layer(model)(x) for x in xs if x.shape[1]], dim=1)
    assert_close(y, expected, rtol=RTOL, name=f"{kind} varlen")
    # The packed prefill leaves one state per sequence; decoding all of them as a batch of 5 equals
    # decoding each after its own prefill.
    assert cache.batch_size == len(lengths)
    step = inputs(len(lengths), 1, seed=99)
    y_step = ours(step, cache=cache)
    for j, x in enumerate(xs):
        alone = GatedDeltaNetCache()
        if x.shape[1]:
            ours(x, cache=alone)
        assert_close(y_step[j:j + 1], ours(step[j:j + 1], cache=alone), rtol=RTOL, name=f"decode seq {j}")


def test_cache_select_reorders_sequences(loaded):
    _, _, ours = loaded
    x = inputs(3, 10, seed=4)
    cache = GatedDeltaNetCache()
    ours(x, cache=cache)
    cache.select([2, 1, 0])                       # a list, as a tensor
    cache.select(torch.tensor([0, 2]))            # rows 2 and 0 of the first call
    step = inputs(2, 1, seed=5)
    y = ours(step, cache=cache)
    for row, src in enumerate([2, 0]):
        alone = GatedDeltaNetCache()
        ours(x[src:src + 1], cache=alone)
        assert_close(y[row:row + 1], ours(step[row:row + 1], cache=alone), rtol=RTOL, name=f"row {row}")


def test_bfloat16_layer_close_to_float32(loaded):
    _, _, ours = loaded
    x = inputs(1, 50, seed=6)
    ours_bf16 = GatedDeltaNet(ours.config, LAYER).to(torch.bfloat16)
    ours_bf16.load_state_dict(ours.state_dict())
    y = ours_bf16(x.bfloat16())
    assert y.dtype == torch.bfloat16
    assert_close(y.float(), ours(x), rtol=3e-2, name="bf16 layer")


def test_input_errors(loaded):
    _, _, ours = loaded
    with pytest.raises(ValueError, match="hidden_states"):
        ours(torch.randn(2, 3, 65))
    cache = GatedDeltaNetCache()
    ours(inputs(2, 3), cache=cache)
    with pytest.raises(ValueError, match="cache holds 2 sequences"):
        ours(inputs(3, 1), cache=cache)
    with pytest.raises(ValueError, match="cache must be"):
        ours(inputs(2, 1), cache={})
    # Packed boundaries are checked before the conv reads them.
    with pytest.raises(ValueError, match="cu_seqlens must end at T=5"):
        ours(inputs(1, 5), cu_seqlens=torch.tensor([0, 2, 4]))
    with pytest.raises(TypeError, match="cu_seqlens must be a 1-D integer torch.Tensor"):
        ours(inputs(1, 5), cu_seqlens=[0, 2, 5])
    import numpy as np
    for index in (torch.tensor([0.0, 1.0]), [True, False], [0.9, 1.5], np.array([True, False])):
        with pytest.raises(TypeError, match="index must hold integers"):      # never cast to numbers
            cache.select(index)
    cache.select(np.array([1, 0]))                                             # integers in any container
    assert cache.recurrent_state.shape[0] == 2
    with pytest.raises(IndexError, match="from 0 to N - 1 = 1"):
        cache.select([0, 5])
    with pytest.raises(TypeError, match="hidden_states must be in the layer's dtype"):
        ours(inputs(2, 1).double(), cache=cache)
    with pytest.raises(TypeError, match="hidden_states must be a torch.Tensor"):
        ours([[0.0]])


def test_cache_errors_name_the_field(loaded):
    """A cache holding one state alone, or a state of another layer's shape, is refused by field name
    (one state alone would restart the conv from zeros, or drop the state, with no error); an empty
    selection empties the batch."""
    _, _, ours = loaded
    full = GatedDeltaNetCache()
    ours(inputs(2, 3), cache=full)
    for kept in ("conv_state", "recurrent_state"):
        half = GatedDeltaNetCache(**{kept: getattr(full, kept)})
        with pytest.raises(ValueError, match="is None but the other state is set"):
            ours(inputs(2, 1), cache=half)
    wrong = GatedDeltaNetCache(full.conv_state, full.recurrent_state[..., :-1])
    with pytest.raises(ValueError, match="cache.recurrent_state must have shape"):
        ours(inputs(2, 1), cache=wrong)
    wrong = GatedDeltaNetCache(full.conv_state[..., :-1], full.recurrent_state)
    with pytest.raises(ValueError, match="cache.conv_state must have shape"):
        ours(inputs(2, 1), cache=wrong)
    full.select([])
    assert full.recurrent_state.shape[0] == 0 and full.conv_state.shape[0] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(loaded):
    """On the GPU: Triton conv, the op's GPU backend for prefill, recurrent decode; packed too."""
    kind, _, ours = loaded
    gpu = GatedDeltaNet(ours.config, LAYER).cuda()
    gpu.load_state_dict(ours.state_dict())
    x = inputs(2, 150, seed=7)
    pieces = [x[:, :140]] + [x[:, t:t + 1] for t in range(140, 150)]
    y_cpu, cache_cpu = ours_stream(ours, pieces)
    y_gpu, cache_gpu = ours_stream(gpu, [p.cuda() for p in pieces])
    assert_close(y_gpu, y_cpu, rtol=1e-4, name=f"{kind} cuda prefill+decode")
    assert_close(cache_gpu.recurrent_state, cache_cpu.recurrent_state, rtol=1e-4, name="state")
    cu = torch.tensor([0, 5, 5, 90, 150])
    y = gpu(x[:1].cuda(), cu_seqlens=cu.cuda())
    assert_close(y, ours(x[:1], cu_seqlens=cu), rtol=1e-4, name=f"{kind} cuda varlen")
    bf16 = GatedDeltaNet(ours.config, LAYER).cuda().to(torch.bfloat16)
    bf16.load_state_dict(ours.state_dict())
    assert_close(bf16(x.cuda().bfloat16()).float(), ours(x), rtol=3e-2, name=f"{kind} cuda bf16")
