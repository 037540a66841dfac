"""benchmarks/gpu_check.py without a GPU: its time section in rounds (GDN_TIME_ROUNDS), with the GPU's
timer replaced by a clock that counts, and its hang guard (GDN_HANG_S)."""
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_check  # noqa: E402


def test_round_orders_alternate():
    assert gpu_check.round_orders(["a", "b", "c"], 3) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert gpu_check.round_orders(["a"], 2) == [["a"], ["a"]]


def test_rounds_share_the_inputs_and_keep_each_configs_fastest(monkeypatch, capsys):
    """Two configs, three rounds at two shapes: each config called once before any timing (its
    compile), every config of a shape on the same inputs, timed in the orders A B, B A, A B, and its
    fastest and slowest round printed; a config a shape refuses prints n/a and is not timed."""
    draws, timed = [], []
    ms = {"a": iter([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]), "b": iter([9.0, 7.0, 8.0])}

    def problem(B, T):
        draws.append((B, T))
        return (B, T, len(draws))

    def forward_call(inputs, variant, cu=None):
        def fn():
            if variant == "b" and inputs[0] == 8:
                raise ValueError("refused at this shape")
            fn.calls += 1
        fn.calls, fn.name, fn.inputs = 0, variant, inputs
        return fn

    def do_bench(fn, **kw):
        assert fn.calls == 1                       # compiled (called) before any timing, then never again
        timed.append((fn.name, fn.inputs))
        return next(ms[fn.name])

    monkeypatch.setenv("GDN_TIME_ROUNDS", "3")
    monkeypatch.setenv("GDN_TIME_SHAPES", "1x64;8x64")
    monkeypatch.setattr(gpu_check, "selected_configs", lambda: {"a": "a", "b": "b"})
    monkeypatch.setattr(gpu_check, "timing_problem", problem)
    monkeypatch.setattr(gpu_check, "forward_call", forward_call)
    monkeypatch.setattr(gpu_check.triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(gpu_check, "host_ms", lambda fn, device: 0.5)
    gpu_check.timing()
    assert draws == [(1, 64), (8, 64)]             # one draw a shape, for every config
    assert [name for name, _ in timed] == ["a", "b", "b", "a", "a", "b", "a", "a", "a"]
    assert {inputs for _, inputs in timed[:6]} == {(1, 64, 1)}
    out = capsys.readouterr().out
    assert "1.000-3.000/0.50" in out and "7.000-9.000/0.50" in out and "4.000-6.000/0.50" in out
    assert "b at 8x64: refused at this shape" in out
    table = out[out.rindex("\nconfig ") + 1:].splitlines()
    assert table[1].split() == ["a", "1.000-3.000/0.50", "4.000-6.000/0.50"]
    assert table[2].split() == ["b", "7.000-9.000/0.50", "n/a"]


def _guarded_sleep(seconds):
    """A process that sets gpu_check.hang_guard(seconds), then sleeps 30 s: its completed process."""
    import subprocess
    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    code = (f"import sys, time; sys.path.insert(0, {str(bench)!r}); import gpu_check; "
            f"gpu_check.hang_guard({seconds}); time.sleep(30 if {seconds} else 0.1)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_hang_guard_prints_the_stack_and_ends_the_process():
    """GDN_HANG_S (gpu_check.hang_guard): a section blocked past it (here a sleep standing for a kernel
    that never ends) prints where it was and ends long before its own 30 s; with 0, no guard."""
    import time
    start = time.monotonic()
    run = _guarded_sleep(2)
    assert time.monotonic() - start < 25 and run.returncode != 0
    assert "Timeout (0:00:02)!" in run.stderr and 'File "<string>", line 1' in run.stderr, run.stderr
    unguarded = _guarded_sleep(0)
    assert unguarded.returncode == 0 and "Timeout" not in unguarded.stderr, unguarded.stderr
