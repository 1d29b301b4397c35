"""unreachable-cli heapdump PID: live allocations grouped by backtrace and size."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from unreachable.cli.output import add_output_options, chosen_format
from unreachable.cli.scan import _pid, add_symbol_budget
from unreachable.errors import InvalidArgument
from unreachable.report.collapsed import heapdump_to_collapsed
from unreachable.report.pprof import heapdump_to_pprof
from unreachable.rpc.options import add_remote_options
from unreachable.writing import write_chunks, write_output

if TYPE_CHECKING:  # imported lazily at run time: grpc loads slowly
    from unreachable.heapdump.model import HeapDump


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "heapdump",
        help="dump the live allocations grouped by backtrace and size",
        description="Capture PID briefly and print its live allocations grouped by "
        "(size, backtrace), like malloc_debug's get_malloc_leak_info / dumpheap.",
    )
    p.add_argument("pid", type=_pid, nargs="?", help="process started under the shim")
    p.add_argument(
        "--file",
        metavar="DUMP",
        help="read a heap dump file (v1.0, v1.1 or v1.2) instead of a live process",
    )
    p.add_argument("--json", action="store_true", help="same as --format json")
    add_output_options(p, ("text", "json", "collapsed", "pprof"))
    add_symbol_budget(p)
    add_remote_options(p)
    p.set_defaults(handler=handle)


def _remote(args: argparse.Namespace) -> HeapDump:
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


def dump_error(path: str, e: Exception) -> InvalidArgument:
    """One line for a dump file that cannot be read: FILE:LINE: what."""
    from unreachable.heapdump.dump_format import DumpFormatError

    if isinstance(e, DumpFormatError):
        where = f"{path}:{e.line}" if e.line else path
        return InvalidArgument(f"{where}: {e.message}")
    if isinstance(e, OSError) and e.strerror:
        return InvalidArgument(f"cannot read {path}: {e.strerror}")
    return InvalidArgument(f"cannot read {path}: {e}")


def _from_file(args: argparse.Namespace, fmt: str) -> int:
    from unreachable.heapdump.dump_format import DumpFormatError
    from unreachable.heapdump.viewer import render_dump_chunks

    if fmt == "json":
        raise InvalidArgument("--file prints text, collapsed or pprof")
    try:
        dump, note, data = render_dump_chunks(args.file, fmt, budget=args.symbol_budget)
    except (DumpFormatError, OSError) as e:
        raise dump_error(args.file, e) from None
    for warning in dump.warnings:
        print(f"unreachable-cli: warning: {args.file}: {warning}", file=sys.stderr)
    if note:
        print(f"unreachable-cli: note: {note}", file=sys.stderr)
    if isinstance(data, str | bytes):
        write_output(data, args.output)
    else:
        write_chunks(data, args.output)
    return 0


def handle(args: argparse.Namespace) -> int:
    from unreachable.heapdump.live import heap_dump
    from unreachable.heapdump.report import format_json, format_text

    fmt = chosen_format(args)
    if (args.pid is None) == (args.file is None):
        raise InvalidArgument("heapdump: give either PID or --file DUMP")
    if args.file:
        return _from_file(args, fmt)
    if args.remote:
        dump = _remote(args)
    else:
        dump = heap_dump(args.pid, symbol_budget=args.symbol_budget)
    if fmt == "json":
        data: str | bytes = format_json(dump)
    elif fmt == "collapsed":
        data = heapdump_to_collapsed(dump)
    elif fmt == "pprof":
        data = heapdump_to_pprof(dump)
    else:
        data = format_text(dump)
    write_output(data, args.output)
    if dump.symbol_note:
        print(f"unreachable-cli: note: {dump.symbol_note}", file=sys.stderr)
    return 0
