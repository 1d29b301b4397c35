"""The daemon's scan worker: one scan, why, retainers or heap dump per process.

unreachabled runs every capture in a process of its own (daemon/scans.py:
the ptrace work never touches the daemon's threads, and killing the worker
releases the target at once):

    python -P -m unreachable.daemon.worker REQUEST
    python -P -m unreachable.daemon.worker -      (REQUEST on stdin: the daemon's way)

REQUEST is one JSON object: `command` ("scan", "why", "retainers" or
"heapdump"), `pid`, and the command's options (WORKER_OPTIONS below, each
optional with the CLI's default). The worker answers on stdout, one JSON
object per line:

    {"progress": STAGE, "elapsed_ms": MS}      zero or more (scan only)
    {"result": REPORT}                          last line on success; exit 0
    {"error": STATUS, "message": LINE}          last line on failure; exit 2

REPORT is what the CLI's --json prints for the command (docs/report-schema.md;
a heap dump as heapdump --json). STATUS is the gRPC status the daemon
answers with (errors.ScanError.grpc_status: NOT_FOUND, PERMISSION_DENIED,
FAILED_PRECONDITION, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, INTERNAL).
Anything else the worker or a library writes goes to stderr (stdout is
moved there before the work starts), which the daemon reads only to say
why a worker that ended without a last line died.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from unreachable.errors import EXIT_FAILED, InvalidArgument, ScanError

# Each command's options: name -> (type, default). Defaults are the CLI's.
WORKER_OPTIONS: dict[str, dict[str, tuple[type, Any]]] = {
    "scan": {
        "limit": (int, 100),
        "contents": (bool, False),
        "snapshot": (str, "auto"),
        "sweep": (str, "auto"),
        "mark_threads": (int, 0),
        "suppressions": (list, []),
        "baseline": (str, ""),
    },
    "why": {"address": (int, 0), "snapshot": (str, "auto")},
    "retainers": {"site": (str, None), "limit": (int, 10), "snapshot": (str, "auto")},
    "heapdump": {},
}


def request(text: str) -> tuple[str, int, dict[str, Any]]:
    """(command, pid, options) of a REQUEST; InvalidArgument if it is not one."""
    try:
        d = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"worker request is not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("command") not in WORKER_OPTIONS:
        raise InvalidArgument(f"worker request names no command of {sorted(WORKER_OPTIONS)}")
    command = d.pop("command")
    pid = d.pop("pid", None)
    if type(pid) is not int or pid <= 0:
        raise InvalidArgument(f"worker request: not a pid: {pid!r}")
    spec = WORKER_OPTIONS[command]
    if unknown := set(d) - set(spec):
        raise InvalidArgument(f"worker request: {command} takes no {', '.join(sorted(unknown))}")
    options = {}
    for name, (kind, default) in spec.items():
        value = d.get(name, default)
        if value is not None and type(value) is not kind:
            raise InvalidArgument(f"worker request: {name} must be {kind.__name__}")
        options[name] = value
    return command, pid, options


def _scan(pid: int, o: dict[str, Any], note: Callable[[str], None]) -> dict[str, Any]:
    """As `unreachable-cli scan PID --json` with the same options, the
    suppression files of $UNREACHABLE_SUPPRESSIONS included."""
    from unreachable.report.json_report import report_to_dict
    from unreachable.scan import ScanOptions, scan
    from unreachable.triage import apply as triage
    from unreachable.triage import baseline as baselines
    from unreachable.triage import suppression_paths_from_env, suppressions

    paths = suppression_paths_from_env() + [str(p) for p in o["suppressions"]]
    base = baselines.load(o["baseline"]) if o["baseline"] else None
    sets_aside = triage.Triage(paths, suppressions.load(paths), base, None)
    options = ScanOptions(
        limit=triage.ALL_ENTRIES if sets_aside.active else o["limit"],
        contents=o["contents"] or sets_aside.needs_contents,
        sample_contents=0,
        snapshot=o["snapshot"],
        sweep=o["sweep"],
        mark_threads=o["mark_threads"],
    )
    report = scan(pid, options, note)
    if sets_aside.active:
        report = triage.apply(sets_aside, report, o["limit"], o["contents"])
    return report_to_dict(report)


def _why(pid: int, o: dict[str, Any]) -> dict[str, Any]:
    from unreachable.retention.why import why
    from unreachable.scan import ScanOptions

    return why(pid, o["address"], ScanOptions(snapshot=o["snapshot"]))


def _retainers(pid: int, o: dict[str, Any]) -> dict[str, Any]:
    from unreachable.retention.retainers import retainers
    from unreachable.scan import ScanOptions

    return retainers(pid, ScanOptions(snapshot=o["snapshot"]), o["site"], o["limit"])


def _heapdump(pid: int) -> dict[str, Any]:
    from unreachable.heapdump.live import heap_dump
    from unreachable.heapdump.report import dump_to_dict

    return dump_to_dict(heap_dump(pid))


def run(text: str, out: IO[str]) -> int:
    """Do one REQUEST, answering on `out`; the exit status."""

    def say(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    started = time.monotonic()

    def note(stage: str) -> None:
        say({"progress": stage, "elapsed_ms": round((time.monotonic() - started) * 1000, 3)})

    try:
        command, pid, options = request(text)
        if command == "scan":
            result = _scan(pid, options, note)
        elif command == "why":
            result = _why(pid, options)
        elif command == "retainers":
            result = _retainers(pid, options)
        else:
            result = _heapdump(pid)
    except ScanError as e:
        say({"error": e.grpc_status, "message": str(e)})
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - a bug: its traceback for the daemon's debug log
        traceback.print_exc()
        say({"error": "INTERNAL", "message": f"internal error: {type(e).__name__}: {e}"})
        return EXIT_FAILED
    say({"result": result})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # The protocol keeps stdout to itself: whatever else writes to fd 1 (a
    # library, a native printf) lands on stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    if len(args) != 1:
        out.write(json.dumps({"error": "INVALID_ARGUMENT", "message": "usage: worker REQUEST"}))
        out.write("\n")
        out.close()
        return EXIT_FAILED
    try:
        return run(sys.stdin.read() if args[0] == "-" else args[0], out)
    finally:
        out.close()


if __name__ == "__main__":
    sys.exit(main())
