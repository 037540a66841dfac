"""triton_forward's window_tokens: one long sequence walked in windows, each window a call from the
previous one's final state (gdn.ops.triton.forward._windows), against the same calls chained by hand
(bit for bit) and the float64 reference; "auto" (the default) against the windows it chooses.
Interpreter-sized: windows of a few chunks."""
import numpy as np
import pytest
import torch

from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close

pytest.importorskip("triton")
from gdn.ops.triton import forward, triton_forward  # noqa: E402  (needs triton)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SCALE = 32 ** -0.5


def _chained(q, k, v, g, beta, window, initial_state):
    """The windows' calls made by hand: o concatenated, the last final state."""
    outs, state = [], initial_state
    for t0 in range(0, q.shape[1], window):
        part = slice(t0, t0 + window)
        o, state = triton_forward(q[:, part], k[:, part], v[:, part], g[:, part], beta[:, part], scale=SCALE,
                                  initial_state=state, output_final_state=True, use_qk_l2norm=True, chunk_size=16)
        outs.append(o)
    return torch.cat(outs, 1), state


@pytest.mark.parametrize("T, window", [(100, 32), (96, 32), (40, 48)])
@pytest.mark.parametrize("h0", [False, True])
def test_windows_are_the_chained_calls(T, window, h0):
    q, k, v, g, beta, S0 = random_inputs(1, T, 2, 4, 32, 32, dtype=torch.bfloat16, initial_state=h0, seed=5,
                                         device=DEVICE)
    o, S = triton_forward(q, k, v, g, beta, scale=SCALE, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=16, window_tokens=window)
    o_hand, S_hand = _chained(q, k, v, g, beta, window, S0)
    assert torch.equal(o, o_hand) and torch.equal(S, S_hand)
    o_ref, S_ref = reference_gdn(*(x.double() for x in (q, k, v, g, beta)),
                                 initial_state=None if S0 is None else S0.double(), use_qk_l2norm=True)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=2e-3, name="S")


def test_auto_window_sizes():
    """The fewest equal windows of at most AUTO_WINDOW_TOKENS (at AUTO_WINDOW_HEADS value heads; the
    limit is on tokens x heads), rounded up to the chunk size; one call for shorter sequences,
    batches and packed ones."""
    assert (forward.AUTO_WINDOW_TOKENS, forward.AUTO_WINDOW_HEADS) == (2 ** 18, 32)
    assert forward.auto_window(1, 2 ** 20, 32, None, 64) == 2 ** 18
    assert forward.auto_window(1, 2 ** 18 + 1, 32, None, 64) == 2 ** 17 + 64      # two windows, not 2^18 + 1 token
    assert forward.auto_window(1, 3 * 2 ** 18 - 5, 32, None, 16) == 2 ** 18
    assert forward.auto_window(1, 2 ** 20, 64, None, 64) == 2 ** 17               # more heads, shorter windows
    assert forward.auto_window(1, 2 ** 23, 2, None, 64) == 2 ** 22
    for B, T, HV, cu in ((1, 2 ** 18, 32, None), (2, 2 ** 20, 32, None), (1, 2 ** 20, 32, torch.tensor([0, 2 ** 20])),
                         (1, 2 ** 20, 2, None), (1, 2 ** 19, 16, None)):
        assert forward.auto_window(B, T, HV, cu, 64) is None


@pytest.mark.parametrize("HV", [1, 2, 4, 8, 12, 16, 32, 64])
@pytest.mark.parametrize("over", [1, 2 ** 10, 2 ** 20 + 64, 2 ** 24])     # tokens past the limit
def test_auto_windows_keep_the_sequences_few_heads_rule(HV, over):
    """A window walks one segment or segments joined by maps (schedule.walks_one_segment) as the whole
    sequence would: the windows' limit on tokens x heads keeps every window past the rule's budget."""
    from gdn.ops.triton import schedule
    T = forward.AUTO_WINDOW_TOKENS * forward.AUTO_WINDOW_HEADS // HV + over
    window = forward.auto_window(1, T, HV, None, 64)
    assert window is not None and window < T
    rule = lambda tokens: schedule.walks_one_segment(HV, tokens // 64, schedule.MAPS_SPLIT_CHUNKS)
    assert rule(window) == rule(T)


@pytest.mark.parametrize("B, T", [(1, 150), (1, 64), (2, 150)])
def test_auto_windows_are_the_chosen_windows(monkeypatch, B, T):
    """window_tokens="auto" (the default) makes the calls of the window auto_window chooses (T = 150
    past a limit of 64 tokens at 4 value heads: windows of 64, 64 and 22 tokens), or one, and is bit for bit the call
    with that window_tokens."""
    monkeypatch.setattr(forward, "AUTO_WINDOW_TOKENS", 64)
    monkeypatch.setattr(forward, "AUTO_WINDOW_HEADS", 4)             # (the inputs' value heads)
    lengths, one_call = [], forward._forward
    monkeypatch.setattr(forward, "_forward",
                        lambda q, *args, **kw: lengths.append(q.shape[1]) or one_call(q, *args, **kw))
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 32, 32, dtype=torch.bfloat16, initial_state=True, seed=7,
                                         device=DEVICE)
    call = lambda **kw: triton_forward(q, k, v, g, beta, scale=SCALE, initial_state=S0, output_final_state=True,
                                       use_qk_l2norm=True, chunk_size=16, **kw)
    window = forward.auto_window(B, T, 4, None, 16)
    assert window == (64 if (B, T) == (1, 150) else None)
    o, S = call()
    assert lengths == ([64, 64, 22] if window else [T])
    o_chosen, S_chosen = call(window_tokens=window)
    assert torch.equal(o, o_chosen) and torch.equal(S, S_chosen)


def test_windows_write_into_out_and_keep_no_state_unasked():
    q, k, v, g, beta, _ = random_inputs(1, 70, 1, 2, 32, 32, dtype=torch.float32, seed=6, device=DEVICE)
    out = torch.full_like(v, float("nan"))
    o, S = triton_forward(q, k, v, g, beta, scale=SCALE, chunk_size=16, window_tokens=32, out=out)
    assert S is None and o is out and not o.isnan().any()
    o_ref, _ = reference_gdn(q.double(), k.double(), v.double(), g.double(), beta.double())
    assert_close(o, o_ref, rtol=1e-3, name="o")


def test_windows_refused_where_they_do_not_apply():
    q, k, v, g, beta, _ = random_inputs(2, 40, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    for window in (0, 24, 16.0, True, "on"):
        with pytest.raises(ValueError, match="window_tokens must be 'auto', None or a positive multiple of chunk"):
            triton_forward(q[:1], k[:1], v[:1], g[:1], beta[:1], scale=0.25, chunk_size=16, window_tokens=window)
    with pytest.raises(ValueError, match="chunk_size 16, 32 or 64, got 0"):
        triton_forward(q[:1], k[:1], v[:1], g[:1], beta[:1], scale=0.25, chunk_size=0, window_tokens=16)
    o, _ = triton_forward(q[:1], k[:1], v[:1], g[:1], beta[:1], scale=0.25, chunk_size=16,
                          window_tokens=np.int64(16))                         # (numpy's ints, as chunk_size)
    assert o.shape == v[:1].shape and not o.isnan().any()
    with pytest.raises(ValueError, match="B = 2"):
        triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=16, window_tokens=16)
    cu = torch.tensor([0, 10, 40], device=DEVICE)
    with pytest.raises(ValueError, match="and cu_seqlens"):
        triton_forward(q[:1], k[:1], v[:1], g[:1], beta[:1], scale=0.25, chunk_size=16, window_tokens=16,
                       cu_seqlens=cu)
