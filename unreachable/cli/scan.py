"""unreachable-cli scan PID: report the target's unreachable allocations."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from unreachable.cli.output import add_output_options, chosen_format, write_output
from unreachable.errors import EXIT_LEAKS, EXIT_NO_LEAKS, ScanError
from unreachable.report.collapsed import report_to_collapsed
from unreachable.report.json_report import format_json
from unreachable.report.lmu import format_lmu
from unreachable.report.model import ScanReport
from unreachable.report.pprof import report_to_pprof
from unreachable.report.text import format_report, format_summary
from unreachable.rpc.options import add_remote_options
from unreachable.scan import ScanOptions, scan
from unreachable.sweep.child import MAX_MARK_THREADS


def _pid(text: str) -> int:
    try:
        pid = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a pid: {text!r}") from None
    if pid <= 0:
        raise argparse.ArgumentTypeError(f"not a pid: {text!r}")
    return pid


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _mark_threads(text: str) -> int:
    value = _limit(text)
    if not 1 <= value <= MAX_MARK_THREADS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_MARK_THREADS}")
    return value


def _symbol_budget(text: str) -> float | None:
    from unreachable.symbolize.config import parse_budget

    try:
        return parse_budget(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be seconds (> 0), or 0 for no limit") from None


def add_symbol_budget(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--symbol-budget",
        type=_symbol_budget,
        default=True,
        metavar="SECONDS",
        help="time symbolization may spend reading files; frames it has not reached stay "
        "raw and a note says so (default: $UNREACHABLE_SYMBOL_BUDGET or 30; 0: no limit)",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan",
        help="scan a running process for unreachable memory",
        description="Stop PID briefly, prove which of its allocations are unreachable, "
        "report them. "
        "Exit status: 0 no leak, 1 leaks found, 2 the scan could not be done.",
    )
    p.add_argument("pid", type=_pid, help="process started under the shim")
    p.add_argument("--json", action="store_true", help="same as --format json")
    add_output_options(p, FORMATS)
    p.add_argument(
        "--contents", action="store_true", help="include the first 32 bytes of each leak"
    )
    p.add_argument(
        "--limit",
        type=_limit,
        default=100,
        metavar="N",
        help="report at most N leak entries (default 100); totals always count every leak",
    )
    p.add_argument(
        "--snapshot",
        choices=("auto", "fork", "copy", "stopped"),
        default="auto",
        help="fork: sweep a frozen copy-on-write copy and release the target at once; "
        "copy: copy the memory while the target runs, then pause it only to read again "
        "what it wrote (Linux 6.7+); stopped: copy it all while paused; auto: copy for a "
        "big heap, else fork, when possible (docs/pause.md)",
    )
    p.add_argument(
        "--sweep",
        choices=("auto", "child", "scanner"),
        default="auto",
        help="with a fork snapshot, where to mark: child: the snapshot child sweeps its own "
        "memory; scanner: this process reads it through /proc; auto: child, falling back "
        "to scanner",
    )
    p.add_argument(
        "--mark-threads",
        type=_mark_threads,
        default=0,
        metavar="N",
        help="threads the snapshot child marks with (1-16; default: this machine's CPUs, "
        "at most 4)",
    )
    add_symbol_budget(p)
    p.add_argument(
        "--progress-json",
        action="store_true",
        help=argparse.SUPPRESS,  # for unreachabled: JSON lines on stderr (progress, error)
    )
    add_remote_options(p)
    p.set_defaults(handler=handle)


def _progress_json(started: float) -> Callable[[str], None]:
    def note(stage: str) -> None:
        line = {"progress": stage, "elapsed_ms": round((time.monotonic() - started) * 1000, 3)}
        sys.stderr.write(json.dumps(line) + "\n")
        sys.stderr.flush()

    return note


FORMATS = ("text", "json", "collapsed", "pprof", "lmu")


def render(report: ScanReport, fmt: str) -> str | bytes:
    if fmt == "json":
        return format_json(report)
    if fmt == "collapsed":
        return report_to_collapsed(report)
    if fmt == "pprof":
        return report_to_pprof(report)
    if fmt == "lmu":  # for the shim's memunreachable.h interface
        return format_lmu(report)
    return format_report(report)


def handle(args: argparse.Namespace) -> int:
    chosen_format(args)  # reject contradictory flags before touching the target
    options = ScanOptions(
        limit=args.limit,
        contents=args.contents,
        snapshot=args.snapshot,
        sweep=args.sweep,
        mark_threads=args.mark_threads,
        symbol_budget=args.symbol_budget,
    )
    if args.remote:
        from unreachable.rpc.scan_client import remote_scan

        report = remote_scan(args, options)
    elif not args.progress_json:
        report = scan(args.pid, options)
    else:
        try:
            report = scan(args.pid, options, _progress_json(time.monotonic()))
        except ScanError as e:
            error = {"error": e.grpc_status, "message": str(e)}
            sys.stderr.write(json.dumps(error) + "\n")
            raise
    fmt = chosen_format(args)
    write_output(render(report, fmt), args.output)
    tty = sys.stderr.isatty()
    if fmt == "text" and tty:
        print(format_summary(report), file=sys.stderr)
    elif (report.snapshot_note or report.sweep_note) and sys.stderr.isatty():
        how = {"fork": "forked", "copy": "copied"}.get(report.snapshot, "swept in place")
        why = "; ".join(n for n in (report.snapshot_note, report.sweep_note) if n)
        print(
            f"unreachable-cli: note: pid {report.pid} was {how}, paused "
            f"{report.pause_ms:.0f} ms: {why}",
            file=sys.stderr,
        )
    # Unlike the fallbacks above, said whatever stderr is: the report is missing names.
    if report.symbol_note and not args.progress_json and not (fmt == "text" and tty):
        print(f"unreachable-cli: note: {report.symbol_note}", file=sys.stderr)
    return EXIT_LEAKS if report.leak_count else EXIT_NO_LEAKS
