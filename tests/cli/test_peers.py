"""The peer adapters of gdn.cli.peers. Only "hf" (pure torch) can run on a CPU machine."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from gdn.cli.peers import available_peers
from tests.tolerances import assert_close


def _recurrence64(q, k, v, g, beta, scale, h0, l2norm):
    """Float64 token-by-token definition. q, k [B,T,H,K]; v [B,T,HV,V]; g, beta [B,T,HV];
    h0 [B,HV,K,V] or None. Returns o [B,T,HV,V] and the final state [B,HV,K,V]."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    if l2norm:
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    B, T, H, K = q.shape
    HV, V = v.shape[2:]
    q, k = q.repeat_interleave(HV // H, dim=2), k.repeat_interleave(HV // H, dim=2)  # [B,T,HV,K]
    S = torch.zeros(B, HV, K, V, dtype=torch.float64) if h0 is None else h0.double().clone()
    o = torch.empty(B, T, HV, V, dtype=torch.float64)
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]
        pred = torch.einsum("bhkv,bhk->bhv", S, k[:, t])                 # S^T k
        S = S + beta[:, t][..., None, None] * k[:, t][..., None] * (v[:, t] - pred)[..., None, :]
        o[:, t] = scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t])      # output after the update
    return o, S


def _inputs(l2norm, seed=0, B=2, T=37, H=2, HV=4, K=8, V=16):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    if l2norm:
        q, k = 3 * q, 3 * k      # normalised inside the op: the scale must not matter
    else:
        k = F.normalize(k, dim=-1)  # unit keys keep I - beta k k^T a contraction
    v = torch.randn(B, T, HV, V, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, HV, generator=gen) + 2)
    beta = torch.sigmoid(torch.randn(B, T, HV, generator=gen))
    h0 = torch.randn(B, HV, K, V, generator=gen)
    return q, k, v, g, beta, h0


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("transformers")
    peers = available_peers("cpu")
    if "hf" not in peers:
        pytest.skip("transformers has no qwen3_next torch_chunk_gated_delta_rule")
    return peers["hf"]


@pytest.mark.parametrize("l2norm", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_hf_matches_float64_recurrence(hf, l2norm, with_h0, scale):
    q, k, v, g, beta, h0 = _inputs(l2norm)
    h0 = h0 if with_h0 else None
    o, ht = hf(q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=True,
               cu_seqlens=None, use_qk_l2norm=l2norm)
    o_ref, ht_ref = _recurrence64(q, k, v, g, beta, q.shape[-1] ** -0.5 if scale is None else scale,
                                  h0, l2norm)
    assert o.dtype == q.dtype and ht.dtype == torch.float32
    assert_close(o, o_ref, rtol=1e-5, name="o")
    assert_close(ht, ht_ref, rtol=1e-5, name="final_state")


def test_hf_no_final_state_and_no_varlen(hf):
    q, k, v, g, beta, _ = _inputs(False, B=1)
    o, ht = hf(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
               cu_seqlens=None, use_qk_l2norm=False)
    assert ht is None and o.shape == v.shape
    with pytest.raises(NotImplementedError):
        hf(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True,
           cu_seqlens=torch.tensor([0, 20, 37], dtype=torch.int32), use_qk_l2norm=False)


def test_gpu_peers_not_offered_on_cpu():
    errors: dict[str, str] = {}
    peers = available_peers("cpu", errors)
    assert "fla" not in peers and "flashqla" not in peers
    assert "fla" in errors and "flashqla" in errors


def test_import_loads_no_peer():
    code = ("import sys, gdn.cli.peers; "
            "bad = [m for m in ('fla', 'flash_qla', 'tilelang', "
            "'transformers.models.qwen3_next.modeling_qwen3_next') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
