"""`unreachable-cli history`: the scans unreachabled recorded, per process and call site.

Reads the daemon's SQLite history (read-only): `--db`, else
$UNREACHABLE_HISTORY, else /var/lib/unreachable/history.sqlite (the unit's
StateDirectory). Text: one line per scan, oldest first, then with --sites
the call sites of the newest scan of each process. --json: {"scans": [...]}
with each scan's call sites, and {"sites": {signature: frames}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from typing import Any

from unreachable.errors import EXIT_NO_LEAKS, ScanError

DEFAULT_DB = "/var/lib/unreachable/history.sqlite"


class HistoryUnavailable(ScanError):
    pass


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "history",
        help="show the scans unreachabled recorded",
        description="Show the scan history unreachabled keeps (docs/monitoring.md).",
    )
    p.add_argument("--unit", default="", help="only processes of this systemd unit")
    p.add_argument("--pid", type=int, default=0, help="only this pid")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="newest N scans (0: all)")
    p.add_argument("--sites", action="store_true", help="also list leak call sites")
    p.add_argument(
        "--db",
        default=os.environ.get("UNREACHABLE_HISTORY", DEFAULT_DB),
        metavar="FILE",
        help=f"the history database (default $UNREACHABLE_HISTORY or {DEFAULT_DB})",
    )
    p.set_defaults(handler=run)


def _site_name(frames: list[dict[str, Any]]) -> str:
    from unreachable.daemon.monitor import describe_frames

    return describe_frames(frames) if frames else "(no backtrace, or beyond the report's limit)"


def run(args: argparse.Namespace) -> int:
    from unreachable.daemon.history import History

    if not os.path.exists(args.db):
        raise HistoryUnavailable(
            f"no history at {args.db} (is unreachabled running with a history file? see --db)"
        )
    try:
        history = History(args.db, readonly=True)
        scans = history.scans(unit=args.unit, pid=args.pid, limit=args.limit)
        samples = history.samples_of([s["id"] for s in scans])
        frames = {
            site["site"]: history.frames(site["site"])
            for per_scan in samples.values()
            for site in per_scan
        }
    except sqlite3.Error as e:
        raise HistoryUnavailable(f"cannot read the history {args.db}: {e}") from None
    if args.json:
        for scan in scans:
            scan["sites"] = samples[scan["id"]]
        json.dump({"scans": scans, "sites": frames}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_NO_LEAKS
    if not scans:
        print("no scans recorded" + (" for this selection" if args.unit or args.pid else ""))
        return EXIT_NO_LEAKS
    header = f"{'TIME':19}  {'PID':>7}  {'UNIT':24}  {'COMMAND':16}  {'RESULT':6}"
    print(header + f"  {'LEAKS':>7}  {'BYTES':>10}  {'PAUSE ms':>8}")
    for s in scans:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["time"]))
        line = f"{when:19}  {s['pid']:>7}  {s['unit'] or '-':24.24}  {s['name']:16.16}  "
        if s["result"] == "error":
            print(line + f"error   {s['error']}")
        else:
            print(
                line + f"{s['result']:6}  {s['leak_count']:>7}  {s['leak_bytes']:>10}"
                f"  {s['pause_ms']:>8.2f}"
            )
    if args.sites:
        newest: dict[tuple[int, int], dict[str, Any]] = {}
        for s in scans:
            if s["result"] != "error":
                newest[(s["pid"], s["start_time"])] = s
        for s in newest.values():
            print(f"\ncall sites of {s['name']}[{s['pid']}] at its last scan:")
            for site in samples[s["id"]]:
                print(
                    f"  {site['bytes']:>10} bytes in {site['count']:>6} allocations"
                    f"  {site['site']}  {_site_name(frames.get(site['site'], []))}"
                )
    return EXIT_NO_LEAKS
