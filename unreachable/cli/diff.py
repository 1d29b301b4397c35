"""unreachable-cli diff OLD NEW: what grew between two heap dumps or two scans.

OLD and NEW are heap dump files (v1.0-v1.2), ``unreachable-cli scan --json``
output or ``unreachable-cli heapdump --json`` output, in any combination.
Exit status: 0 nothing grew, 1 something grew, 2 the diff could not be done.
"""

from __future__ import annotations

import argparse
import json
import sys

from unreachable.errors import EXIT_LEAKS, EXIT_NO_LEAKS, InvalidArgument


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff",
        help="show what grew between two heap dumps or two scan results",
        description="Compare two snapshots (heap dump files, or JSON from 'scan --json' or "
        "'heapdump --json') per backtrace: allocations and bytes before, after, and the "
        "change, largest growth first. "
        "Exit status: 0 nothing grew, 1 something grew, 2 the diff could not be done.",
    )
    p.add_argument("old", metavar="OLD", help="the earlier snapshot")
    p.add_argument("new", metavar="NEW", help="the later snapshot")
    p.add_argument(
        "--format",
        choices=("text", "json", "collapsed"),
        default="text",
        help="text (default), json, or collapsed stacks of the growth for flamegraph.pl",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="also list backtraces that shrank or did not change",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from unreachable.analysis.diff import (
        SnapshotError,
        diff_snapshots,
        diff_to_collapsed,
        diff_to_dict,
        format_diff_text,
        load_snapshot,
    )

    snapshots = []
    for path in (args.old, args.new):
        try:
            snapshots.append(load_snapshot(path))
        except OSError as e:
            raise InvalidArgument(f"cannot read {path}: {e.strerror or e}") from None
        except SnapshotError as e:
            raise InvalidArgument(str(e)) from None
    for snap in snapshots:
        for warning in snap.warnings:
            print(f"unreachable-cli: warning: {snap.source}: {warning}", file=sys.stderr)
        if snap.note:
            print(f"unreachable-cli: note: {snap.source}: {snap.note}", file=sys.stderr)
    old, new = snapshots
    rows = diff_snapshots(old, new, include_all=args.all)
    if args.format == "json":
        out = json.dumps(diff_to_dict(old, new, rows), indent=2) + "\n"
    elif args.format == "collapsed":
        out = diff_to_collapsed(rows)
    else:
        out = format_diff_text(old, new, rows)
    sys.stdout.write(out)
    sys.stdout.flush()
    return EXIT_LEAKS if any(r.grew for r in rows) else EXIT_NO_LEAKS
