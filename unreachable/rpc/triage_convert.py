"""Suppressions and baselines between the JSON report, the proto and the model.

The JSON report's suppressed_* fields and `baseline` object
(docs/report-schema.md) ride in ScanReport.suppressed and
ScanReport.baseline, so a report the daemon set known leaks aside in prints
on the client as it would have printed where it was made: LSan's
"Suppressions used" block, the baseline line under the totals and each
entry's site delta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from unreachable.report.model import LeakEntry, ScanReport
from unreachable.symbolize.frames import Frame
from unreachable.triage.baseline import Baseline, Comparison, Site, site_key
from unreachable.triage.suppressions import Rule, RuleUse, Suppressed
from unreachable.v1 import unreachable_pb2 as pb


def triage_to_proto(
    d: dict[str, Any], msg: pb.ScanReport, leak_from_dict: Callable[[dict[str, Any]], pb.Leak]
) -> None:
    """Copy the JSON report's suppression and baseline fields into msg."""
    if "suppressed_count" in d:
        s = msg.suppressed
        s.count = d["suppressed_count"]
        s.bytes = d["suppressed_bytes"]
        s.used.extend(
            pb.SuppressionUse(
                pattern=u["pattern"],
                file=u["file"],
                line=u["line"],
                count=u["count"],
                bytes=u["bytes"],
            )
            for u in d.get("suppressions", [])
        )
        s.leaks.extend(
            pb.SuppressedLeak(leak=leak_from_dict(leak), suppression=leak["suppression"])
            for leak in d.get("suppressed_leaks", [])
        )
    if (b := d.get("baseline")) is not None:
        c = msg.baseline
        c.file = b["file"]
        for name in ("leak_count", "leak_bytes", "unlisted_count", "unlisted_bytes"):
            setattr(c, name, b[name])
        c.now_count, c.now_bytes = b["now_count"], b["now_bytes"]
        index: dict[tuple[str, ...], int] = {}
        for i, site in enumerate(b["sites"]):
            index[tuple(site["site"])] = i
            c.sites.append(
                pb.BaselineSite(
                    site=site["site"],
                    is_new=site["new"],
                    old_count=site["old_count"],
                    old_bytes=site["old_bytes"],
                    count=site["count"],
                    bytes=site["bytes"],
                )
            )
        # A JSON entry's site names no key: it is the one its backtrace makes.
        for leak, entry in zip(d["leaks"], msg.leaks, strict=True):
            if "site" in leak:
                frames = [Frame(**f) for f in leak["backtrace"]]
                found = index.get(site_key(frames, leak["size"]))
                if found is not None:
                    entry.baseline_site = found


def triage_to_model(
    r: pb.ScanReport, report: ScanReport, leak_to_model: Callable[[pb.Leak], LeakEntry]
) -> None:
    """Set report.suppressed and report.baseline from the proto's fields."""
    if r.HasField("suppressed"):
        s = r.suppressed
        uses = [RuleUse(Rule(u.pattern, u.file, u.line), u.count, u.bytes) for u in s.used]
        by_pattern: dict[str, Rule] = {}
        for use in uses:
            by_pattern.setdefault(use.rule.pattern, use.rule)
        leaks = [
            (leak_to_model(x.leak), by_pattern.get(x.suppression) or Rule(x.suppression, "", 0))
            for x in s.leaks
        ]
        report.suppressed = Suppressed(s.count, s.bytes, uses, leaks)
    if r.HasField("baseline"):
        b = r.baseline
        sites = [
            Site(tuple(x.site), x.old_count, x.old_bytes, x.count, x.bytes, not x.is_new)
            for x in b.sites
        ]
        comparison = Comparison(
            Baseline(b.file, b.leak_count, b.leak_bytes, {}, b.unlisted_count, b.unlisted_bytes),
            b.now_count,
            b.now_bytes,
            sites,
        )
        for msg, entry in zip(r.leaks, report.leaks, strict=True):
            if msg.HasField("baseline_site") and msg.baseline_site < len(sites):
                comparison.site_of[id(entry)] = sites[msg.baseline_site]
        report.baseline = comparison
