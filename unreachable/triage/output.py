"""What suppressions and baselines add to the text report (their JSON: triage/codecs.py)."""

from __future__ import annotations

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.triage.baseline import describe_site, summary_line
from unreachable.triage.suppressions import format_used


def text_header(report: ScanReport) -> list[str]:
    return [summary_line(report.baseline)] if report.baseline is not None else []


def text_entry(report: ScanReport, leak: LeakEntry, lines: list[str]) -> list[str]:
    if report.baseline is not None and (site := report.baseline.site_of.get(id(leak))):
        return [lines[0], describe_site(site), *lines[1:]]
    return lines


def text_footer(report: ScanReport) -> list[str]:
    used = format_used(report.suppressed) if report.suppressed is not None else []
    return [*used, ""] if used else []
