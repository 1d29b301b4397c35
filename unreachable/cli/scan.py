"""unreachable-cli scan PID: report the target's unreachable allocations."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from unreachable.cli.output import add_output_options, chosen_format
from unreachable.errors import EXIT_LEAKS, EXIT_NO_LEAKS, InvalidArgument
from unreachable.model.report import ScanReport
from unreachable.rpc.options import add_remote_options
from unreachable.rpc.progress import StageBar
from unreachable.scan import ScanOptions, scan
from unreachable.sweep.child import MAX_MARK_THREADS
from unreachable.triage import apply as triage
from unreachable.writing import write_output


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


def _max_pause(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be milliseconds (> 0)")
    return value


def add_sweep_options(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--max-pause",
        type=_max_pause,
        default=None,
        metavar="MS",
        help="the pause the target may feel: auto prefers the snapshots expected to stay "
        "under it, and the report's note says when none is, or when the pause was longer "
        "(docs/scan-stages.md)",
    )


def add_symbol_budget(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--symbol-budget",
        type=_symbol_budget,
        default=True,
        metavar="SECONDS",
        help="time symbolization may spend reading files; frames it has not reached stay "
        "raw and a note says so (default: $UNREACHABLE_SYMBOL_BUDGET or 30; 0: no limit)",
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "scan",
        help="scan a running process (or a core file) for unreachable memory",
        description="Stop PID briefly (or read the core file given with --core), prove which "
        "of its allocations are unreachable, report them. "
        "Exit status: 0 no leak, 1 leaks found, 2 the scan could not be done.",
    )
    p.add_argument(
        "pid",
        type=_pid,
        nargs="?",
        help="process to scan: started under the shim, or any process using glibc's malloc"
        " (its heap is walked: chunk sizes, no backtraces; docs/glibc-heap.md)",
    )
    p.add_argument(
        "--core",
        metavar="FILE",
        help="scan this core file (gcore's, or coredump_ctl dump's) instead of a process",
    )
    p.add_argument(
        "--exe",
        metavar="PATH",
        help="with --core: the program's executable, where it is not at the path the core names",
    )
    p.add_argument(
        "--sysroot",
        metavar="DIR",
        help="with --core: read the files the core names (libraries, the shim) under DIR",
    )
    p.add_argument("--json", action="store_true", help="same as --format json")
    add_output_options(p, FORMATS)
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--contents", action="store_true", help="include the first 32 bytes of each leak"
    )
    shown.add_argument(
        "--no-contents",
        action="store_true",
        help=f"the text report shows the first 32 bytes of its {SAMPLE_CONTENTS} largest entries"
        " without a backtrace; do not",
    )
    p.add_argument(
        "--limit",
        type=_limit,
        default=100,
        metavar="N",
        help="list at most N leak entries in text, json, lmu and lmu-records (default 100); totals "
        "always count every leak, and collapsed and pprof carry every entry",
    )
    p.add_argument(
        "--snapshot",
        choices=("auto", "fork", "copy", "stopped", "concurrent"),
        default="auto",
        help="fork: sweep a frozen copy-on-write copy and release the target at once; "
        "copy: copy the memory while the target runs, then pause it only to read again "
        "what it wrote (Linux 6.7+); stopped: copy it all while paused; concurrent: mark "
        "the running target, stopping it twice briefly, no copy of its heap (Linux 6.7+); "
        "auto: concurrent for a heap from 64 MiB, giving way to a fork when the target "
        "writes too much for its last stop to stay short, else fork, when possible "
        "(docs/pause.md)",
    )
    add_sweep_options(p)
    add_symbol_budget(p)
    triage.add_options(p)
    add_remote_options(p)
    p.set_defaults(handler=handle)


FORMATS = ("text", "json", "collapsed", "pprof", "lmu", "lmu-records")
# Entries without a backtrace whose first bytes the text report shows unasked
# (not over --remote: a daemon may refuse contents).
SAMPLE_CONTENTS = 5
# Profiles carry every entry: --limit shortens what people read, not the data
# (the most a ScanRequest's uint32 limit holds; the fold stops at the leaks).
PROFILES = ("collapsed", "pprof")
ALL_ENTRIES = 0xFFFF_FFFF


def render(report: ScanReport, fmt: str) -> str | bytes:
    # Each format's module is imported when asked for: start-up is part of
    # every scan's time.
    if fmt == "json":
        from unreachable.report.json_report import format_json

        return format_json(report)
    if fmt == "collapsed":
        from unreachable.report.collapsed import report_to_collapsed

        return report_to_collapsed(report)
    if fmt == "pprof":
        from unreachable.report.pprof import report_to_pprof

        return report_to_pprof(report)
    if fmt == "lmu":
        from unreachable.report.lmu import format_lmu

        return format_lmu(report)
    if fmt == "lmu-records":  # for the shim's memunreachable.h interface
        from unreachable.report.lmu import format_records

        return format_records(report)
    from unreachable.report.text import format_report

    return format_report(report)


def _stage_bar(args: argparse.Namespace, fmt: str) -> StageBar | None:
    """A progress line on stderr when a person watches it: a terminal, and
    not JSON (read by programs)."""
    if fmt == "json" or not sys.stderr.isatty():
        return None
    what = f"core {args.core}" if args.core else f"pid {args.pid}"
    return StageBar(sys.stderr, f"scanning {what}")


def _scan(
    args: argparse.Namespace, options: ScanOptions, note: Callable[[str], None] | None
) -> ScanReport:
    if args.core:
        from unreachable.scan.run import scan_core

        return scan_core(args.core, args.exe, args.sysroot, options, note)
    return scan(args.pid, options, note)


def _check_target(args: argparse.Namespace) -> None:
    """A pid or --core, not both; --exe and --sysroot only with --core."""
    if args.core and args.pid is not None:
        raise InvalidArgument("give a pid or --core FILE, not both")
    if not args.core and args.pid is None:
        raise InvalidArgument("give a pid to scan, or --core FILE")
    if not args.core and (args.exe or args.sysroot):
        raise InvalidArgument("--exe and --sysroot go with --core FILE")
    if args.core and args.remote:
        raise InvalidArgument("--core is scanned here: it does not go with --remote")
    if args.max_pause is not None and (args.core or args.remote):
        raise InvalidArgument("--max-pause goes with a scan of a pid here, not --core or --remote")


def handle(args: argparse.Namespace) -> int:
    fmt = chosen_format(args)  # reject contradictory flags before touching the target
    _check_target(args)
    sets_aside = triage.from_args(args, fmt)
    options = ScanOptions(
        limit=ALL_ENTRIES if fmt in PROFILES or sets_aside.active else args.limit,
        # A daemon may refuse contents: over --remote only --contents asks for them.
        contents=args.contents or (sets_aside.needs_contents and not args.remote),
        sample_contents=0 if args.no_contents or args.remote or fmt != "text" else SAMPLE_CONTENTS,
        snapshot=args.snapshot,
        sweep=args.sweep,
        mark_threads=args.mark_threads,
        symbol_budget=args.symbol_budget,
        max_pause_ms=args.max_pause,
    )
    if args.remote:
        from unreachable.rpc.scan_client import remote_scan

        report = remote_scan(args, options, _stage_bar(args, fmt))
    else:
        bar = _stage_bar(args, fmt)
        started = time.monotonic()
        try:
            if bar is not None:
                bar.update("started", 0.0)
            report = _scan(args, options, bar.note(started) if bar else None)
        finally:
            if bar is not None:
                bar.close()
    if sets_aside.active:
        limit = ALL_ENTRIES if fmt in PROFILES else args.limit
        report = triage.apply(sets_aside, report, limit, args.contents)
    write_output(render(report, fmt), args.output)
    tty = sys.stderr.isatty()
    if fmt == "text" and tty:
        from unreachable.report.text import format_summary

        print(format_summary(report), file=sys.stderr)
    elif report.snapshot == "core" and report.snapshot_note and tty:
        print(f"unreachable-cli: note: core {args.core}: {report.snapshot_note}", file=sys.stderr)
    elif (report.snapshot_note or report.sweep_note) and sys.stderr.isatty():
        how = {"fork": "forked", "copy": "copied", "concurrent": "marked running"}.get(
            report.snapshot, "swept in place"
        )
        why = "; ".join(n for n in (report.snapshot_note, report.sweep_note) if n)
        print(
            f"unreachable-cli: note: pid {report.pid} was {how}, paused "
            f"{report.pause_ms:.0f} ms: {why}",
            file=sys.stderr,
        )
    # Unlike the fallbacks above, said whatever stderr is: the report is missing names.
    if report.symbol_note and not (fmt == "text" and tty):
        print(f"unreachable-cli: note: {report.symbol_note}", file=sys.stderr)
    # leak_bytes alone: a baseline's site that grew in bytes, not in blocks.
    return EXIT_LEAKS if report.leak_count or report.leak_bytes else EXIT_NO_LEAKS
