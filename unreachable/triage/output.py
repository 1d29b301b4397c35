"""What suppressions and baselines add to the text and JSON reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from unreachable.report.model import LeakEntry, ScanReport
from unreachable.triage.baseline import (
    comparison_to_dict,
    describe_site,
    site_to_dict,
    summary_line,
)
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


def json_fields(
    report: ScanReport, leak_to_dict: Callable[[LeakEntry], dict[str, Any]]
) -> dict[str, Any]:
    """The suppression and baseline fields (docs/report-schema.md), only
    when suppressions or a baseline were given."""
    out: dict[str, Any] = {}
    if (s := report.suppressed) is not None:
        out["suppressed_count"] = s.count
        out["suppressed_bytes"] = s.bytes
        out["suppressions"] = [
            {
                "pattern": u.rule.pattern,
                "file": u.rule.source,
                "line": u.rule.line,
                "count": u.count,
                "bytes": u.bytes,
            }
            for u in s.used
        ]
        out["suppressed_leaks"] = [
            {**leak_to_dict(leak), "suppression": rule.pattern} for leak, rule in s.leaks
        ]
    if (c := report.baseline) is not None:
        out["baseline"] = comparison_to_dict(c)
    return out


def json_leak(report: ScanReport, leak: LeakEntry, d: dict[str, Any]) -> dict[str, Any]:
    if report.baseline is not None and (site := report.baseline.site_of.get(id(leak))):
        d["site"] = site_to_dict(site)
    return d
