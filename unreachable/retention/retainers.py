"""unreachable-cli retainers PID: the live heap grouped by what retains it.

The dominator tree (native/mark/retention.c) hangs every reachable block
below the root region that alone keeps it alive, or below the virtual root
when several do ("shared"). A region's retained bytes are its subtree's.
An allocation site's are those of its blocks that no other block of the
same site dominates, so a list of one site counts once, not once per node.
Blocks without a recorded backtrace (the target runs without backtrace=N)
are grouped by their size instead.
"""

from __future__ import annotations

import json
import re
from array import array
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from unreachable import _native
from unreachable.model.report import ScanReport
from unreachable.report.text import format_frame
from unreachable.retention.collect import GraphCollector, RootRegion, graph_scan
from unreachable.scan import ScanOptions
from unreachable.symbolize.frame import Frame, frame_to_dict

SHARED = -2  # a block several root regions reach, none alone
SITES_PER_ROOT = 3
HOLDERS_PER_SITE = 3
TEXT_FRAMES = 4


def retainers(
    pid: int, options: ScanOptions | None = None, site: str | None = None, limit: int = 10
) -> dict[str, Any]:
    collector = GraphCollector(pid, dominators=True)
    report = graph_scan(pid, options, collector)
    return build(collector, report, site, limit)


def site_matcher(pattern: str) -> re.Pattern[str]:
    """LeakSanitizer's template rule: plain text matches anywhere, `*` any
    run of characters."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def _matches(frames: list[Frame], rule: re.Pattern[str]) -> bool:
    return any(rule.search(text) for f in frames for text in (f.function, f.map, f.file) if text)


def build(c: GraphCollector, report: ScanReport, site: str | None, limit: int) -> dict[str, Any]:
    tree = c.tree or {}
    frames = c.frames()
    rule = site_matcher(site) if site else None

    def wanted(key: int) -> bool:
        return rule is None or (key > 0 and _matches(frames.get(key, []), rule))

    reach = _RootReach(_native.abi_decode_array("ur_root_site", tree.get("root_sites", b"")))
    roots = _region_entries(c, tree, reach, frames, wanted, filtered=rule is not None)
    # What several regions reach and none retains alone, as one pseudo-root.
    mine = {k: v for k, v in reach.per_root[SHARED].items() if wanted(k)}
    if mine:
        entry: dict[str, Any] = {"kind": "shared", "name": "several roots, none alone"}
        entry["retained_bytes"] = reach.shared_bytes
        entry["retained_count"] = reach.shared_count
        roots.append(_with_sites(entry, mine, frames, filtered=rule is not None))
    weight = "site_bytes" if rule is not None else "retained_bytes"
    roots.sort(key=lambda e: (-e[weight], e["name"]))
    return {
        "pid": report.pid,
        "command": report.command,
        "snapshot": report.snapshot,
        "pause_ms": round(report.pause_ms, 3),
        "allocation_count": report.allocation_count,
        "allocation_bytes": report.allocation_bytes,
        "reachable_count": reach.reachable_count,
        "reachable_bytes": reach.reachable_bytes,
        "shared_count": reach.shared_count,
        "shared_bytes": reach.shared_bytes,
        "site_filter": site,
        "roots": roots[:limit],
        "sites": _site_entries(c, tree, frames, wanted, limit),
    }


class _RootReach:
    """The dominator tree's (top region, site, bytes, count) rows, per top
    region, with the totals of what is reachable and what is shared."""

    def __init__(self, root_sites: list[_native.RootSite]) -> None:
        self.per_root: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
        self.shared_bytes = self.shared_count = self.reachable_bytes = self.reachable_count = 0
        for row in root_sites:
            top, key, nbytes, count = row["top"], row["key"], row["bytes"], row["count"]
            self.reachable_bytes += nbytes
            self.reachable_count += count
            if top == SHARED:
                self.shared_bytes += nbytes
                self.shared_count += count
            self.per_root[top][key] = (nbytes, count)


def _region_entries(
    c: GraphCollector,
    tree: dict[str, Any],
    reach: _RootReach,
    frames: dict[int, list[Frame]],
    wanted: Callable[[int], bool],
    *,
    filtered: bool,
) -> list[dict[str, Any]]:
    """Each root region that retains something (of the wanted sites, when filtered)."""
    region_bytes = array("Q", tree.get("region_bytes", b""))
    region_count = array("Q", tree.get("region_count", b""))
    roots = []
    for region in c.regions:
        r = region.id
        if not region_count[r]:
            continue
        mine = {k: v for k, v in reach.per_root[r].items() if wanted(k)}
        if filtered and not mine:
            continue
        entry = _region_dict(region)
        entry["retained_bytes"] = region_bytes[r]
        entry["retained_count"] = region_count[r]
        roots.append(_with_sites(entry, mine, frames, filtered=filtered))
    return roots


def _with_sites(
    entry: dict[str, Any],
    mine: dict[int, tuple[int, int]],
    frames: dict[int, list[Frame]],
    *,
    filtered: bool,
) -> dict[str, Any]:
    """A root's entry with its largest sites (and, when filtered, the wanted sites' sums)."""
    if filtered:
        entry["site_bytes"] = sum(b for b, _ in mine.values())
        entry["site_count"] = sum(n for _, n in mine.values())
    best = sorted(mine.items(), key=lambda kv: (-kv[1][0], kv[0]))[:SITES_PER_ROOT]
    entry["sites"] = [_site_entry(frames, k, b, n) for k, (b, n) in best]
    return entry


def _site_entries(
    c: GraphCollector,
    tree: dict[str, Any],
    frames: dict[int, list[Frame]],
    wanted: Callable[[int], bool],
    limit: int,
) -> list[dict[str, Any]]:
    """The sites that retain most, each with the root regions that hold the most of it."""
    totals = _native.abi_decode_array("ur_site_total", tree.get("sites", b""))
    held_by: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for holder in _native.abi_decode_array("ur_site_holder", tree.get("holders", b"")):
        held_by[holder["key"]].append((holder["top"], holder["bytes"]))
    sites: list[dict[str, Any]] = []
    for total in sorted(totals, key=lambda t: (-t["retained_bytes"], t["key"])):
        if len(sites) >= limit:
            break
        key = total["key"]
        if not wanted(key):
            continue
        entry = _site_entry(frames, key, total["bytes"], total["count"])
        entry["retained_bytes"] = total["retained_bytes"]
        entry["retained_count"] = total["retained_count"]
        entry["largest"] = total["largest"]
        top = sorted(held_by[key], key=lambda tb: (-tb[1], tb[0]))[:HOLDERS_PER_SITE]
        entry["held_by"] = [
            {"root": c.regions[t].name if t >= 0 else "several roots", "bytes": b} for t, b in top
        ]
        sites.append(entry)
    return sites


def _site_entry(
    frames: dict[int, list[Frame]], key: int, nbytes: int, count: int
) -> dict[str, Any]:
    """A site: its backtrace, or for blocks without one (key <= 0) their size."""
    entry: dict[str, Any] = {"bytes": nbytes, "count": count}
    if key > 0:
        entry["backtrace"] = [frame_to_dict(f) for f in frames.get(key, [])]
    else:
        entry["backtrace"] = []
        entry["size"] = -1 - key
    return entry


def _region_dict(region: RootRegion) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": region.kind, "name": region.name}
    if region.thread:
        out["thread"] = region.thread
    if region.object:
        out["object"] = region.object
    if region.symbol:
        out["symbol"] = region.symbol
    return out


def format_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def _frame_name(f: dict[str, Any]) -> str:
    return f"{f['function']}+{f['offset']}" if f["function"] else f"{f['map']}+{f['rel_pc']:#x}"


def _site_line(entry: dict[str, Any]) -> str:
    """The site in one line: its first two frames (the first is often an
    allocation wrapper), the first one's source line."""
    frames = entry["backtrace"]
    if not frames:
        return f"{entry['size']}-byte blocks (no backtrace)"
    line = " < ".join(_frame_name(f) for f in frames[:2])
    return line + (f" {frames[0]['file']}:{frames[0]['line']}" if frames[0]["file"] else "")


def _amount(nbytes: int, count: int) -> str:
    return f"{nbytes:>10} bytes in {count} block{'' if count == 1 else 's'}"


def format_text(data: dict[str, Any]) -> str:
    lines = [
        f"process {data['pid']} ({data['command']}): {data['reachable_bytes']} bytes in "
        f"{data['reachable_count']} reachable allocations, of {data['allocation_bytes']} bytes "
        f"in {data['allocation_count']}",
        f"{data['shared_bytes']} bytes in {data['shared_count']} blocks are held by several "
        "roots and retained by none alone",
    ]
    if data["site_filter"]:
        lines.append(f"only allocation sites matching {data['site_filter']!r}")
    lines += ["", "Retained by root:"]
    for r in data["roots"]:
        amount = _amount(r["retained_bytes"], r["retained_count"])
        if "site_bytes" in r:
            amount = f"{_amount(r['site_bytes'], r['site_count'])} (of {r['retained_bytes']})"
        lines.append(f"{amount}  {r['kind']}: {r['name']}")
        for s in r["sites"]:
            lines.append(f"      {_amount(s['bytes'], s['count'])} from {_site_line(s)}")
    lines += ["", "Retained by allocation site:"]
    for s in data["sites"]:
        lines.append(
            f"{_amount(s['retained_bytes'], s['retained_count'])}  "
            f"(its own: {s['bytes']} bytes in {s['count']}) from {_site_line(s)}"
        )
        lines += [format_frame(i, Frame(**f)) for i, f in enumerate(s["backtrace"][:TEXT_FRAMES])]
        holders = ", ".join(f"{h['root']} ({h['bytes']} bytes)" for h in s["held_by"])
        lines.append(
            f"          held by {holders}; its largest: `why {data['pid']} {s['largest']:#x}`"
        )
    return "\n".join(lines) + "\n"
