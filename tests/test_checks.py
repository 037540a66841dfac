"""Every bad input gets a clear error naming the argument (gdn.checks)."""
import pytest
import torch

import gdn
from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close


def inputs(B=1, T=8, H=2, HV=4, K=8, V=6):
    q, k, v, g, beta, _ = random_inputs(B, T, H, HV, K, V, dtype=torch.float32)
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def call(**overrides):
    args = inputs()
    kwargs = {name: overrides.pop(name) for name in list(overrides) if name not in args}
    args.update(overrides)
    return gdn.gated_delta_rule(args["q"], args["k"], args["v"], args["g"], args["beta"], **kwargs)


X = inputs()
CASES = [
    # (overrides, error type, words the message must contain)
    (dict(q=X["q"][0]), ValueError, "q must be 4-D"),
    (dict(k=X["k"][..., :4]), ValueError, "same head dim K"),
    (dict(k=X["k"][:, :4]), ValueError, "k must have shape"),
    (dict(v=X["v"][0]), ValueError, "v must be 4-D"),
    (dict(v=X["v"][:, :5]), ValueError, "v must have shape"),
    (dict(v=torch.randn(1, 8, 3, 6), g=torch.randn(1, 8, 3), beta=torch.rand(1, 8, 3)), ValueError, "multiple"),
    (dict(g=X["g"][..., :2]), ValueError, "g must have shape"),
    (dict(beta=X["beta"][:, :3]), ValueError, "beta must have shape"),
    (dict(q=X["q"].to(torch.int32)), TypeError, "q must be a floating-point"),
    (dict(v=X["v"] > 0), TypeError, "v must be a floating-point"),
    (dict(k=[1, 2]), TypeError, "k must be a torch.Tensor"),
    (dict(initial_state=torch.zeros(1, 4, 8, 5)), ValueError, "initial_state must have shape"),
    (dict(initial_state=torch.zeros(2, 4, 8, 6)), ValueError, "initial_state must have shape"),
    (dict(cu_seqlens=torch.tensor([0, 3, 8]), q=torch.randn(2, 8, 2, 8), k=torch.randn(2, 8, 2, 8),
          v=torch.randn(2, 8, 4, 6), g=torch.randn(2, 8, 4), beta=torch.rand(2, 8, 4)), ValueError, "batch size must be 1"),
    (dict(cu_seqlens=torch.tensor([1, 3, 8])), ValueError, "start at 0"),
    (dict(cu_seqlens=torch.tensor([0, 3, 7])), ValueError, "end at T=8"),
    (dict(cu_seqlens=torch.tensor([0, 5, 3, 8])), ValueError, "non-decreasing"),
    (dict(cu_seqlens=torch.tensor([0.0, 8.0])), TypeError, "int32 or int64"),
    (dict(cu_seqlens=[0, 8]), TypeError, "cu_seqlens must be"),
    (dict(cu_seqlens=torch.tensor([[0, 8]])), ValueError, "1-D"),
    (dict(backend="cuda"), ValueError, "backend must be one of"),
    (dict(chunk_size=48), ValueError, "chunk_size must be a positive power of two"),
    (dict(chunk_size=0), ValueError, "chunk_size"),
    (dict(chunk_size=True), TypeError, "chunk_size must be an int"),
    (dict(chunk_size=64.0), TypeError, "chunk_size must be an int"),
    (dict(scale="1"), TypeError, "scale"),
    (dict(q=X["q"][:, :, :0], k=X["k"][:, :, :0]), ValueError, "at least one head"),
    (dict(q=X["q"][..., :0], k=X["k"][..., :0]), ValueError, "head dim K >= 1"),
    (dict(v=X["v"][..., :0]), ValueError, "head dim V must be >= 1"),
    (dict(q=X["q"].to(torch.float8_e4m3fn)), TypeError, "q must be a floating-point"),
    (dict(use_qk_l2norm="False"), TypeError, "use_qk_l2norm must be a bool"),
    (dict(output_final_state=torch.tensor([1, 2])), TypeError, "output_final_state must be a bool"),
]


def test_numpy_scalars_are_numbers():
    """np.int64 chunk sizes and np.float32 scales (a config read with numpy) are taken as numbers."""
    np = pytest.importorskip("numpy")
    o, _ = call(chunk_size=np.int64(4), scale=np.float32(0.5))
    o_ref, _ = call(chunk_size=4, scale=0.5)
    assert torch.equal(o, o_ref)


@pytest.mark.parametrize("overrides, error, words", CASES, ids=[c[2] for c in CASES])
def test_bad_input_is_named(overrides, error, words):
    with pytest.raises(error, match=words):
        call(**overrides)


def test_flags_take_numpy_bools():
    np = pytest.importorskip("numpy")
    o, S = call(output_final_state=np.bool_(True), use_qk_l2norm=np.bool_(False))
    assert S is not None and torch.equal(o, call()[0])


def test_fla_positional_call_one_place_off_is_named():
    """An older FLA signature's positional cu_seqlens lands in use_qk_l2norm_in_kernel: named, not a
    tensor's truth value deep inside; by the wrappers' own argument name."""
    x = inputs(T=8)
    for op in (gdn.fused_recurrent_gated_delta_rule, gdn.chunk_gated_delta_rule):
        with pytest.raises(TypeError, match="use_qk_l2norm_in_kernel must be a bool, got Tensor"):
            op(x["q"], x["k"], x["v"], x["g"], x["beta"], None, None, True, torch.tensor([0, 3, 8]))


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "triton"])
def test_strided_cu_seqlens_are_the_same_boundaries(backend):
    """cu_seqlens as a strided view ([0, 5, 12] every other entry of a longer tensor): the boundaries
    its values say, on every backend (the kernels read a contiguous copy)."""
    if backend == "triton":
        pytest.importorskip("triton")
    q, k, v, g, beta, _ = random_inputs(1, 12, 1, 2, 16, 16, dtype=torch.float32, seed=3)
    strided = torch.tensor([0, 9, 5, 7, 12, 3])[::2]
    dense = torch.tensor([0, 5, 12])
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, cu_seqlens=strided, output_final_state=True, backend=backend)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, scale=16 ** -0.5, cu_seqlens=dense)
    assert_close(o, o_ref, rtol=1e-4, name="o")
    assert_close(S, S_ref, rtol=1e-4, name="S")


def test_tensors_on_different_devices():
    meta = torch.empty(1, 8, 4, 6, device="meta")
    with pytest.raises(ValueError, match="v is on meta but q is on cpu"):
        call(v=meta)


def test_triton_backend_on_cpu_without_interpreter(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        call(backend="triton")


def test_triton_backend_refuses_float64():
    pytest.importorskip("triton")
    q, k, v, g, beta, _ = random_inputs(1, 8, 1, 1, 16, 16)          # float64
    with pytest.raises(ValueError, match="float64"):
        gdn.gated_delta_rule(q, k, v, g, beta, backend="triton")


def test_auto_keeps_float64_exact():
    from gdn.api import resolve_backend
    q = torch.zeros(1, 16, 1, 4, dtype=torch.float64)
    assert resolve_backend("auto", q) == "chunk"


def test_auto_picks_chunk_for_chunk_sizes_and_head_dims_the_kernels_lack(monkeypatch):
    import gdn.api
    from types import SimpleNamespace

    def cuda_like(dim):         # no GPU needed
        return SimpleNamespace(is_cuda=True, dtype=torch.bfloat16, requires_grad=False, shape=(1, 8, 2, dim))
    monkeypatch.setattr(gdn.api, "triton_available", lambda: True)
    q = cuda_like(128)
    assert gdn.api.resolve_backend("auto", q, chunk_size=64) == "triton"
    assert gdn.api.resolve_backend("auto", q, chunk_size=128) == "chunk"
    assert gdn.api.resolve_backend("auto", q, q, cuda_like(256)) == "triton"
    assert gdn.api.resolve_backend("auto", q, q, cuda_like(512)) == "chunk"      # V past the kernels' tiles
    assert gdn.api.resolve_backend("auto", cuda_like(320)) == "chunk"           # K likewise


def test_auto_runs_a_few_cpu_tokens_token_by_token():
    """A decode step (T = 1) or two tokens on the CPU run the recurrence: the chunk algorithm's
    fixed costs are more than those steps. Same result as the chunk algorithm."""
    from gdn.api import RECURRENT_MAX_T, resolve_backend
    q, k, v, g, beta, S0 = random_inputs(2, 1, 2, 4, 16, 16, initial_state=True, seed=3)
    assert resolve_backend("auto", q) == "recurrent"
    assert resolve_backend("auto", q.expand(-1, RECURRENT_MAX_T, -1, -1)) == "recurrent"
    assert resolve_backend("auto", q.expand(-1, RECURRENT_MAX_T + 1, -1, -1)) == "chunk"
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm=True)
    o_c, S_c = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    use_qk_l2norm=True, backend="chunk")
    assert_close(o, o_c, name="o")
    assert_close(S, S_c, name="S")


@pytest.mark.parametrize("backend", ["chunk", "scan"])
def test_a_sequence_shorter_than_a_chunk_is_one_chunk_of_the_next_power_of_two(backend, monkeypatch):
    """T = 1, 12 and 64 (and packed pieces of 5 and 40) with chunk_size 64 run as one chunk of 1, 16,
    64 (8, 64) tokens; 100 tokens keep chunks of 64. Results as the float64 recurrence."""
    import gdn.api
    sizes = []
    algorithm = gdn.api.TORCH_ALGORITHMS[backend]

    def spy(*args):
        sizes.append(args[7])                                     # chunk_size
        return algorithm(*args)
    monkeypatch.setitem(gdn.api.TORCH_ALGORITHMS, backend, spy)
    for T, cu, expected in [(1, None, [1]), (12, None, [16]), (64, None, [64]), (100, None, [64]),
                            (45, [0, 5, 45], [8, 64])]:
        sizes.clear()
        q, k, v, g, beta, S0 = random_inputs(1, T, 2, 4, 16, 16, initial_state=True, seed=T)
        cu_seqlens = None if cu is None else torch.tensor(cu)
        S0 = S0 if cu is None else S0.expand(len(cu) - 1, -1, -1, -1)
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    cu_seqlens=cu_seqlens, backend=backend, chunk_size=64)
        o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, cu_seqlens=cu_seqlens)
        assert sizes == expected, (T, sizes)
        assert_close(o, o_ref, name="o")
        assert_close(S, S_ref, name="S")


def test_cu_seqlens_values_are_read_once_per_tensor_version(monkeypatch):
    """The values of a CUDA cu_seqlens are read (a host sync) once for a tensor that calls pass again
    unchanged, as the layers of a model do; an in-place change is read and checked again. (No GPU
    here: the tensor passes for a CUDA one.)"""
    reads = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(1) or tolist(self))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    from gdn.checks import check_cu_seqlens
    cu = torch.tensor([0, 3, 8])
    check_cu_seqlens(cu, 1, 8)
    check_cu_seqlens(cu, 1, 8)
    assert len(reads) == 1
    with pytest.raises(ValueError, match="end at T=9"):      # another T is checked again
        check_cu_seqlens(cu, 1, 9)
    cu[1] = 9                                                  # bumps the version counter
    with pytest.raises(ValueError, match="non-decreasing"):
        check_cu_seqlens(cu, 1, 8)
    with pytest.raises(ValueError, match="non-decreasing"):   # a failed check is not remembered
        check_cu_seqlens(cu, 1, 8)


def test_cu_seqlens_on_the_cpu_are_read_every_call():
    """No sync to save on the CPU: a write the version counter does not see (through NumPy) is caught."""
    cu = torch.tensor([0, 3, 8])
    call(cu_seqlens=cu)
    cu.numpy()[1] = 9
    with pytest.raises(ValueError, match="non-decreasing"):
        call(cu_seqlens=cu)


def test_cu_seqlens_made_in_inference_mode():
    """Inference tensors have no version counter: they are read every call, in and out of the mode."""
    with torch.inference_mode():
        cu = torch.tensor([0, 3, 8])
        o_in, _ = call(cu_seqlens=cu)
    o_out, _ = call(cu_seqlens=cu)
    assert o_in.shape == o_out.shape == (1, 8, 4, 6)
