"""The causal conv (torch path) against a float64 F.conv1d reference: states, odd lengths, packed
sequences (nothing leaks across boundaries), streaming, argument errors."""
import pytest
import torch

from gdn.layers import causal_conv1d
from tests.layers.conv_reference import random_conv_inputs, reference_conv
from tests.tolerances import assert_close


@pytest.mark.parametrize("T", [1, 2, 3, 7, 65])
@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("state", [False, True])
def test_dense_matches_reference(T, W, state):
    x, w, b, s0 = random_conv_inputs(2, T, 33, W, state=state, seed=T * 10 + W)
    y, final = causal_conv1d(x, w, b, initial_state=s0, output_final_state=True)
    y_ref, final_ref = reference_conv(x, w, b, s0)
    assert y.dtype == x.dtype and final.shape == (2, 33, W - 1)
    assert_close(y, y_ref, rtol=1e-6, name="y")
    assert_close(final, final_ref, rtol=0, name="final_state")   # a copy of inputs: exact


@pytest.mark.parametrize("lengths", [[5, 1, 9, 2], [0, 3, 0, 7, 1], [12]])
@pytest.mark.parametrize("state", [False, True])
def test_varlen_matches_each_sequence_alone(lengths, state):
    cu = torch.tensor([0] + lengths).cumsum(0)
    x, w, b, s0 = random_conv_inputs(1, int(cu[-1]), 10, 4, state=state, seed=len(lengths), cu_seqlens=cu)
    y, final = causal_conv1d(x, w, b, initial_state=s0, output_final_state=True, cu_seqlens=cu)
    y_ref, final_ref = reference_conv(x, w, b, s0, cu)
    assert_close(y, y_ref, rtol=1e-6, name="y")
    assert_close(final, final_ref, rtol=0, name="final_state")


def test_streaming_equals_one_call():
    """Token-by-token (decode) and piecewise calls carrying the state equal one call."""
    x, w, b, _ = random_conv_inputs(3, 11, 8, 4, state=False, seed=3)
    y_full, s_full = causal_conv1d(x, w, b, output_final_state=True)
    pieces, state = [], None
    for a, e in [(0, 2), (2, 3), (3, 4), (4, 9), (9, 10), (10, 11)]:
        y, state = causal_conv1d(x[:, a:e], w, b, initial_state=state, output_final_state=True)
        pieces.append(y)
    assert_close(torch.cat(pieces, 1), y_full, rtol=1e-6, name="y")
    assert torch.equal(state, s_full)


def test_no_activation_and_conv1d_weight_and_bf16():
    x, w, b, s0 = random_conv_inputs(2, 9, 6, 3, seed=5)
    y, _ = causal_conv1d(x, w[:, None, :], b, initial_state=s0, activation=None)   # nn.Conv1d's [D, 1, W]
    assert_close(y, reference_conv(x, w, b, s0, silu=False)[0], rtol=1e-6, name="y")
    yb, sb = causal_conv1d(x.bfloat16(), w, b, initial_state=s0, output_final_state=True)
    assert yb.dtype == torch.bfloat16 and sb.dtype == s0.dtype
    assert_close(yb, reference_conv(x.bfloat16(), w, b, s0)[0], rtol=1e-2, name="y bf16")


def test_argument_errors():
    x, w, b, s0 = random_conv_inputs(2, 5, 6, 4)
    with pytest.raises(ValueError, match="weight"):
        causal_conv1d(x, w[:5], b)
    with pytest.raises(ValueError, match="bias"):
        causal_conv1d(x, w, b[:2])
    with pytest.raises(ValueError, match="initial_state"):
        causal_conv1d(x, w, b, initial_state=s0[:, :, :2])
    with pytest.raises(ValueError, match="cu_seqlens"):
        causal_conv1d(x, w, b, cu_seqlens=torch.tensor([0, 5]))
    # Its values too, as the op checks them (the kernels trust them).
    x1 = x[:1]
    for cu, what in [([3, 5], "start at 0"), ([0, 4, 2, 5], "non-decreasing"), ([0, 2, 7], "end at T=5")]:
        with pytest.raises(ValueError, match=what):
            causal_conv1d(x1, w, b, cu_seqlens=torch.tensor(cu))
    with pytest.raises(TypeError, match="int32 or int64"):
        causal_conv1d(x1, w, b, cu_seqlens=torch.tensor([0.0, 5.0]))
    with pytest.raises(ValueError, match="backend"):
        causal_conv1d(x, w, b, backend="cuda")
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d(x, w, b, activation="relu")
    # Floats only (an integer x came back as truncated integers).
    for args, what in [((x.long(), w, b), "x"), ((x, w.int(), b), "weight"), ((x, w, b.long()), "bias")]:
        with pytest.raises(TypeError, match=f"{what} must be a floating-point"):
            causal_conv1d(*args)
    with pytest.raises(TypeError, match="initial_state must be a floating-point"):
        causal_conv1d(x, w, b, initial_state=s0.long())


@pytest.mark.parametrize("block_tokens", [1, 2, 3, 5])
def test_blocks_shorter_than_the_state(block_tokens):
    """causal_conv1d_torch's blocks of tokens may be shorter than the W - 1 state columns: the state's
    taps then reach into the second and later blocks too (a shape error before)."""
    from gdn.layers.conv import causal_conv1d_torch
    x, w, b, s0 = random_conv_inputs(2, 10, 6, 4, seed=3)
    y = causal_conv1d_torch(x, w, b, s0, None, True, block_tokens=block_tokens)
    assert_close(y, reference_conv(x, w, b, s0)[0], rtol=1e-6, name=f"y, blocks of {block_tokens}")


@pytest.mark.parametrize("cu", [None, torch.tensor([0, 2, 9])])
def test_float64_stays_float64(cu):
    x, w, b, s0 = random_conv_inputs(1 if cu is not None else 2, 9, 6, 4, seed=8, cu_seqlens=cu)
    x, w, b, s0 = x.double(), w.double(), b.double(), s0.double()
    y, final = causal_conv1d(x, w, b, initial_state=s0, output_final_state=True, cu_seqlens=cu)
    y_ref, final_ref = reference_conv(x, w, b, s0, cu)
    assert y.dtype == torch.float64
    assert_close(y, y_ref, rtol=1e-12, name="y")
    assert_close(final, final_ref, rtol=0, name="final_state")
