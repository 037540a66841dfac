"""Configs of gpu_check.py's sections, our working tree's or an earlier revision's (an A/B in one process).

A kernel change is best timed against the code before it in the same process, alternating: the GPU
machine's clocks and its host's speed move between calls (benchmarks/NOTES.md v32, where the WY pass's
old files were swapped in by hand). ``scripts/ab_snapshot.sh REV NAME`` puts gdn/ of revision REV
at .ab/gdn_NAME (carry ".ab" in the device call); here a config name

    "<config>"              a name of gdn/ops/triton/configs.py, run by our triton_forward
    "ab:NAME"               the snapshot's triton_forward with its own defaults
    "ab:NAME/<config>"      ... with a config of the snapshot's own configs.py

resolves to (triton_forward, knobs). The snapshot is a package of its own (gdn_NAME: the ops import
each other relatively), so its Triton kernels are other functions, compiled and cached apart.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

# Where scripts/ab_snapshot.sh puts them (both read AB_DIR, for the tests).
SNAPSHOTS = Path(os.environ.get("AB_DIR", Path(__file__).resolve().parent.parent / ".ab"))


def resolve(name: str):
    """(triton_forward, knobs) of a config name (module docstring); a ValueError names what is missing."""
    if not name.startswith("ab:"):
        from gdn.ops.triton import triton_forward
        from gdn.ops.triton.configs import config
        return triton_forward, config(name)
    snapshot, _, cname = name[3:].partition("/")
    package = f"gdn_{snapshot}"
    if not (SNAPSHOTS / package / "__init__.py").is_file():
        raise ValueError(f"config {name!r}: no snapshot at {SNAPSHOTS / package} (scripts/ab_snapshot.sh REV "
                         f"{snapshot}, and carry .ab)")
    if str(SNAPSHOTS) not in sys.path:
        sys.path.insert(0, str(SNAPSHOTS))
    forward = importlib.import_module(f"{package}.ops.triton").triton_forward
    knobs = importlib.import_module(f"{package}.ops.triton.configs").config(cname) if cname else {}
    return forward, knobs
