"""benchmarks/knob_sweep.py: random problems and knob sets against float64, in the interpreter here."""
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import knob_sweep  # noqa: E402


def test_sweep_passes_the_defaults_and_a_refusal_is_not_a_failure(capsys):
    assert knob_sweep.main(["--cases", "3", "--knobs", "none"]) == 0
    assert knob_sweep.main(["--cases", "2", "--configs", "pieces 4", "--seed", "8"]) == 0   # packed: refused
    out = capsys.readouterr().out
    assert "ok 3 FAIL 0 refused 0 ERROR 0" in out and "refused case 8 [pieces 4]" in out


def test_sweep_fails_on_a_wrong_answer_and_on_a_crash(monkeypatch, capsys):
    import gdn.ops.triton as ops

    def wrong(q, k, v, g, beta, *, out, initial_state=None, cu_seqlens=None, **kw):
        N = q.shape[0] if cu_seqlens is None else cu_seqlens.numel() - 1
        return out.zero_(), torch.zeros(N, v.shape[2], k.shape[3], v.shape[3])
    monkeypatch.setattr(ops, "triton_forward", wrong)
    assert knob_sweep.main(["--cases", "1", "--knobs", "none"]) == 1
    monkeypatch.setattr(ops, "triton_forward", lambda *a, **kw: 1 / 0)
    assert knob_sweep.main(["--cases", "1", "--knobs", "none"]) == 1
    out = capsys.readouterr().out
    assert "FAIL    case 0" in out and "ERROR   case 0 [defaults]" in out and "ZeroDivisionError" in out


def test_sweep_stops_at_its_time_budget(capsys):
    assert knob_sweep.main(["--cases", "3", "--knobs", "none", "--minutes", "0"]) == 0
    out = capsys.readouterr().out
    assert "stopped before case 0: --minutes 0 spent" in out and "ok 0 FAIL 0 refused 0 ERROR 0" in out
    assert "case 0 [" not in out
