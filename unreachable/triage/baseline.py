"""Compare a scan with a saved one (`scan --baseline OLD.json`): what is new or grew.

Leaks are matched by allocation site: the backtrace after symbolization, each
frame as its function name and the base name of its module, so the same
call path matches across ASLR, a restart and a rebuilt binary whose
addresses moved. A frame without a function name falls back to its module's
base name and its pc relative to that module (stable across ASLR, not
across a rebuild); a pc in no module to the pc itself. Leaks without a
backtrace are one site per block size.

Each entry weighs what the exports give it (model.report.export_weights:
its blocks, its similar leaks and what they reference), so the sites of a
report add up to its totals; a site's count and bytes are the sums over its
entries. A site is new when the baseline has no entry of it, grown when it
now has more allocations or more bytes than there. The report then lists
only the entries of new and grown sites, and its leak_count/leak_bytes are
the sum of their growth: exit status 1 means something is new.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from unreachable.errors import InvalidArgument
from unreachable.model.report import LEAK_COUNTS, LeakEntry, ScanReport, export_weights
from unreachable.symbolize.frame import Frame
from unreachable.triage.suppressions import weighted

SiteKey = tuple[str, ...]


class BaselineError(InvalidArgument):
    """The baseline file cannot be read or is no scan report."""


def frame_key(f: Frame) -> str:
    module = os.path.basename(f.map)
    if f.function:
        return f"{f.function} ({module})" if module else f.function
    if f.map:
        return f"{module}+0x{f.rel_pc:x}"
    return f"0x{f.pc:x}"


def site_key(backtrace: Sequence[Frame], size: int) -> SiteKey:
    if not backtrace:
        return (f"[no backtrace] size={size}",)
    return tuple(frame_key(f) for f in backtrace)


@dataclass(slots=True)
class Site:
    """One allocation site, in the baseline and now."""

    key: SiteKey
    old_count: int = 0
    old_bytes: int = 0
    count: int = 0
    bytes: int = 0
    in_baseline: bool = False

    @property
    def grew(self) -> bool:
        return self.count > self.old_count or self.bytes > self.old_bytes


@dataclass(slots=True)
class Baseline:
    """A saved scan's totals and its sites, to compare a scan with."""

    path: str
    leak_count: int
    leak_bytes: int
    sites: dict[SiteKey, tuple[int, int]]  # count, bytes
    unlisted_count: int  # leaks of the baseline its entries do not list (its --limit)
    unlisted_bytes: int


@dataclass(slots=True)
class Comparison:
    """What --baseline did to a report."""

    baseline: Baseline
    now_count: int  # the scan's totals (after suppressions) before the comparison
    now_bytes: int
    sites: list[Site] = field(default_factory=list)  # new and grown, as the entries list them
    site_of: dict[int, Site] = field(default_factory=dict)  # id(entry) -> its site


def load(path: str) -> Baseline:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise BaselineError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise BaselineError(f"{path}: not a JSON scan report (scan --json): {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("leaks"), list):
        raise BaselineError(f"{path}: not a JSON scan report (scan --json)")
    if "baseline" in doc:
        raise BaselineError(
            f"{path}: lists only what grew against another baseline; save a scan without --baseline"
        )
    try:
        leaks = [{name: int(leak[name]) for name in LEAK_COUNTS} for leak in doc["leaks"]]
        frames = [[Frame(**fr) for fr in leak["backtrace"]] for leak in doc["leaks"]]
        count, size = int(doc["leak_count"]), int(doc["leak_bytes"])
    except (KeyError, TypeError, ValueError) as e:
        raise BaselineError(
            f"{path}: not a JSON scan report (scan --json): bad field {e}"
        ) from None
    weights = export_weights(leaks, count, size)
    sites: dict[SiteKey, tuple[int, int]] = {}
    for leak, backtrace, (c, b) in zip(leaks, frames, weights.entries, strict=True):
        key = site_key(backtrace, leak["size"])
        old = sites.get(key, (0, 0))
        sites[key] = (old[0] + c, old[1] + b)
    return Baseline(path, count, size, sites, weights.unlisted_count, weights.unlisted_bytes)


def compare(report: ScanReport, baseline: Baseline, limit: int) -> ScanReport:
    """Keep only the entries of new and grown sites (at most `limit`), and
    count only their growth. The report must carry every entry."""
    entries = weighted(report)
    sites: dict[SiteKey, Site] = {}
    for leak, count, size in entries:
        key = site_key(leak.backtrace, leak.size)
        site = sites.get(key)
        if site is None:
            old = baseline.sites.get(key)
            site = sites[key] = Site(key, *(old or (0, 0)), in_baseline=old is not None)
        site.count += count
        site.bytes += size
    out = Comparison(baseline, report.leak_count, report.leak_bytes)
    kept: list[LeakEntry] = []
    for leak, _, _ in entries:
        site = sites[site_key(leak.backtrace, leak.size)]
        if not site.grew:
            continue
        kept.append(leak)
        out.site_of[id(leak)] = site
        if site not in out.sites:
            out.sites.append(site)
    report.leaks = kept[:limit]
    report.leak_count = sum(max(s.count - s.old_count, 0) for s in out.sites)
    report.leak_bytes = sum(max(s.bytes - s.old_bytes, 0) for s in out.sites)
    report.baseline = out
    return report


def _allocs(n: int) -> str:
    return f"{n} allocation{'' if n == 1 else 's'}"


def describe_site(site: Site) -> str:
    """The line under an entry of the text report."""
    if not site.in_baseline:
        return f"   new site: {site.bytes} bytes in {_allocs(site.count)}"
    return (
        f"   site grew: {site.old_bytes} -> {site.bytes} bytes ({site.bytes - site.old_bytes:+d}),"
        f" {site.old_count} -> {site.count} allocations ({site.count - site.old_count:+d})"
    )


def summary_line(c: Comparison) -> str:
    """The line under the totals of the text report."""
    b = c.baseline
    return (
        f"  new or grown since {b.path}: {len(c.sites)} site{'' if len(c.sites) == 1 else 's'};"
        f" baseline {b.leak_bytes} bytes in {_allocs(b.leak_count)},"
        f" now {c.now_bytes} bytes in {_allocs(c.now_count)}"
    )


def site_to_dict(site: Site) -> dict[str, Any]:
    return {
        "new": not site.in_baseline,
        "old_count": site.old_count,
        "old_bytes": site.old_bytes,
        "count": site.count,
        "bytes": site.bytes,
        "delta_count": site.count - site.old_count,
        "delta_bytes": site.bytes - site.old_bytes,
    }


def comparison_to_dict(c: Comparison) -> dict[str, Any]:
    b = c.baseline
    return {
        "file": b.path,
        "leak_count": b.leak_count,
        "leak_bytes": b.leak_bytes,
        "unlisted_count": b.unlisted_count,
        "unlisted_bytes": b.unlisted_bytes,
        "now_count": c.now_count,
        "now_bytes": c.now_bytes,
        "sites": [{"site": list(s.key), **site_to_dict(s)} for s in c.sites],
    }
