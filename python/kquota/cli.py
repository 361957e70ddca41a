"""The ``kquota`` command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Optional, Sequence

from kquota import configs_cli


class HelpFormatter(argparse.HelpFormatter):
    """Help lines end with ``(default: X)`` for every option that has a real default (not for
    flags, not for options whose absence means "none"), unless the text already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is argparse.SUPPRESS or isinstance(default, bool)
                or default == [] or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """Usage errors are two lines (what is wrong, where to get help), not the usage block; every
    subcommand parser is of this class and formats its help with :class:`HelpFormatter`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n(run '{self.prog} -h' for help)\n")


def _demo(args: argparse.Namespace) -> int:
    if args.demo_command == "proxy":
        from kquota.demo_proxy import run_demo_proxy

        return run_demo_proxy(seconds=args.seconds, quota=args.quota, window_num=args.quota_window_num)
    from kquota.demo import run_demo

    run_demo(rows=args.rows, out_dir=args.out, master=args.master, seed=args.seed, verbose=args.verbose)
    return 0


def _version() -> str:
    from kquota import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="kquota",
        description="Kafka's client quotas, in process: a configuration CLI (configs), the traffic "
                    "pipeline on Spark (pipeline) and a one-command tour of it (demo).",
        epilog="Run 'kquota <command> -h' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"kquota {_version()}",
                        help="print kquota's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    from kquota.pipeline import commands as pipeline_commands

    demo = sub.add_parser(
        "demo", help="the traffic pipeline on a synthetic sample: usage, recommend, simulate, HTML report",
        description="Generate a synthetic request log, measure usage, recommend per-user quotas, replay "
                    "them through the kernel and write an HTML report, on an embedded Spark. 'kquota demo proxy' "
                    "shows kquota proxy throttling a real producer and consumer instead.")
    demo.add_argument("--rows", type=pipeline_commands._positive_int, default=200_000,
                      help="number of synthetic requests to generate")
    demo.add_argument("--out", help="output directory (default: a new temporary directory)")
    demo.add_argument("--seed", type=int, default=0, help="random seed of the synthetic traffic")
    demo.add_argument("--verbose", action="store_true", help="show Spark's own log lines (hidden by default)")
    pipeline_commands.add_master(demo)
    demo.set_defaults(func=_demo)
    from kquota import demo_proxy as proxy_demo

    demo_sub = demo.add_subparsers(dest="demo_command", metavar="[proxy]",
                                   description="with no subcommand: the traffic pipeline demo")
    demo_proxy = demo_sub.add_parser(
        "proxy", help="kquota proxy throttling a real producer and consumer: broker, proxy and clients on loopback",
        description="Start a Kafka-compatible broker (tansu) on loopback, a kquota proxy in front of it with a "
                    "produce and consume quota for one client id, and a producer and a consumer of that client "
                    "running flat out through it; print each second's rates against the quota and the throttle "
                    "times, then a summary and the commands to do the same on your own cluster. Stops everything "
                    "it started at the end, on Ctrl-C or on SIGTERM. Needs: pip install 'kquota[demo-proxy]'.")
    demo_proxy.add_argument("--seconds", type=pipeline_commands._positive_int, default=proxy_demo.DEFAULT_SECONDS,
                            help="how long the clients run, in seconds")
    demo_proxy.add_argument("--quota", type=pipeline_commands._positive_int, default=proxy_demo.MB, metavar="BYTES",
                            help="producer_byte_rate and consumer_byte_rate of the demo's client id, bytes/s")
    demo_proxy.add_argument("--quota-window-num", type=pipeline_commands._positive_int,
                            default=proxy_demo.DEMO_WINDOW_NUM, metavar="N",
                            help="the proxy's quota.window.num (1 s windows); Kafka's usual 11 lets a client "
                                 "burst about 10 s worth of its quota before the first throttle")
    configs_cli.add_parser(sub)
    pipeline_commands.add_parser(sub)
    from kquota.proxy import cli as proxy_cli

    proxy_cli.add_parser(sub)
    return parser


def _subparser(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    """The parser of ``kquota <names...>`` (so its errors carry that command's name)."""
    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "pipeline":
        from kquota.pipeline.commands import check_args

        check_args(args, _subparser(parser, "pipeline", args.pipeline_command))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one line, no traceback, for any failure
        print(f"kquota: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
