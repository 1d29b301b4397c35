"""unreachable-cli retainers PID: the live heap grouped by what retains it."""

from __future__ import annotations

import argparse

from unreachable.cli.output import write_output
from unreachable.cli.scan import _limit, _pid
from unreachable.cli.why import add_snapshot_option
from unreachable.errors import EXIT_NO_LEAKS, InvalidArgument
from unreachable.scan import ScanOptions


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "retainers",
        help="group the live heap by the roots and allocation sites that retain it",
        description="Capture PID as scan does and compute the dominator tree of its live "
        "heap below its roots: for each root (a global variable, a thread's stack, TLS or "
        "registers, a value the kernel holds) and each allocation site, the bytes "
        "reachable only through it, largest first, with the allocation sites of what "
        "each root retains. Exit status: 0 done, 2 the capture could not be done.",
    )
    p.add_argument("pid", type=_pid, help="process started under the shim")
    p.add_argument(
        "--site",
        metavar="PATTERN",
        help="only allocation sites with a frame whose function, object or source file "
        "contains PATTERN ('*' matches any run of characters), and the roots that "
        "retain them; needs backtraces (backtrace=N)",
    )
    p.add_argument(
        "--limit",
        type=_limit,
        default=10,
        metavar="N",
        help="list the N largest roots and sites (default 10)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (docs/report-schema.md)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    add_snapshot_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from unreachable.retention.retainers import format_json, format_text, retainers

    if args.site is not None and not args.site.strip("*"):
        raise InvalidArgument("--site needs a pattern with something besides '*'")
    options = ScanOptions(snapshot=args.snapshot, sweep="scanner")
    data = retainers(args.pid, options, args.site, args.limit)
    write_output(format_json(data) if args.json else format_text(data), args.output)
    return EXIT_NO_LEAKS
