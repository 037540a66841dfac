"""Gated RMSNorm against transformers' Qwen3_5RMSNormGated (same rounding points in low precision)."""
import pytest
import torch

from gdn.layers import GatedRMSNorm, gated_rms_norm
from tests.tolerances import assert_close


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_transformers(dtype):
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNormGated

    torch.manual_seed(0)
    x, z = torch.randn(2, 7, 4, 24).to(dtype), torch.randn(2, 7, 4, 24).to(dtype)
    ref = Qwen3_5RMSNormGated(24, eps=1e-6).to(dtype)
    ours = GatedRMSNorm(24, eps=1e-6).to(dtype)
    with torch.no_grad():
        ref.weight.copy_(1 + 0.1 * torch.randn(24))
        ours.weight.copy_(ref.weight)
        expected, actual = ref(x.reshape(-1, 24), z.reshape(-1, 24)).reshape(x.shape), ours(x, z)
    assert actual.dtype == dtype
    # float32: only the multiplication order differs; bfloat16: identical rounding points.
    assert_close(actual, expected, rtol=1e-6 if dtype == torch.float32 else 1e-3, name=f"norm[{dtype}]")


def test_bad_shapes():
    with pytest.raises(ValueError, match="z must"):
        gated_rms_norm(torch.randn(3, 8), torch.randn(3, 4), torch.ones(8))
    with pytest.raises(ValueError, match="weight must"):
        gated_rms_norm(torch.randn(3, 8), torch.randn(3, 8), torch.ones(4))
