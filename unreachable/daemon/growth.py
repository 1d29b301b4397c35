"""Leak growth: a call site whose unreachable bytes keep rising from scan to scan.

Judged per process over its last N successful scans (growth_scans): a site
grows when its bytes never fell within those scans, are higher at the last
than at the first, are still there at the last, and rose faster than the
threshold (bytes per hour, measured between the first and last scan of the
window). A site absent from a scan counts 0 bytes in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from unreachable.daemon.history import Sample


@dataclass(frozen=True, slots=True)
class Growth:
    site: str
    bytes: int  # at the last scan
    count: int
    first_bytes: int  # at the first scan of the window
    scans: int
    seconds: float
    bytes_per_hour: float


def detect_growth(
    series: dict[str, list[Sample]], *, scans: int, bytes_per_hour: float
) -> list[Growth]:
    """The growing sites, fastest first."""
    found = []
    for site, samples in series.items():
        if len(samples) < scans:
            continue
        window = samples[-scans:]
        first, last = window[0], window[-1]
        if last.bytes == 0 or last.bytes <= first.bytes:
            continue
        if any(b.bytes < a.bytes for a, b in pairwise(window)):
            continue
        seconds = last.time - first.time
        if seconds <= 0:
            continue
        rate = (last.bytes - first.bytes) * 3600.0 / seconds
        if rate <= bytes_per_hour:
            continue
        found.append(Growth(site, last.bytes, last.count, first.bytes, scans, seconds, rate))
    found.sort(key=lambda g: (-g.bytes_per_hour, g.site))
    return found
