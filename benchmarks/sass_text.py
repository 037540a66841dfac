"""cuobjdump's SASS text as instructions: a module of its own, without Triton or gdn, so that the test
suite (which sets TRITON_INTERPRET) can read a dumped kernel's SASS in process."""
from __future__ import annotations

import re

SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")


def sass_instructions(sass: str) -> list[tuple[int, str, str]]:
    """cuobjdump's SASS as (address, opcode, operands) in program order, predicates dropped."""
    return [(int(a, 16), op, rest) for a, op, rest in SASS_LINE.findall(sass)]
