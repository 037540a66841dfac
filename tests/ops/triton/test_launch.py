"""Direct launches (gdn.ops.triton.launch): the key tells apart every launch Triton would compile
apart (CPU), what it cannot key goes through Triton, and on a GPU the forward launched directly is
bit for bit the forward launched through Triton, aligned or not."""
import pytest
import torch

pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from gdn.ops.triton import launch  # noqa: E402
from tests.reference import random_inputs  # noqa: E402


def _key(*args, **kw):
    return launch.key_of("kernel", 0, args, kw)


def test_key_tells_apart_what_triton_specialises_on():
    a, b = torch.empty(64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16)
    assert _key(a, 16, 0.5, X=True) == _key(b, 16, 0.5, X=True)         # fresh tensors, one key
    different = [
        _key(a.float(), 16, 0.5, X=True),                                   # dtype
        _key(a[1:], 16, 0.5, X=True),                                       # address modulo 16
        _key(a, 17, 0.5, X=True),                                           # an int's value
        _key(a, 1, 0.5, X=True),
        _key(a, 16.0, 0.5, X=True),                                         # 16.0 == 16, but a float
        _key(a, True, 0.5, X=True),                                         # True == 1, but a bool
        _key(a, 16, None, X=True),
        _key(a, 16, 0.5, X=False),                                          # a constexpr's value
        _key(a, 16, 0.5, Y=True),
        _key(a, 16, 0.5, X=True, num_warps=8),                              # a launch option
        _key(a, 16, 0.5, X=tl.float16),
        _key(a, 16, 0.5, X=1),                                              # keywords by type too
        _key(a, 16, 0.5, X=1.0),
        _key(a, 16, -0.0, X=True),                                          # 0.0 == -0.0, not in bits
        _key(a, 16, 0.0, X=True),
        _key(a, 16, 0.5, X=True, Z=0.0),
        _key(a, 16, 0.5, X=True, Z=-0.0),
    ]
    keys = [_key(a, 16, 0.5, X=True)] + different
    assert len(set(keys)) == len(keys)
    assert launch.key_of("kernel", 1, (a,), {}) != launch.key_of("kernel", 0, (a,), {})      # the device
    assert _key(torch.nn.Parameter(a.float())) == _key(a.float())           # a subclass keyed as a tensor
    assert _key(float("nan"), X=float("nan")) == _key(float("nan"), X=float("nan"))   # (NaN != NaN: by bits)


@pytest.mark.parametrize("args, kw", [(([1, 2],), {}), ((object(),), {}), ((), dict(X=torch.zeros(1))),
                                      ((torch.device("cpu"),), {}), ((), dict(X=tl.pointer_type(tl.float16)))])
def test_key_refuses_what_it_does_not_model(args, kw):
    with pytest.raises(launch._Unkeyed):
        launch.key_of("kernel", 0, args, kw)


def test_not_a_kernel_goes_through_its_own_launch():
    """What is not a compiled Triton kernel (the interpreter's, the tests' spies) is launched as
    kernel[grid](...), its keys never kept."""
    seen = []

    class Spy:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append((grid, args, kw))
    with launch.direct_launches(True):
        launch.launch(Spy(), (3, 2), 1, 2.0, X=True)
    launch.launch(Spy(), (3,), 5)
    assert seen == [((3, 2), (1, 2.0), dict(X=True)), ((3,), (5,), {})]
    assert not any(key[0].__class__.__name__ == "Spy" for key in launch._compiled)


def test_the_forward_launches_directly_by_default(monkeypatch):
    """triton_forward enters direct_launches(True) unless direct_launch=False (NOTES.md v39): what
    its kernels' launches see (recorded, not run)."""
    import gdn.ops.triton.forward as forward
    from tests.ops.triton.launches import spy_launches
    seen = []
    spy_launches(monkeypatch, "wy_kernel", lambda grid, args, kw: seen.append(launch._enabled.get()), run=False)
    q, k, v, g, beta, _ = random_inputs(1, 64, 2, 2, 32, 32, dtype=torch.float32)
    for choice in ({}, dict(direct_launch=False), dict(direct_launch=True)):
        forward.triton_forward(q, k, v, g, beta, scale=0.125, **choice)
    assert seen == [True, False, True] and not launch._enabled.get()


def test_direct_launches_context_restores():
    assert not launch._enabled.get()                 # outside triton_forward: through Triton
    with launch.direct_launches(True):
        assert launch._enabled.get()
        with launch.direct_launches(False):
            assert not launch._enabled.get()
        assert launch._enabled.get()
    assert not launch._enabled.get()


class _Compiled:
    """Stands in for Triton's CompiledKernel: records each direct launch's arguments."""
    function, packed_metadata = "function", "packed metadata"

    def __init__(self):
        self.runs = []

    def run(self, *args):
        self.runs.append(args)


def _kernel(x_ptr, n, SCALE: tl.constexpr, FLAG: tl.constexpr = True, tail=None):
    pass


class _Recording(JITFunction):
    """A JITFunction whose launches through Triton are recorded instead of compiled and run."""

    def __init__(self):
        super().__init__(_kernel)
        self.through_triton, self.compiled = [], _Compiled()

    def run(self, *args, grid, warmup, **kw):
        self.through_triton.append((grid, args, kw))
        return self.compiled


def test_direct_launch_passes_what_triton_would(monkeypatch):
    """The second launch of a key goes to the compiled kernel with the grid as three numbers, the
    current stream, no hooks, and every parameter in the kernel's order (keywords and defaults
    included) as Triton's binder gives them; a launch with a new key goes through Triton again."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    kernel, x, y = _Recording(), torch.empty(8), torch.empty(8)
    with launch.direct_launches(True):
        launch.launch(kernel, (4,), x, 7, SCALE=2)                  # the key's first launch: through Triton
        launch.launch(kernel, (4,), y, 7, SCALE=2)
        launch.launch(kernel, (5, 2), y, 7, SCALE=2, tail=0.5)      # a float where None was: a new key
        launch.launch(kernel, (5, 2), x, 7, SCALE=2, tail=0.5)
        knobs.runtime.launch_enter_hook.add(print)                  # a profiler's hook: through Triton
        try:
            launch.launch(kernel, (4,), x, 7, SCALE=2)
        finally:
            knobs.runtime.launch_enter_hook.remove(print)
        kernel.debug = True                                         # the kernel's debug mode: through Triton
        launch.launch(kernel, (4,), x, 7, SCALE=2)
        kernel.debug = False
        scope = {"G": 1}                                            # a global it read has changed: Triton's
        kernel.used_global_vals = {("G", 0): (1, scope)}            # launch (which raises) decides
        launch.launch(kernel, (4,), x, 7, SCALE=2)
        scope["G"] = 2
        launch.launch(kernel, (4,), x, 7, SCALE=2)
    assert [(grid, args[1]) for grid, args, kw in kernel.through_triton] == [((4,), 7), ((5, 2), 7)] + [((4,), 7)] * 3
    head = ("function", "packed metadata", None, None, None)
    assert kernel.compiled.runs == [(4, 1, 1, 1234) + head + (y, 7, 2, True, None),
                                    (5, 2, 1, 1234) + head + (x, 7, 2, True, 0.5),
                                    (4, 1, 1, 1234) + head + (x, 7, 2, True, None)]     # G unchanged: direct


CUDA = torch.cuda.is_available()


def _forward(inputs, direct, **kw):
    from gdn.ops.triton.forward import triton_forward
    q, k, v, g, beta, S0 = inputs
    return triton_forward(q, k, v, g, beta, scale=q.shape[-1] ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, direct_launch=direct, **kw)


def _misaligned(x):
    """x's values in a tensor whose address is 2 bytes past a 16-byte boundary."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:]
    return flat.view(x.shape).copy_(x)


@pytest.mark.skipif(not CUDA, reason="direct launches need a CUDA GPU (the interpreter goes through Triton)")
@pytest.mark.parametrize("B, T, gate, dtype", [(1, 40000, "normal", torch.bfloat16),    # the automatic split
                                               (2, 300, "normal", torch.bfloat16),
                                               (1, 4096, "strong", torch.float16),
                                               (2, 200, "normal", torch.float32)])
def test_direct_is_triton_bit_for_bit(B, T, gate, dtype):
    inputs = list(random_inputs(B, T, 16, 32, 128, 128, gate=gate, initial_state=True, seed=T, dtype=dtype,
                                device="cuda"))
    o_t, S_t = _forward(inputs, False)
    o_t2, S_t2 = _forward(inputs, False)
    assert torch.equal(o_t, o_t2) and torch.equal(S_t, S_t2), "the forward is not deterministic: no A/B possible"
    _forward(inputs, True)                           # the first launch of each key: through Triton
    keys = len(launch._compiled)
    for _ in range(2):
        o_d, S_d = _forward(inputs, True)
        assert torch.equal(o_d, o_t) and torch.equal(S_d, S_t)
    assert len(launch._compiled) == keys             # later calls launched directly: no new key
    # q 2 bytes off its alignment: new keys (Triton compiles for it), and the numbers Triton's launch gives.
    shifted = [_misaligned(inputs[0])] + inputs[1:]
    o_m, S_m = _forward(shifted, True)
    o_mt, S_mt = _forward(shifted, False)
    assert len(launch._compiled) > keys
    assert torch.equal(o_m, o_mt) and torch.equal(S_m, S_mt)
