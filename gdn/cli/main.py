"""`gdn` console script: gdn demo | gdn verify | gdn bench."""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import argtypes


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default at the end of its --help line, where it says something (not None: the
    line explains that case; not a flag's False)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gdn", description="Exact and fast Gated DeltaNet operators.")
    parser.add_argument("--version", action="version", version=f"gdn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    fmt = dict(formatter_class=_DefaultsHelp)
    demo = sub.add_parser("demo", **fmt, help="3-token walkthrough, cross-check table, timing table, tiny model")
    demo.add_argument("--device", type=argtypes.device, default="cpu", help="cpu or cuda")
    demo.add_argument("--max-T", type=argtypes.at_least(256), default=2048,
                      help="longest sequence in the timing table (its lengths: 256 to 8192)")
    demo.add_argument("--skip-model", action="store_true", help="skip the tiny transformers model part")

    verify = sub.add_parser("verify", **fmt, help="cross-check the backends against a float64 recurrence")
    verify.add_argument("--device", type=argtypes.device, default="cpu", help="cpu or cuda")
    verify.add_argument("--backends", type=argtypes.choice_list(("recurrent", "chunk", "scan", "triton")),
                        default="recurrent,chunk,scan",
                        help="comma-separated: recurrent, chunk, scan, triton (triton on the CPU: set "
                             "TRITON_INTERPRET=1, Triton's interpreter)")
    verify.add_argument("--dtypes", type=argtypes.choice_list(argtypes.DTYPES), default="float32,bfloat16",
                        help="comma-separated input dtypes")
    verify.add_argument("--T", type=argtypes.int_list(1), default="1,63,65,300",
                        help="comma-separated sequence lengths")
    verify.add_argument("--B", type=argtypes.at_least(1), default=2, help="batch (sequences)")
    verify.add_argument("--H", type=argtypes.at_least(1), default=2, help="q/k heads")
    verify.add_argument("--HV", type=argtypes.at_least(1), default=4, help="value heads (a multiple of H)")
    verify.add_argument("--K", type=argtypes.at_least(1), default=64, help="q/k head dim")
    verify.add_argument("--V", type=argtypes.at_least(1), default=64, help="value head dim")
    verify.add_argument("--chunk-size", type=argtypes.power_of_two, default=64,
                        help="tokens per chunk (chunk, scan, triton)")
    verify.add_argument("--varlen", action="store_true", help="pack the batch as random-length sequences")
    verify.add_argument("--l2norm", action="store_true",
                        help="use_qk_l2norm=True (raw randn keys); without it the keys are drawn with unit norm")
    verify.add_argument("--seed", type=int, default=0, help="random inputs' seed")

    bench = sub.add_parser("bench", **fmt, help="time gdn and every importable peer on the same inputs")
    bench.add_argument("--device", type=argtypes.device, default=None, help="cuda when available, else cpu")
    bench.add_argument("--shapes", type=argtypes.shapes, default=None,
                       help="comma-separated BxT or varlenT/pieces, e.g. 1x8192,8x4096,varlen32768/16")
    bench.add_argument("--H", type=argtypes.at_least(1), default=16, help="q/k heads")
    bench.add_argument("--HV", type=argtypes.at_least(1), default=None,
                       help="value heads (default: 32 on a GPU, --H on a CPU)")
    bench.add_argument("--K", type=argtypes.at_least(1), default=128, help="q/k head dim")
    bench.add_argument("--V", type=argtypes.at_least(1), default=128, help="value head dim")
    bench.add_argument("--gates", type=argtypes.choice_list(argtypes.GATES), default="decaying,long",
                       help="decaying (logsigmoid(x+4)) and/or long (x+9)")
    bench.add_argument("--l2norm", type=argtypes.l2norm, default=None,
                       help="on (use_qk_l2norm=True, raw q, k), off (unit-norm q, k, no l2norm) or on,off "
                            "(default: on,off on a GPU, on on a CPU)")
    bench.add_argument("--providers", default=None,
                       help="comma-separated subset of gdn, gdn-scan (CPU), fla, flashqla (GPU), hf "
                            "(transformers' torch version); None: every importable one")
    bench.add_argument("--configs", default=None,
                       help="GPU: also time these named Triton configurations (gdn/ops/triton/configs.py)")
    bench.add_argument("--backward", action="store_true",
                       help="also time forward+backward where supported (gdn's: the chunk backend)")
    bench.add_argument("--graphs", action="store_true",
                       help="GPU: also time each forward as a CUDA graph replay (mode fwd-graph: no host work a call)")
    bench.add_argument("--out", default="bench_out", help="folder for results.json and the PNG plot")
    bench.add_argument("--warm-pass", choices=["auto", "on", "off"], default="auto",
                       help="time the first shape's first case once more first, not kept (auto: on a GPU)")

    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo
            run_demo(args)
        elif args.command == "verify":
            from .verify import run_verify
            return run_verify(args)
        elif args.command == "bench":
            from .bench import run_bench
            run_bench(args)
    except argtypes.UsageError as err:          # options that do not go together (exit 2)
        {"demo": demo, "verify": verify, "bench": bench}[args.command].error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
