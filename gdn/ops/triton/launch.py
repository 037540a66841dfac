"""Kernel launches with less host time: the compiled kernel launched directly once its key was seen.

Triton's ``kernel[grid](*args)`` (JITFunction.run) binds and specialises every argument, formats a
cache key and builds the launch hooks' metadata at each launch: 35-100 us a launch on the GPU
machine's host, of which the compiled kernel's own launch is 9-34 (benchmarks/NOTES.md v27). A call
at B = 1 makes five to seven launches on a GPU that then waits for the host (v36).

``launch(kernel, grid, *args, **kw)`` keys a launch by everything Triton's specialisation reads,
at its cheapest in Python: a tensor's dtype and its address modulo 16, a descriptor's base the same
way and its shape, strides, block and layout, an int by value, any other argument by its type and
value, the keywords (constexprs and launch options) likewise, and the device. The first launch of a
key goes through Triton (which compiles or finds the kernel); later ones launch that compiled kernel
directly, with no launch hooks. The key is finer than Triton's own (an int by value where Triton
keeps whether it is 1 or a multiple of 16; an address modulo 16 where Triton keeps whether it is 0),
so two launches of one key are always given the same compiled kernel by Triton: the shortcut never
changes what runs. Why not key by the launcher's plan instead (cheaper still): a plan does not see the
alignment of the caller's tensors nor how a derived int divides, and a kernel compiled for one would
run silently wrong on the other (NOTES.md v27, the cache built and dropped then: its key went through
Triton's own per-argument specialisation and cost as much as the binder it skipped).

Launches that Triton treats differently from a plain one go through Triton: the interpreter, launch
hooks or pre-run hooks set (profilers), TRITON_DEBUG or instrumentation, a grid that is a function,
an argument of a type not listed above. So does every launch outside ``direct_launches(True)``.
triton_forward enters it by default (its ``direct_launch``): its launches ran bit for bit as
Triton's on an H100 and a B1 x T32k call's host time went from 1.50 to 1.15 ms (NOTES.md v39).
Launches outside the forward (the causal conv's) stay with Triton until a GPU test has run them.
"""
from __future__ import annotations

import contextlib
import contextvars

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton import knobs
from triton.runtime.jit import JITFunction

try:                                  # Gluon's host-side TMA descriptor (Triton 3.6 on)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:                   # pragma: no cover - a Triton without Gluon
    TensorDescriptor = type("NoTensorDescriptor", (), {})

MAX_KEYS = 4096                       # past this many keys the table starts again (shapes x knobs seen)
_enabled = contextvars.ContextVar("gdn_direct_launches", default=False)
_compiled: dict = {}                  # key -> (compiled kernel, [(name, default)] of the params after args)


class _Unkeyed(Exception):
    """An argument whose specialisation this module does not model: launch through Triton."""


_SCALARS = frozenset((float, bool, str, type(None)))      # keyed with their type: True == 1 == 1.0 in a tuple
_CONSTEXPRS = frozenset((int, bool, str, type(None), tl.dtype))   # the keywords' types but float (not tl.dtype's
#                                                     subclasses: pointer and block types do not hash)
_MISSING = object()


def _scalar(x, kind):
    """A scalar's key: its type and value, a float's by its bits (2 == 2.0 and 0.0 == -0.0 in a tuple,
    and a NaN never equals itself)."""
    return (kind, x.hex()) if kind is float else (kind, x)


def key_of(kernel, device: int, args, kw) -> tuple:
    """The cache key of launching ``kernel`` with positional ``args`` and keywords ``kw`` on CUDA device
    ``device``: everything Triton's specialisation of them may depend on (finer is allowed, coarser
    is not). Raises _Unkeyed for an argument of a type not modelled here. One loop, no call an
    argument: this runs at every launch (~12 us with the table's lookup for the WY kernel's 59 arguments on
    this VM's x86 core; ~35 us for the four launches of a B1 x T32k call)."""
    key = [kernel, device]
    for x in args:
        kind = type(x)
        if kind is int:
            key.append(x)
        elif kind is Tensor:
            key.append((x.dtype, x.data_ptr() & 15))
        elif kind is TensorDescriptor:
            base = x.base
            key.append((base.dtype, base.data_ptr() & 15, *x.shape, *x.strides, *x.block_shape, x.layout,
                        x.padding))
        elif kind in _SCALARS:
            key.append(_scalar(x, kind))
        elif isinstance(x, Tensor):                  # (a subclass: nn.Parameter)
            key.append((x.dtype, x.data_ptr() & 15))
        else:
            raise _Unkeyed
    for name, value in kw.items():
        kind = type(value)
        if kind is float:
            key.append((name, kind, value.hex()))
        elif kind in _CONSTEXPRS:
            key.append((name, kind, value))
        else:
            raise _Unkeyed
    return tuple(key)


def _hooked(hook) -> bool:
    """Whether a launch hook is set: a non-empty HookChain, or a function assigned in its place."""
    return bool(getattr(hook, "calls", hook))


def _plain(kernel) -> bool:
    """Whether Triton would launch this kernel as a plain launch: compiled (not interpreted), no hooks,
    no debug or instrumentation."""
    runtime = knobs.runtime
    return isinstance(kernel, JITFunction) and not kernel.pre_run_hooks and not kernel.debug \
        and not _hooked(runtime.launch_enter_hook) and not _hooked(runtime.launch_exit_hook) \
        and not runtime.debug and not knobs.compilation.instrumentation_mode


def _globals_changed(kernel) -> bool:
    """Whether a global value the kernel read when compiled has changed since (Triton's launch then
    raises; so does this module's, by going through it)."""
    return any(scope.get(name, _MISSING) != value for (name, _), (value, scope) in kernel.used_global_vals.items())


def launch(kernel, grid: tuple, *args, **kw):
    """``kernel[grid](*args, **kw)``, launched directly when an earlier launch had this one's key (the
    module's docstring says what the key holds and when Triton's own path runs instead)."""
    if not (_enabled.get() and type(grid) is tuple and _plain(kernel)):
        return kernel[grid](*args, **kw)
    device = torch.cuda.current_device()
    try:
        key = key_of(kernel, device, args, kw)
    except _Unkeyed:
        return kernel[grid](*args, **kw)
    entry = _compiled.get(key)
    if entry is None or _globals_changed(kernel):
        compiled = kernel[grid](*args, **kw)
        if compiled is not None:
            params = kernel.signature.parameters
            tail = tuple((name, params[name].default) for name in kernel.arg_names[len(args):])
            if len(_compiled) >= MAX_KEYS:
                _compiled.clear()
            _compiled[key] = (compiled, tail)
        return compiled
    compiled, tail = entry
    values = args + tuple(kw[name] if name in kw else default for name, default in tail)
    stream = torch._C._cuda_getCurrentRawStream(device)         # (as Triton's own launch reads it)
    grid3 = grid + (1,) * (3 - len(grid))
    compiled.run(grid3[0], grid3[1], grid3[2], stream, compiled.function, compiled.packed_metadata, None, None,
                 None, *values)
    return compiled


@contextlib.contextmanager
def direct_launches(enabled: bool):
    """Inside the block, launch() launches directly (True) or always through Triton (False, as
    outside any block)."""
    token = _enabled.set(bool(enabled))
    try:
        yield
    finally:
        _enabled.reset(token)


def ensure_allocator() -> None:
    """TMA descriptors made in a kernel live in a scratch buffer that Triton asks an allocator for at
    launch: a torch one, unless the caller has set theirs."""
    allocation = getattr(triton.runtime, "_allocation", None)     # Triton's own module (3.6)
    current = getattr(allocation, "_allocator", None)
    if current is None or type(current.get()).__name__ == "NullAllocator":
        # On the current device: the launches run under their tensors' device (on_tensor_device).
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def clear() -> None:
    """Forget every key (the next launch of each goes through Triton again)."""
    _compiled.clear()
