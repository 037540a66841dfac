"""Gradients: the three algorithms agree, and a float64 gradcheck on a tiny case."""
import pytest
import torch

import gdn
from tests.reference import random_inputs
from tests.tolerances import assert_close


def _grads(backend, inputs, cu_seqlens=None):
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    q, k, v, g, beta, S0 = leaves
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                use_qk_l2norm=True, cu_seqlens=cu_seqlens, backend=backend, chunk_size=16)
    gen = torch.Generator().manual_seed(1)
    loss = (o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() + \
        (S * torch.randn(S.shape, generator=gen, dtype=S.dtype)).sum()
    loss.backward()
    return [x.grad for x in leaves]


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("ratio", [1, 2])
def test_gradients_agree_across_backends(varlen, ratio):
    cu = torch.tensor([0, 20, 21, 57]) if varlen else None
    inputs = random_inputs(1, 57, 2, 2 * ratio, 16, 12, initial_state=True, N=3 if varlen else 1, seed=2)
    ref = _grads("recurrent", inputs, cu)
    for backend in ("chunk", "scan"):
        for name, a, b in zip("q k v g beta S0".split(), _grads(backend, inputs, cu), ref):
            assert_close(a, b, name=f"d{name}[{backend}]")


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_gradcheck(backend):
    q, k, v, g, beta, S0 = (x.requires_grad_(True) for x in random_inputs(1, 5, 1, 2, 3, 2, initial_state=True))

    def fn(q, k, v, g, beta, S0):
        return gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    use_qk_l2norm=True, backend=backend, chunk_size=2)

    assert torch.autograd.gradcheck(fn, (q, k, v, g, beta, S0))


def test_gradients_through_token_blocks():
    """chunk walks long sequences in blocks of BLOCK_TOKENS (the state carried across); scan does not."""
    from gdn.ops.chunk import BLOCK_TOKENS
    inputs = random_inputs(1, 2 * BLOCK_TOKENS + 77, 1, 2, 8, 8, initial_state=True, seed=4)
    for name, a, b in zip("q k v g beta S0".split(), _grads("chunk", inputs), _grads("scan", inputs)):
        assert_close(a, b, name=f"d{name}")
