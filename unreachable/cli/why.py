"""unreachable-cli why PID ADDRESS: who holds the block containing ADDRESS."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from unreachable.cli.scan import _pid
from unreachable.errors import EXIT_NO_LEAKS, InvalidArgument
from unreachable.rpc.options import add_remote_options
from unreachable.scan import ScanOptions
from unreachable.scan.plan import NO_GRAPH
from unreachable.writing import write_output

# "concurrent" is among them to be refused in one line (report()), not by
# argparse's usage message: it keeps no reference graph.
SNAPSHOTS = ("auto", "fork", "copy", "stopped", "concurrent")


def address(text: str) -> int:
    """Hexadecimal, with or without 0x: reports print addresses bare."""
    digits = text[2:] if text.lower().startswith("0x") else text
    try:
        value = int(digits, 16)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a hexadecimal address: {text!r}") from None
    if value <= 0 or value >= 1 << 64:
        raise argparse.ArgumentTypeError(f"not an address: {text!r}")
    return value


def add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (docs/report-schema.md)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument(
        "--snapshot",
        choices=SNAPSHOTS,
        default="auto",
        help="how to capture the target, as for scan (the graph is always read by the "
        "scanner, never swept inside a snapshot child; concurrent is refused: it keeps "
        "no reference graph)",
    )
    add_remote_options(p)


def report(args: argparse.Namespace, local: Callable[[], dict[str, Any]], rpc: str,
           request: object) -> dict[str, Any]:  # fmt: skip
    """The report, made here or asked of the daemon (--remote)."""
    if args.snapshot == "concurrent":
        raise InvalidArgument(NO_GRAPH)
    if args.remote:
        import grpc

        from unreachable.rpc.client import open_channel, rpc_error, stub

        with open_channel(args) as channel:
            try:
                reply = getattr(stub(channel), rpc)(request, timeout=args.timeout)
            except grpc.RpcError as e:
                raise rpc_error(e, args.remote) from None
        answer: dict[str, Any] = json.loads(reply.json)
        return answer
    return local()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "why",
        help="show what holds the allocation containing an address",
        description="Capture PID as scan does and print a shortest chain of pointers from "
        "a root (a global variable, a thread's stack, TLS or registers, a value the "
        "kernel holds such as epoll data) to the allocation containing ADDRESS: the "
        "root, then each block on the way with its allocation site and the offset of "
        "the pointer to the next. An unreachable block is reported as a leak, with "
        "the leak it hangs from and the blocks pointing at it. "
        "Exit status: 0 the block was found, 2 ADDRESS is in no live allocation or the "
        "capture could not be done.",
    )
    p.add_argument("pid", type=_pid, help="process started under the shim")
    p.add_argument(
        "address",
        type=address,
        help="an address inside the allocation, hexadecimal (0x optional, as reports print it)",
    )
    add_common_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from unreachable.retention.why import format_json, format_text, why
    from unreachable.rpc.convert import SNAPSHOT_ENUM
    from unreachable.v1 import unreachable_pb2 as pb

    request = pb.WhyRequest(
        pid=args.pid, address=args.address, snapshot=SNAPSHOT_ENUM[args.snapshot]
    )
    data = report(
        args,
        lambda: why(args.pid, args.address, ScanOptions(snapshot=args.snapshot)),
        "Why",
        request,
    )
    write_output(format_json(data) if args.json else format_text(data), args.output)
    return EXIT_NO_LEAKS
