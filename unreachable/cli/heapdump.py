"""unreachable-cli heapdump PID: live allocations grouped by backtrace and size."""

from __future__ import annotations

import argparse
import json
import sys

from unreachable.cli.scan import _pid
from unreachable.errors import ScanError
from unreachable.rpc.options import add_remote_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "heapdump",
        help="dump the live allocations grouped by backtrace and size",
        description="Capture PID briefly and print its live allocations grouped by "
        "(size, backtrace), like malloc_debug's get_malloc_leak_info / dumpheap.",
    )
    p.add_argument("pid", type=_pid, help="process started under the shim")
    p.add_argument("--json", action="store_true", help="write the dump as JSON")
    p.add_argument("--progress-json", action="store_true", help=argparse.SUPPRESS)
    add_remote_options(p)
    p.set_defaults(handler=handle)


def _remote(args: argparse.Namespace):  # noqa: ANN202 - HeapDump, imported lazily
    import grpc

    from unreachable.rpc.client import open_channel, rpc_error, stub
    from unreachable.rpc.convert import heapdump_to_model
    from unreachable.v1 import unreachable_pb2 as pb

    with open_channel(args) as channel:
        try:
            reply = stub(channel).HeapDump(pb.HeapDumpRequest(pid=args.pid), timeout=args.timeout)
        except grpc.RpcError as e:
            raise rpc_error(e, args.remote) from None
    return heapdump_to_model(reply)


def handle(args: argparse.Namespace) -> int:
    from unreachable.heapdump.live import heap_dump
    from unreachable.heapdump.report import format_json, format_text

    if args.remote:
        dump = _remote(args)
    else:
        try:
            dump = heap_dump(args.pid)
        except ScanError as e:
            if args.progress_json:
                error = {"error": e.grpc_status, "message": str(e)}
                sys.stderr.write(json.dumps(error) + "\n")
            raise
    sys.stdout.write(format_json(dump) if args.json else format_text(dump))
    sys.stdout.flush()
    return 0
