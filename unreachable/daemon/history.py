"""History of scans in SQLite: one row per scan, one per leak call site and scan.

A call site is the allocation backtrace of a leak, named by its signature: a
hash of the frames' (map, rel_pc), stable across runs of the same binaries
and independent of symbolization. The daemon writes; `unreachable-cli
history` reads (read-only, so the file may be shared with a group: the
daemon creates it mode 0640). The rollback journal (not WAL) lets readers
without write access open it.

Schema (version 1):
    scans(id, time, pid, start_time, unit, name, command, trigger, result,
          error, leak_count, leak_bytes, allocation_count, allocation_bytes,
          pause_ms, scan_ms)                result: leaks | clean | error
    site_samples(scan_id, site, bytes, count)
    sites(site, frames)                    frames: JSON list as in the report
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from unreachable.daemon.matching import ProcessInfo

SCHEMA_VERSION = 1
MEMORY = ":memory:"  # a history that lives as long as the daemon (no file configured)
FILE_MODE = 0o640
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS scans (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    pid INTEGER NOT NULL,
    start_time INTEGER NOT NULL,
    unit TEXT NOT NULL,
    name TEXT NOT NULL,
    command TEXT NOT NULL,
    trigger TEXT NOT NULL,
    result TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    leak_count INTEGER NOT NULL DEFAULT 0,
    leak_bytes INTEGER NOT NULL DEFAULT 0,
    allocation_count INTEGER NOT NULL DEFAULT 0,
    allocation_bytes INTEGER NOT NULL DEFAULT 0,
    pause_ms REAL NOT NULL DEFAULT 0,
    scan_ms REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS scans_target ON scans (pid, start_time, time);
CREATE INDEX IF NOT EXISTS scans_unit ON scans (unit, time);
CREATE INDEX IF NOT EXISTS scans_time ON scans (time);
CREATE TABLE IF NOT EXISTS site_samples (
    scan_id INTEGER NOT NULL REFERENCES scans (id) ON DELETE CASCADE,
    site TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (scan_id, site)
);
CREATE TABLE IF NOT EXISTS sites (site TEXT PRIMARY KEY, frames TEXT NOT NULL);
"""
# The leaks no reported backtrace accounts for (no backtrace=N, or past --limit).
UNATTRIBUTED = "unattributed"
FRAME_KEYS = ("map", "rel_pc", "function", "offset", "file", "line")


def site_signature(backtrace: Iterable[dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for frame in backtrace:
        h.update(f"{frame.get('map', '')}\0{int(frame.get('rel_pc', 0)):x}\n".encode())
    return h.hexdigest()[:16]


def _create(path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o750, exist_ok=True)
    if not os.path.exists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))
        os.chmod(path, FILE_MODE)  # whatever the umask


@dataclass(slots=True)
class SiteTotal:
    site: str
    bytes: int = 0
    count: int = 0
    frames: list[dict[str, Any]] = field(default_factory=list)


def sites_of_report(report: dict[str, Any]) -> dict[str, SiteTotal]:
    """Unreachable bytes and allocations per call site.

    Entries with a backtrace give their sites. What the entries do not
    account for (leaks without a backtrace, and entries beyond the report's
    limit) goes to the site UNATTRIBUTED, from the report's totals.
    """
    sites: dict[str, SiteTotal] = {}
    for leak in report.get("leaks", []):
        frames = leak.get("backtrace", [])
        if not frames:
            continue
        sig = site_signature(frames)
        total = sites.get(sig)
        if total is None:
            total = sites[sig] = SiteTotal(
                sig, frames=[{k: f.get(k) for k in FRAME_KEYS} for f in frames]
            )
        total.bytes += int(leak.get("total_size", leak.get("size", 0)))
        total.count += 1 + sum(
            int(leak.get(k, 0))
            for k in ("referenced_count", "similar_count", "similar_referenced_count")
        )
    rest_bytes = int(report.get("leak_bytes", 0)) - sum(t.bytes for t in sites.values())
    rest_count = int(report.get("leak_count", 0)) - sum(t.count for t in sites.values())
    if rest_bytes > 0 and rest_count > 0:
        sites[UNATTRIBUTED] = SiteTotal(UNATTRIBUTED, rest_bytes, rest_count)
    return sites


@dataclass(frozen=True, slots=True)
class Sample:
    """One scan's numbers for one call site (0 when the site had no leak then)."""

    scan_id: int
    time: float
    bytes: int
    count: int


class History:
    def __init__(self, path: str, *, readonly: bool = False) -> None:
        self.path = path
        if readonly:
            uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
            self.db = sqlite3.connect(uri, uri=True, timeout=10.0)
        else:
            if path != MEMORY:
                _create(path)
            self.db = sqlite3.connect(path, timeout=10.0)
            self.db.execute("PRAGMA foreign_keys = ON")
            with self.db:
                self.db.executescript(_SCHEMA)
                self.db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    # -- writing (the daemon) --

    def record_scan(
        self,
        target: ProcessInfo,
        *,
        trigger: str,
        report: dict[str, Any],
        when: float | None = None,
    ) -> int:
        sites = sites_of_report(report)
        with self.db:
            scan_id = self._insert_scan(
                when,
                target,
                trigger=trigger,
                result="leaks" if report.get("leak_count") else "clean",
                leak_count=int(report.get("leak_count", 0)),
                leak_bytes=int(report.get("leak_bytes", 0)),
                allocation_count=int(report.get("allocation_count", 0)),
                allocation_bytes=int(report.get("allocation_bytes", 0)),
                pause_ms=float(report.get("pause_ms", 0.0)),
                scan_ms=float(report.get("scan_ms", 0.0)),
            )
            self.db.executemany(
                "INSERT INTO site_samples VALUES (?, ?, ?, ?)",
                [(scan_id, s.site, s.bytes, s.count) for s in sites.values()],
            )
            self.db.executemany(
                "INSERT OR IGNORE INTO sites VALUES (?, ?)",
                [(s.site, json.dumps(s.frames)) for s in sites.values()],
            )
        return scan_id

    def record_failure(
        self, target: ProcessInfo, *, trigger: str, error: str, when: float | None = None
    ) -> int:
        with self.db:
            return self._insert_scan(when, target, trigger=trigger, result="error", error=error)

    def _insert_scan(self, when: float | None, target: ProcessInfo, **columns: Any) -> int:
        """One row of `scans` (column names come from this file, never from input)."""
        row = {
            "time": time.time() if when is None else when,
            "pid": target.pid,
            "start_time": target.start_time,
            "unit": target.unit,
            "name": target.name,
            "command": target.command,
            **columns,
        }
        cur = self.db.execute(
            f"INSERT INTO scans ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
        return int(cur.lastrowid or 0)

    def expire(self, days: float, now: float | None = None) -> int:
        cutoff = (time.time() if now is None else now) - days * 86400.0
        with self.db:
            cur = self.db.execute("DELETE FROM scans WHERE time < ?", (cutoff,))
            self.db.execute(
                "DELETE FROM sites WHERE site NOT IN (SELECT DISTINCT site FROM site_samples)"
            )
        return cur.rowcount

    # -- reading (growth, the CLI) --

    def site_series(
        self, pid: int, start_time: int, scans: int
    ) -> tuple[list[int], dict[str, list[Sample]]]:
        """The process's last `scans` successful scans (oldest first) and, per site seen in
        them, one sample per scan (0 bytes where the site had no leak)."""
        rows = self.db.execute(
            "SELECT id, time FROM scans WHERE pid = ? AND start_time = ? AND result != 'error'"
            " ORDER BY time DESC, id DESC LIMIT ?",
            (pid, start_time, scans),
        ).fetchall()
        rows.reverse()
        ids = [int(r["id"]) for r in rows]
        times = {int(r["id"]): float(r["time"]) for r in rows}
        if not ids:
            return [], {}
        marks = ",".join("?" * len(ids))
        found: dict[str, dict[int, tuple[int, int]]] = {}
        for r in self.db.execute(
            f"SELECT scan_id, site, bytes, count FROM site_samples WHERE scan_id IN ({marks})",
            ids,
        ):
            found.setdefault(r["site"], {})[int(r["scan_id"])] = (int(r["bytes"]), int(r["count"]))
        series = {
            site: [Sample(i, times[i], *per_scan.get(i, (0, 0))) for i in ids]
            for site, per_scan in found.items()
        }
        return ids, series

    def frames(self, site: str) -> list[dict[str, Any]]:
        row = self.db.execute("SELECT frames FROM sites WHERE site = ?", (site,)).fetchone()
        return json.loads(row["frames"]) if row else []

    def scans(
        self, *, unit: str = "", pid: int = 0, limit: int = 0, since: float = 0.0
    ) -> list[dict[str, Any]]:
        """Scan rows, oldest first (the newest `limit` when limit > 0)."""
        where = ["time >= ?"]
        args: list[str | int | float] = [since]
        if unit:
            where.append("unit = ?")
            args.append(unit)
        if pid:
            where.append("pid = ?")
            args.append(pid)
        sql = f"SELECT * FROM scans WHERE {' AND '.join(where)} ORDER BY time DESC, id DESC"
        if limit > 0:
            sql += f" LIMIT {int(limit)}"
        rows = [dict(r) for r in self.db.execute(sql, args)]
        rows.reverse()
        return rows

    def samples_of(self, scan_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {i: [] for i in scan_ids}
        for chunk in range(0, len(scan_ids), 500):
            ids = scan_ids[chunk : chunk + 500]
            marks = ",".join("?" * len(ids))
            for r in self.db.execute(
                f"SELECT scan_id, site, bytes, count FROM site_samples WHERE scan_id IN ({marks})"
                " ORDER BY bytes DESC",
                ids,
            ):
                out[int(r["scan_id"])].append(
                    {"site": r["site"], "bytes": int(r["bytes"]), "count": int(r["count"])}
                )
        return out
