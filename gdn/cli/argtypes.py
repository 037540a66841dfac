"""argparse types for the `gdn` commands: a bad value is a usage error naming its option
("gdn verify: error: argument --T: ..."), not a traceback from deep inside a run."""
from __future__ import annotations

import argparse

DTYPES = ("float32", "bfloat16", "float16", "float64")
GATES = ("decaying", "long")              # gdn bench's gate regimes (gdn.cli.timing.random_problem)


class UsageError(ValueError):
    """A bad combination of options (one value alone is argparse's to refuse), found once the command
    knows its device: `gdn` prints it as a usage error of that command (exit 2), not a traceback."""


def _items(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
    return items


def at_least(low: int):
    """An int >= low."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an int >= {low}, got {value}")
        return value
    return parse


def power_of_two(text: str) -> int:
    """A positive power of two (chunk sizes)."""
    value = at_least(1)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected a power of two, got {value}")
    return value


def check_heads(H: int, HV: int) -> None:
    """Grouped value heads: HV a multiple of H."""
    if HV % H:
        raise UsageError(f"argument --HV: expected a multiple of --H ({H}), got {HV}")


def int_list(low: int):
    """'1,63,65': comma-separated ints, each >= low (kept as the text: the commands split it)."""
    one = at_least(low)

    def parse(text: str) -> str:
        for item in _items(text, f"ints >= {low}"):
            one(item)
        return text
    return parse


def choice_list(choices):
    """A comma-separated subset of choices (kept as the text: the commands split it)."""
    def parse(text: str) -> str:
        items = _items(text, f"names among {', '.join(choices)}")
        unknown = [item for item in items if item not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; expected some of {', '.join(choices)}")
        return text
    return parse


def device(text: str) -> str:
    """cpu, cuda or cuda:N, and CUDA only where torch sees a GPU."""
    import torch
    try:
        parsed = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}") from None
    if parsed.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}: torch sees no CUDA device here (torch {torch.__version__})")
    return text


def shapes(text: str) -> str:
    """gdn bench's shapes, 'BxT' or 'varlenT/pieces' items: checked here, kept as the text."""
    from .bench import parse_shapes
    try:
        parsed = parse_shapes(text)
    except ValueError:
        parsed = None
    if not parsed or any(B < 1 or T < 1 or (pieces is not None and not 1 <= pieces <= T)
                         for _, B, T, pieces in parsed):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated BxT or varlenT/pieces (B, T >= 1, 1 <= pieces <= T), e.g. "
            f"1x8192,varlen32768/16; got {text!r}")
    return text


def l2norm(text: str) -> str:
    """gdn bench's --l2norm: on, off, or both."""
    from .bench import parse_l2norm
    try:
        parse_l2norm(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected on, off or on,off; got {text!r}") from None
    return text
