"""benchmarks/snapshots.py and scripts/ab_snapshot.sh: an earlier revision's gdn beside ours, in one process."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import snapshots  # noqa: E402


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    """HEAD's gdn at <tmp>/gdn_head, made by the script (needs a git checkout with git on the PATH)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    out = tmp_path_factory.mktemp("ab")
    run = subprocess.run(["bash", str(ROOT / "scripts" / "ab_snapshot.sh"), "HEAD", "head"], capture_output=True,
                         text=True, env={**os.environ, "AB_DIR": str(out)}, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (out / "gdn_head" / "ops" / "triton" / "forward.py").is_file()
    return out


def test_snapshot_runs_as_a_package_of_its_own(snapshot_dir, monkeypatch):
    """"ab:head/fp16" is the snapshot's triton_forward (module gdn_head..., not ours) with the snapshot's
    config, and it computes the op (interpreter here) within the fp16 walk's tolerances."""
    monkeypatch.setattr(snapshots, "SNAPSHOTS", snapshot_dir)
    forward, knobs = snapshots.resolve("ab:head/fp16")
    ours, _ = snapshots.resolve("default")
    assert forward is not ours and forward.__module__.startswith("gdn_head.")
    assert knobs == {"operands": "fp16"}
    assert snapshots.resolve("ab:head")[1] == {}
    q, k, v, g, beta, S0 = random_inputs(1, 70, 1, 2, 32, 32, dtype=torch.bfloat16, initial_state=True, seed=3)
    o, S = forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                   use_qk_l2norm=True, chunk_size=32, **knobs)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1.5e-3, name="S")


def test_missing_snapshot_names_the_script(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "SNAPSHOTS", tmp_path)
    with pytest.raises(ValueError, match="ab_snapshot.sh REV nothere"):
        snapshots.resolve("ab:nothere")


def test_script_refuses_a_name_that_is_no_package_name(tmp_path):
    run = subprocess.run(["bash", str(ROOT / "scripts" / "ab_snapshot.sh"), "HEAD", "no-dash"], capture_output=True,
                         text=True, env={**os.environ, "AB_DIR": str(tmp_path)}, timeout=60)
    assert run.returncode == 2 and "NAME must be" in run.stderr
    assert not any(tmp_path.iterdir())
