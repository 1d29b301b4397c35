"""The scan command's triage options: --suppressions, --print-suppressions, --baseline.

They need every entry of the report, symbolized (and each block's first
bytes when a rule matches contents), so the scan is asked for all of them;
the entries left are then cut to --limit.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from unreachable.errors import InvalidArgument
from unreachable.model.report import ScanReport
from unreachable.triage import SUPPRESSIONS_ENV, suppression_paths_from_env
from unreachable.writing import write_output

if TYPE_CHECKING:
    from unreachable.triage import baseline as baselines
    from unreachable.triage import suppressions

ALL_ENTRIES = 0xFFFF_FFFF  # the most a ScanRequest's uint32 limit holds


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--suppressions",
        action="append",
        default=[],
        metavar="FILE",
        help="set aside the leaks FILE's rules match (LeakSanitizer's format: leak:PATTERN "
        "against any frame's function, module or source file; leak:size=N[,contents=HEX] "
        f"for leaks without a backtrace); repeatable, added to ${SUPPRESSIONS_ENV}; "
        "they leave the totals and the exit status and are counted under 'Suppressions used'",
    )
    p.add_argument(
        "--print-suppressions",
        metavar="FILE",
        help="write to FILE ('-': stdout) a suppression file that sets aside every leak this "
        "scan reports (after the suppressions given)",
    )
    p.add_argument(
        "--baseline",
        metavar="OLD.json",
        help="report only allocation sites that are new or grew since OLD.json (a saved "
        "scan --json), with their deltas; the totals and the exit status count only that",
    )
    p.add_argument(
        "--daemon-baseline",
        action="store_true",
        help="with --remote: compare with the baseline unreachabled keeps for PID (its "
        "[[targets]] entry's or its 'baseline' setting), as its background scans do",
    )


@dataclass(slots=True, eq=False, repr=False)
class Triage:
    """The scan command's triage options, their files read."""

    sources: list[str]  # suppression files, from the environment and --suppressions
    rules: list[suppressions.Rule]
    baseline: baselines.Baseline | None
    print_to: str | None

    @property
    def active(self) -> bool:
        return bool(self.sources or self.baseline or self.print_to)

    @property
    def needs_contents(self) -> bool:
        """Block rules look at contents; generated rules for leaks without a
        backtrace name them."""
        return bool(self.print_to) or any(r.contents for r in self.rules)


def from_args(args: argparse.Namespace, fmt: str) -> Triage:
    """Read every file first: a bad one is refused before the target is touched."""
    if args.baseline and fmt in ("collapsed", "pprof"):
        # A profile's samples add up to the totals; growth has no stacks of its own.
        raise InvalidArgument(
            f"--baseline prints text, json or lmu, not {fmt} "
            "(unreachable-cli diff OLD.json NEW.json compares two scans per backtrace)"
        )
    if args.daemon_baseline:
        if not args.remote:
            raise InvalidArgument("--daemon-baseline asks unreachabled: it needs --remote")
        if args.baseline:
            raise InvalidArgument("--daemon-baseline and --baseline exclude each other")
        if fmt in ("collapsed", "pprof"):
            raise InvalidArgument(f"--daemon-baseline prints text, json or lmu, not {fmt}")
    # The suppressions module (its rules, their matching) only for a scan
    # that has suppressions to apply or to print.
    paths = suppression_paths_from_env() + list(args.suppressions)
    rules: list[suppressions.Rule] = []
    if paths:
        from unreachable.triage import suppressions

        rules = suppressions.load(paths)
    base = None
    if args.baseline:
        # Imported when asked for: every scan's imports are part of its time.
        from unreachable.triage import baseline as baselines

        base = baselines.load(args.baseline)
    return Triage(paths, rules, base, args.print_suppressions)


def apply(t: Triage, report: ScanReport, limit: int, contents: bool) -> ScanReport:
    if t.sources or t.print_to:
        from unreachable.triage import suppressions
    if t.sources:
        report = suppressions.apply(report, t.rules, limit)
    if t.print_to:
        text = suppressions.generate(report, suppressions.weighted(report))
        write_output(text, None if t.print_to == "-" else t.print_to)
    if t.baseline is not None:
        from unreachable.triage import baseline as baselines

        report = baselines.compare(report, t.baseline, limit)
    else:
        report.leaks = report.leaks[:limit]
    if not contents:
        for leak in report.leaks:
            leak.contents = None
        for leak, _ in report.suppressed.leaks if report.suppressed else ():
            leak.contents = None
    return report
