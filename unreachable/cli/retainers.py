"""unreachable-cli retainers PID: the live heap grouped by what retains it."""

from __future__ import annotations

import argparse

from unreachable.cli.scan import _limit, _pid
from unreachable.cli.why import add_common_options, report
from unreachable.errors import EXIT_NO_LEAKS, InvalidArgument
from unreachable.scan import ScanOptions
from unreachable.writing import write_output


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    add_common_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from unreachable.retention.retainers import format_json, format_text, retainers

    if args.site is not None and not args.site.strip("*"):
        raise InvalidArgument("--site needs a pattern with something besides '*'")
    from unreachable.rpc.convert import SNAPSHOT_ENUM
    from unreachable.v1 import unreachable_pb2 as pb

    request = pb.RetainersRequest(
        pid=args.pid, limit=args.limit, snapshot=SNAPSHOT_ENUM[args.snapshot]
    )
    if args.site is not None:
        request.site = args.site
    options = ScanOptions(snapshot=args.snapshot)
    data = report(
        args, lambda: retainers(args.pid, options, args.site, args.limit), "Retainers", request
    )
    write_output(format_json(data) if args.json else format_text(data), args.output)
    return EXIT_NO_LEAKS
