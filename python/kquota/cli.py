"""The ``kquota`` command line."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from kquota import configs_cli


def _demo(args: argparse.Namespace) -> int:
    from kquota.demo import run_demo

    run_demo(rows=args.rows, out_dir=args.out, master=args.master, seed=args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kquota", description="Kafka client quotas, in process.")
    sub = parser.add_subparsers(dest="command", required=True)
    from kquota.pipeline import commands as pipeline_commands

    demo = sub.add_parser("demo", help="the traffic pipeline on a synthetic sample: usage, recommend, "
                          "simulate, HTML report (embedded Spark)")
    demo.add_argument("--rows", type=pipeline_commands._positive_int, default=200_000,
                      help="synthetic requests (default 200000)")
    demo.add_argument("--out", help="output directory (default: a new temporary directory)")
    demo.add_argument("--seed", type=int, default=0)
    pipeline_commands.add_master(demo)
    demo.set_defaults(func=_demo)
    configs_cli.add_parser(sub)
    pipeline_commands.add_parser(sub)
    from kquota.proxy import cli as proxy_cli

    proxy_cli.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "pipeline":
        from kquota.pipeline.commands import check_args

        check_args(args, parser)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one line, no traceback, for any failure
        print(f"kquota: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
