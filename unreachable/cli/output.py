"""The output options every command shares: --format and -o FILE
(unreachable/writing.py writes there)."""

from __future__ import annotations

import argparse

from unreachable.errors import InvalidArgument


def add_output_options(p: argparse.ArgumentParser, formats: tuple[str, ...]) -> None:
    p.add_argument(
        "--format",
        choices=formats,
        default=None,
        help="output format (collapsed: flamegraph.pl/speedscope; pprof: gzip'ed profile.proto)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")


def chosen_format(args: argparse.Namespace) -> str:
    if args.format and getattr(args, "json", False) and args.format != "json":
        raise InvalidArgument(f"--json and --format {args.format} contradict each other")
    return args.format or ("json" if getattr(args, "json", False) else "text")
