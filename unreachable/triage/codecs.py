"""What suppressions and a baseline did to a report, to JSON and back.

Their JSON (docs/report-schema.md) is not their structures field for field:
suppressions are flattened into the report's top level, a baseline's site
is written under each leak entry it lists, and a rule travels as its
pattern, file and line. report/schema.py calls these for the model's
`suppressed` and `baseline` fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.triage import suppressions
from unreachable.triage.baseline import (
    Baseline,
    Comparison,
    Site,
    comparison_to_dict,
    site_key,
    site_to_dict,
)

LeakToJson = Callable[[LeakEntry], dict[str, Any]]


def suppressed_to_json(report: ScanReport, leak_to_json: LeakToJson) -> dict[str, Any]:
    if (s := report.suppressed) is None:
        return {}
    return {
        "suppressed_count": s.count,
        "suppressed_bytes": s.bytes,
        "suppressions": [
            {
                "pattern": u.rule.pattern,
                "file": u.rule.source,
                "line": u.rule.line,
                "count": u.count,
                "bytes": u.bytes,
            }
            for u in s.used
        ],
        "suppressed_leaks": [
            {**leak_to_json(leak), "suppression": rule.pattern} for leak, rule in s.leaks
        ],
    }


def suppressed_from_json(
    d: dict[str, Any], leak_from_json: Callable[[dict[str, Any]], LeakEntry]
) -> suppressions.Suppressed | None:
    """A rule is parsed again from its pattern, file and line: the JSON
    names the rules that matched, each suppressed leak by its pattern."""
    if "suppressed_count" not in d:
        return None
    used = [
        suppressions.RuleUse(_rule(u["pattern"], u["file"], u["line"]), u["count"], u["bytes"])
        for u in d.get("suppressions", [])
    ]
    rule_of = _rule_of(used)
    leaks = [
        (leak_from_json(leak), rule_of(leak["suppression"]))
        for leak in d.get("suppressed_leaks", [])
    ]
    return suppressions.Suppressed(d["suppressed_count"], d["suppressed_bytes"], used, leaks)


def _rule_of(used: list[suppressions.RuleUse]) -> Callable[[str], suppressions.Rule]:
    """The rule a suppressed entry names by its pattern: the first used rule
    of that pattern (the one that matched), else one parsed from it."""
    rules: dict[str, suppressions.Rule] = {}
    for u in reversed(used):
        rules[u.rule.pattern] = u.rule
    return lambda pattern: rules.get(pattern) or _rule(pattern, "", 0)


def _rule(pattern: str, source: str, line: int) -> suppressions.Rule:
    (rule,) = suppressions.parse(f"leak:{pattern}", source)
    return dataclasses.replace(rule, line=line)


def baseline_to_json(report: ScanReport, _leak_to_json: LeakToJson) -> dict[str, Any]:
    return {} if report.baseline is None else {"baseline": comparison_to_dict(report.baseline)}


def baseline_leak_json(report: ScanReport, leak: LeakEntry, d: dict[str, Any]) -> dict[str, Any]:
    if report.baseline is not None and (site := report.baseline.site_of.get(id(leak))):
        d["site"] = site_to_dict(site)
    return d


def baseline_from_json(d: dict[str, Any], leaks: list[LeakEntry]) -> Comparison | None:
    """The comparison a report lists. The baseline's own sites (its input,
    every site of OLD.json) are not in the report: `baseline.sites` comes
    back empty."""
    if (b := d.get("baseline")) is None:
        return None
    base = Baseline(
        b["file"], b["leak_count"], b["leak_bytes"], {}, b["unlisted_count"], b["unlisted_bytes"]
    )
    sites = [
        Site(
            tuple(s["site"]),
            s["old_count"],
            s["old_bytes"],
            s["count"],
            s["bytes"],
            in_baseline=not s["new"],
        )
        for s in b["sites"]
    ]
    by_key = {s.key: s for s in sites}
    comparison = Comparison(base, b["now_count"], b["now_bytes"], sites)
    for leak in leaks:
        if (site := by_key.get(site_key(leak.backtrace, leak.size))) is not None:
            comparison.site_of[id(leak)] = site
    return comparison


# ---- over gRPC ----------------------------------------------------------------
# The messages are filled through their own fields' add(), and leak entries
# through the converters report/schema.py passes in, so this module needs
# neither the generated proto module nor the schema's walker.

LeakToProto = Callable[[LeakEntry, Any], None]
LeakFromProto = Callable[[Any], LeakEntry]


def suppressed_to_proto(report: ScanReport, msg: Any, leak_to_proto: LeakToProto) -> None:
    if (s := report.suppressed) is None:
        return
    out = msg.suppressed
    out.count, out.bytes = s.count, s.bytes
    for u in s.used:
        out.used.add(
            pattern=u.rule.pattern,
            file=u.rule.source,
            line=u.rule.line,
            count=u.count,
            bytes=u.bytes,
        )
    for leak, rule in s.leaks:
        x = out.leaks.add(suppression=rule.pattern)
        leak_to_proto(leak, x.leak)


def suppressed_from_proto(
    msg: Any, leak_from_proto: LeakFromProto
) -> suppressions.Suppressed | None:
    if not msg.HasField("suppressed"):
        return None
    s = msg.suppressed
    used = [
        suppressions.RuleUse(_rule(u.pattern, u.file, u.line), u.count, u.bytes) for u in s.used
    ]
    rule_of = _rule_of(used)
    leaks = [(leak_from_proto(x.leak), rule_of(x.suppression)) for x in s.leaks]
    return suppressions.Suppressed(s.count, s.bytes, used, leaks)


def baseline_to_proto(report: ScanReport, msg: Any) -> None:
    """Each entry names its site by the site's index in the comparison."""
    if (c := report.baseline) is None:
        return
    out = msg.baseline
    b = c.baseline
    out.file = b.path
    out.leak_count, out.leak_bytes = b.leak_count, b.leak_bytes
    out.unlisted_count, out.unlisted_bytes = b.unlisted_count, b.unlisted_bytes
    out.now_count, out.now_bytes = c.now_count, c.now_bytes
    index = {}
    for i, site in enumerate(c.sites):
        index[id(site)] = i
        out.sites.add(
            site=list(site.key),
            is_new=not site.in_baseline,
            old_count=site.old_count,
            old_bytes=site.old_bytes,
            count=site.count,
            bytes=site.bytes,
        )
    for leak, entry in zip(report.leaks, msg.leaks, strict=True):
        if (listed := c.site_of.get(id(leak))) is not None and id(listed) in index:
            entry.baseline_site = index[id(listed)]


def baseline_from_proto(msg: Any, leaks: list[LeakEntry]) -> Comparison | None:
    if not msg.HasField("baseline"):
        return None
    b = msg.baseline
    sites = [
        Site(tuple(x.site), x.old_count, x.old_bytes, x.count, x.bytes, in_baseline=not x.is_new)
        for x in b.sites
    ]
    base = Baseline(b.file, b.leak_count, b.leak_bytes, {}, b.unlisted_count, b.unlisted_bytes)
    comparison = Comparison(base, b.now_count, b.now_bytes, sites)
    for entry, leak in zip(msg.leaks, leaks, strict=True):
        if entry.HasField("baseline_site") and entry.baseline_site < len(sites):
            comparison.site_of[id(leak)] = sites[entry.baseline_site]
    return comparison
