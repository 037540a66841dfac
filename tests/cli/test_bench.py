"""`gdn bench` on the CPU: shapes parsing, the floor, and a tiny end-to-end run writing results.json."""
import argparse
import json

import pytest
import torch

from gdn.cli.bench import floor_ms, parse_l2norm, parse_shapes, random_cu_seqlens, run_bench


def test_parse_shapes():
    assert parse_shapes("1x8192,8x4096,varlen32768/16") == [
        ("1x8192", 1, 8192, None), ("8x4096", 8, 4096, None), ("varlen32768/16", 1, 32768, 16)]


def test_parse_l2norm():
    assert parse_l2norm("on,off") == [True, False] and parse_l2norm("off") == [False]
    with pytest.raises(ValueError, match="--l2norm: expected"):
        parse_l2norm("yes")


def test_random_cu_seqlens_are_valid_boundaries():
    cu = random_cu_seqlens(1000, 7, "cpu", seed=3)
    assert cu.dtype == torch.int32 and cu.numel() == 8
    assert cu[0] == 0 and cu[-1] == 1000 and bool((cu[1:] > cu[:-1]).all())


def test_floor_is_the_larger_of_bytes_and_flops():
    # B1 x T32k, H=16, HV=32, K=V=128, bf16: bytes 0.19 ms, FLOPs 0.28 ms (GUIDE.md section 2).
    assert floor_ms(1, 32768, 16, 32, 128, 128, 2) == pytest.approx(0.278, rel=0.02)
    assert floor_ms(1, 32768, 16, 32, 128, 128, 2) > floor_ms(1, 16384, 16, 32, 128, 128, 2)


def _args(tmp_path, **kw):
    base = dict(device="cpu", shapes="1x64,varlen96/3", H=2, HV=None, K=16, V=16, gates="decaying",
                providers="gdn,gdn-scan", backward=False, out=str(tmp_path), configs=None, warm_pass="auto")
    return argparse.Namespace(**{**base, **kw})


def test_bench_cpu_end_to_end(tmp_path, capsys):
    run_bench(_args(tmp_path))
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["shape"] for r in rows] == ["1x64", "varlen96/3"]
    for r in rows:
        assert set(r["ms"]) == {"gdn", "gdn-scan"} and all(t > 0 for t in r["ms"].values())
    assert "| 1x64 | decaying | l2norm | fwd |" in capsys.readouterr().out


def test_bench_keeps_rows_of_a_run_cut_short(tmp_path, monkeypatch):
    """results.json is written after every row: a run stopped by a time limit keeps what it measured."""
    import gdn.cli.bench as bench

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(bench, "_print_table", stop)      # stopped after the last row, before the table
    with pytest.raises(KeyboardInterrupt):
        run_bench(_args(tmp_path))
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["shape"] for r in rows] == ["1x64", "varlen96/3"]


def test_bench_configs_need_cuda(tmp_path):
    with pytest.raises(ValueError, match="--configs"):
        run_bench(_args(tmp_path, configs="default"))


def test_bench_graphs_need_cuda(tmp_path):
    with pytest.raises(ValueError, match="--graphs"):
        run_bench(_args(tmp_path, graphs=True))


def test_bench_graph_rows_time_the_replay(monkeypatch, capsys):
    """Rows of mode fwd-graph time what _graph_replay returns (a CUDA graph's replay on a GPU; faked
    here), and a provider whose capture fails is skipped in them, with the reason printed."""
    import gdn.cli.bench as bench
    from gdn.cli.timing import random_problem
    providers = bench._providers("cpu", ["gdn", "gdn-scan"])
    replay = lambda: None

    def fake_replay(fn, inputs, cu, l2norm):
        if fn is providers["gdn-scan"]:
            raise RuntimeError("operation not permitted when stream is capturing")
        return replay
    monkeypatch.setattr(bench, "_graph_replay", fake_replay)
    inputs = random_problem(1, 64, 2, 2, 16, 16)
    ready = bench._timed_calls(providers, inputs, None, "fwd-graph", "1x64 decaying")
    assert ready == {"gdn": replay}
    assert "1x64 decaying fwd-graph gdn-scan: skipped (RuntimeError: operation not permitted" in capsys.readouterr().out
    assert set(bench._timed_calls(providers, inputs, None, "fwd", "1x64 decaying")) == {"gdn", "gdn-scan"}


def test_bench_rejects_an_unknown_provider(tmp_path):
    with pytest.raises(ValueError, match="--providers: unknown"):
        run_bench(_args(tmp_path, providers="gdn,flq"))


def test_bench_refuses_to_time_nothing(tmp_path):
    """Only peers that cannot run here (FLA on a CPU): a usage error, not an empty table."""
    with pytest.raises(ValueError, match="--providers: none of"):
        run_bench(_args(tmp_path, providers="fla"))


def test_bench_refuses_an_output_folder_it_cannot_make(tmp_path):
    """Checked before any timing, which a folder under a file would otherwise lose at the end."""
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="--out: cannot make the folder"):
        run_bench(_args(tmp_path, out=str(tmp_path / "file" / "x")))


def test_bench_keeps_config_rows_when_providers_are_picked(monkeypatch):
    """--configs rows are not filtered away by --providers (a GPU-only path, so the config lookup is faked)."""
    import gdn.cli.bench as bench
    import gdn.ops.triton.configs as configs
    monkeypatch.setattr(configs, "CONFIGS", {"x": {}})
    monkeypatch.setattr(bench, "available_peers", lambda device, errors: {"fla": None})
    assert list(bench._providers("cuda", ["gdn", "fla"], ["x"])) == ["gdn", "gdn[x]", "fla"]


def test_bench_skips_a_config_that_refuses_a_shape(tmp_path, monkeypatch, capsys):
    """A named config may refuse a shape (the certified split refuses packed sequences): that row is
    printed as skipped and the run goes on; the same ValueError from our default op is raised."""
    import gdn.cli.bench as bench
    from gdn import gated_delta_rule

    def refuses(q, *args, cu_seqlens=None, **kwargs):
        if cu_seqlens is not None:
            raise ValueError("split_walk takes dense sequences")
        return gated_delta_rule(q, *args, backend="chunk", **kwargs)
    ours = lambda *a, **kw: gated_delta_rule(*a, backend="chunk", **kw)
    monkeypatch.setattr(bench, "_providers", lambda device, names, configs: {"gdn": ours, "gdn[x]": refuses})
    run_bench(_args(tmp_path))
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert set(rows[0]["ms"]) == {"gdn", "gdn[x]"} and set(rows[1]["ms"]) == {"gdn"}
    assert "gdn[x]: skipped (ValueError: split_walk takes dense sequences)" in capsys.readouterr().out
    monkeypatch.setattr(bench, "_providers", lambda device, names, configs: {"gdn": refuses})
    with pytest.raises(ValueError, match="split_walk takes dense"):
        run_bench(_args(tmp_path))


def test_bench_warm_pass_times_the_first_shape_twice(tmp_path, capsys):
    """--warm-pass on: the first shape's first gates timed once more before the run, printed as not
    kept; the rows and the JSON are those of the run itself (auto: only on a GPU)."""
    run_bench(_args(tmp_path, gates="decaying,long", warm_pass="on"))
    out = capsys.readouterr().out
    assert out.count("(warm-up pass, not kept)") == 2                 # gdn and gdn-scan, decaying only
    assert all("1x64" in line and "decaying" in line for line in out.splitlines() if "not kept" in line)
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [(r["shape"], r["gates"]) for r in rows] == [("1x64", "decaying"), ("1x64", "long"),
                                                         ("varlen96/3", "decaying"), ("varlen96/3", "long")]
    run_bench(_args(tmp_path))
    assert "not kept" not in capsys.readouterr().out


def test_table_shows_our_host_ms_where_rows_recorded_it(capsys):
    """GPU fwd rows carry each provider's host ms a call: the table then adds ours, and a row without
    it (fwd-graph) shows a dash; rows without any (the CPU's) keep the table as it was."""
    import gdn.cli.bench as bench
    rows = [dict(shape="1x32768", gates="decaying", mode="fwd", ms={"gdn": 0.9, "fla": 2.0},
                 host_ms={"gdn": 0.75, "fla": 0.2}, floor_ms=0.28),
            dict(shape="1x32768", gates="decaying", mode="fwd-graph", ms={"gdn": 0.85, "fla": 1.9}, host_ms={},
                 floor_ms=0.28)]
    bench._print_table(rows, ["gdn", "fla"])
    out = capsys.readouterr().out
    assert "| gdn % of floor | gdn host ms |" in out
    assert "| 1x32768 | decaying | l2norm | fwd | 0.900 | 2.000 | 2.22x | 31% | 0.750 |" in out
    assert "| 1x32768 | decaying | l2norm | fwd-graph | 0.850 | 1.900 | 2.24x | 33% | - |" in out
    for r in rows:
        r["host_ms"] = {}
    bench._print_table(rows, ["gdn", "fla"])
    assert "host ms" not in capsys.readouterr().out


def test_bench_times_both_l2norm_regimes(tmp_path, monkeypatch, capsys):
    """--l2norm on,off: a row per regime; "off" rows are called without use_qk_l2norm on unit-norm q, k
    (so they are finite: raw randn keys would make the delta rule diverge), and the table says which."""
    import gdn.cli.bench as bench
    calls = []
    ours = bench._providers("cpu", ["gdn"])["gdn"]

    def spy(q, k, *args, use_qk_l2norm=None, **kwargs):
        calls.append((use_qk_l2norm, float(k.float().norm(dim=-1).sub(1).abs().max())))
        return ours(q, k, *args, use_qk_l2norm=use_qk_l2norm, **kwargs)
    monkeypatch.setattr(bench, "_providers", lambda device, names, configs: {"gdn": spy})
    run_bench(_args(tmp_path, shapes="1x64", l2norm="on,off"))
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["l2norm"] for r in rows] == [True, False]
    assert {flag for flag, _ in calls} == {True, False}
    assert all(dev < 1e-3 for flag, dev in calls if flag is False)       # unit keys without l2norm
    assert all(dev > 0.5 for flag, dev in calls if flag is True)         # raw randn keys with it
    out = capsys.readouterr().out
    assert "| 1x64 | decaying | l2norm | fwd |" in out and "| 1x64 | decaying | unit | fwd |" in out
