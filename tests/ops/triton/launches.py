"""Spies on the launcher's kernels (gdn.ops.triton.forward): what each launch was given."""


def spy_launches(monkeypatch, name, record, run=True, module=None, before=None):
    """Replace kernel ``name`` of gdn.ops.triton.forward (or of ``module``) for this test: each launch
    calls record(grid, args, kw) after the kernel ran (run=False: instead of running it), and
    before(grid, args, kw) first when given (to poison its outputs, say)."""
    import gdn.ops.triton.forward as forward
    module = module or forward
    real = getattr(module, name)

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                if before is not None:
                    before(grid, args, kw)
                if run:
                    real[grid](*args, **kw)
                record(grid, args, kw)
            return launch
    monkeypatch.setattr(module, name, Spy())


def launch_flags(monkeypatch, kernel="_chunk_fwd_kernel", flag="F16"):
    """The list that will hold one constexpr (default: the walk's F16) of every launch of a kernel."""
    seen = []
    spy_launches(monkeypatch, kernel, lambda grid, args, kw: seen.append(kw[flag]))
    return seen
