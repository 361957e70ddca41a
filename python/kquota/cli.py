"""The ``kquota`` command line."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from kquota import configs_cli


def _demo(args: argparse.Namespace) -> int:
    from kquota.demo import run_demo

    run_demo(seconds=args.seconds, quota=args.quota, simulated=args.simulated)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kquota", description="Kafka client quotas, in process.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="a short live demonstration of throttling")
    demo.add_argument("--seconds", type=float, default=8.0, help="how long to run (default 8)")
    demo.add_argument("--quota", type=int, default=1_000_000, help="producer quota in bytes/s")
    demo.add_argument("--simulated", action="store_true", help="simulated clock: instant and reproducible")
    demo.set_defaults(func=_demo)
    configs_cli.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "seconds", 1) is not None and getattr(args, "seconds", 1) <= 0:
        parser.error("--seconds must be > 0")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one line, no traceback, for any failure
        print(f"kquota: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
