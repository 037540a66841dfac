"""`gdn verify`: passes on the torch backends, and reports (exit code 1) a case out of bounds."""
import argparse

import torch

from gdn.cli import verify


def _args(**kw):
    base = dict(device="cpu", backends="chunk,scan", dtypes="float64,float32", T="1,65", B=2, H=1, HV=2,
                K=16, V=8, chunk_size=16, varlen=False, l2norm=False, seed=0)
    return argparse.Namespace(**{**base, **kw})


def test_verify_passes_and_prints_a_row_per_case(capsys):
    assert verify.run_verify(_args(varlen=True)) == 0
    out = capsys.readouterr().out
    assert out.count(" yes") == 2 * 2 * 2 and "all within bounds" in out


def test_verify_reports_cases_out_of_bounds(monkeypatch, capsys):
    monkeypatch.setitem(verify.BOUNDS, torch.float32, 0.0)            # float32 cannot be exact
    assert verify.run_verify(_args(T="65", l2norm=True)) == 1
    assert "2 case(s) out of bounds" in capsys.readouterr().out
