"""The associative prefix scan of affine maps (gdn.ops.scan) against a sequential walk."""
import pytest
import torch

from gdn.ops.scan import compose, prefix_states
from tests.tolerances import assert_close


@pytest.mark.parametrize("N", [1, 2, 3, 5, 8, 13, 32])
def test_prefix_states_match_sequential_walk(N):
    gen = torch.Generator().manual_seed(N)
    A = torch.randn(N, 3, 6, 6, generator=gen, dtype=torch.float64) * 0.4
    B = torch.randn(N, 3, 6, 5, generator=gen, dtype=torch.float64)
    S = torch.randn(3, 6, 5, generator=gen, dtype=torch.float64)
    got = prefix_states(A, B, S)
    assert torch.equal(got[0], S)
    got = got[1:]
    expected = []
    for n in range(N):
        S = A[n] @ S + B[n]
        expected.append(S)
    assert_close(got, torch.stack(expected), name="prefix states")


def test_compose_is_associative():
    gen = torch.Generator().manual_seed(0)
    maps = [(torch.randn(4, 4, generator=gen, dtype=torch.float64), torch.randn(4, 3, generator=gen, dtype=torch.float64))
            for _ in range(3)]
    left = compose(maps[2], compose(maps[1], maps[0]))
    right = compose(compose(maps[2], maps[1]), maps[0])
    for a, b in zip(left, right):
        assert_close(a, b, name="compose")
