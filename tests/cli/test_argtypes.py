"""gdn.cli.argtypes through the `gdn` parser: each bad option value is a usage error (exit 2) that
names the option and what it expects, before any work starts."""
import pytest
import torch

from gdn.cli.main import main

BAD = [
    ("verify --T 1,-1", "argument --T: expected an int >= 1, got -1"),
    ("verify --K 0", "argument --K: expected an int >= 1, got 0"),
    ("verify --B two", "argument --B: expected an int >= 1, got 'two'"),
    ("verify --dtypes float8", "argument --dtypes: unknown float8"),
    ("verify --backends chunk,foo", "argument --backends: unknown foo"),
    ("verify --device tpu", "argument --device: expected cpu, cuda or cuda:N"),
    ("bench --shapes abc", "argument --shapes: expected comma-separated BxT"),
    ("bench --shapes varlen100/200", "argument --shapes"),
    ("bench --gates foo", "argument --gates: unknown foo"),
    ("bench --l2norm maybe", "argument --l2norm: expected on, off or on,off"),
    ("demo --max-T 128", "argument --max-T: expected an int >= 256, got 128"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[b[0] for b in BAD])
def test_bad_option_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv.split())
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


# Options that do not go together: usage errors too (gdn.cli.argtypes.UsageError), before any timing.
CLASHES = [
    ("bench --shapes 1x64 --H 2 --HV 3", "argument --HV: expected a multiple of --H (2), got 3"),
    ("verify --H 2 --HV 3", "argument --HV: expected a multiple of --H (2), got 3"),
    ("verify --chunk-size 3", "argument --chunk-size: expected a power of two, got 3"),
    ("bench --shapes 1x64 --providers foo", "--providers: unknown ['foo']"),
    ("bench --shapes 1x64 --providers ,", "--providers: expected comma-separated names, got ','"),
]
CPU_CLASHES = [
    ("bench --shapes 1x64 --device cpu --graphs", "--graphs times CUDA graph replays: it needs a CUDA device"),
    ("bench --shapes 1x64 --device cpu --configs bv64", "--configs names Triton configurations: it needs a CUDA"),
]


@pytest.mark.parametrize("argv, message", CLASHES + CPU_CLASHES, ids=[c[0] for c in CLASHES + CPU_CLASHES])
def test_options_that_clash_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv.split())
    assert exit_.value.code == 2
    out = capsys.readouterr()
    assert message in out.err and "Traceback" not in out.err
    assert "gdn bench |" not in out.out                   # refused before the run's header


def test_triton_on_the_cpu_needs_the_interpreter(monkeypatch, capsys):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--backends", "triton"])
    assert exit_.value.code == 2
    assert "triton on the CPU runs in Triton's interpreter: set TRITON_INTERPRET=1" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_device_without_a_gpu(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--device", "cuda"])
    assert "torch sees no CUDA device here" in capsys.readouterr().err


def test_version(capsys):
    import gdn
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"gdn {gdn.__version__}"
