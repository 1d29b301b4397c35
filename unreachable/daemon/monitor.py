"""What happens with the result of a background scan (scheduled or signal-triggered).

In order: the history gets the scan and its call sites; growth is judged on
the process's last scans; the summary is logged with journal fields
(WARNING over the leak threshold), each growing site as a WARNING; the
Prometheus gauges change; the report goes to Watch with its growth; and
systemd's STATUS line names the scan. Without a history file the history
is kept in memory (growth still works, nothing survives a restart).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from unreachable.daemon.config import Config
from unreachable.daemon.growth import Growth, detect_growth
from unreachable.daemon.history import History
from unreachable.daemon.journal import fields
from unreachable.daemon.matching import ProcessInfo, ProcessKey, still_running
from unreachable.daemon.metrics import Metrics
from unreachable.daemon.sdnotify import Status
from unreachable.daemon.watch import WatchHub
from unreachable.report.text import format_summary
from unreachable.rpc.convert import report_from_dict, report_to_model
from unreachable.v1 import unreachable_pb2 as pb

log = logging.getLogger("unreachabled.reports")
TRIGGER_NAMES = {pb.TRIGGER_SIGNAL: "signal", pb.TRIGGER_SCHEDULED: "scheduled"}
EXPIRE_EVERY = 3600.0


def describe_frames(frames: list[dict[str, Any]], depth: int = 3) -> str:
    parts = []
    for f in frames[:depth]:
        where = os.path.basename(str(f.get("map") or "?"))
        if f.get("function"):
            parts.append(f"{f['function']}+{int(f.get('offset') or 0):#x} ({where})")
        else:
            parts.append(f"{where}+{int(f.get('rel_pc') or 0):#x}")
    return " < ".join(parts) if parts else "(no backtrace: start it with backtrace=N)"


class Monitor:
    def __init__(
        self,
        config: Config,
        hub: WatchHub,
        *,
        history: History,
        metrics: Metrics | None = None,
        status: Status | None = None,
    ) -> None:
        self.config = config
        self.hub = hub
        self.history = history
        self.metrics = metrics
        self.status = status or Status()
        self._expired_at = 0.0

    def scanned(
        self, info: ProcessInfo, trigger: pb.Trigger, report: dict[str, Any]
    ) -> list[Growth]:
        how = TRIGGER_NAMES.get(trigger, "?")
        self._expire()
        self.history.record_scan(info, trigger=how, report=report)
        _ids, series = self.history.site_series(info.pid, info.start_time, self.config.growth_scans)
        growth = detect_growth(
            series, scans=self.config.growth_scans, bytes_per_hour=self.config.growth_bytes_per_hour
        )
        proto = report_from_dict(report)
        summary = format_summary(report_to_model(proto))
        leak_bytes = int(report.get("leak_bytes", 0))
        leak_count = int(report.get("leak_count", 0))
        self._log_scan(info, how, summary, report, leak_bytes)
        events = [self._growing_site(info, report, g) for g in growth]
        if self.metrics is not None:
            self.metrics.scanned(
                info.key,
                unit=info.unit,
                command=info.name,
                leak_bytes=leak_bytes,
                leak_count=leak_count,
                growth=sum(g.bytes_per_hour for g in growth),
                pause_ms=float(report.get("pause_ms", 0.0)),
                scan_ms=float(report.get("scan_ms", 0.0)),
            )
        event = pb.WatchEvent(
            trigger=trigger, name=info.name, summary=summary, report=proto, unit=info.unit
        )
        event.growth.extend(events)
        event.time.FromNanoseconds(time.time_ns())
        self.hub.publish(event, info.argv0)
        self.status.update(
            last=f"{info.label()} at {time.strftime('%H:%M:%S')}: "
            f"{leak_bytes} bytes in {leak_count} leaks"
        )
        return growth

    def _log_scan(
        self, info: ProcessInfo, how: str, summary: str, report: dict[str, Any], leak_bytes: int
    ) -> None:
        over = 0 < self.config.leak_bytes_threshold < leak_bytes
        log.log(
            logging.WARNING if over else logging.INFO,
            "%s scan: %s%s",
            how,
            summary,
            f" [{info.label()}: over the threshold of {self.config.leak_bytes_threshold} bytes]"
            if over
            else "",
            extra=self._fields(info, report),
        )

    def _growing_site(self, info: ProcessInfo, report: dict[str, Any], g: Growth) -> pb.LeakGrowth:
        """Logs a call site whose leaks grow and returns it as a Watch event's entry."""
        frames = self.history.frames(g.site)
        log.warning(
            "leak growing in %s: call site %s at %s: %d -> %d bytes over %d scans "
            "(%.0f s), %.0f bytes/hour",
            info.label(),
            g.site,
            describe_frames(frames),
            g.first_bytes,
            g.bytes,
            g.scans,
            g.seconds,
            g.bytes_per_hour,
            extra=self._fields(
                info,
                report,
                LEAK_SITE=g.site,
                LEAK_SITE_BYTES=g.bytes,
                LEAK_SITE_COUNT=g.count,
                LEAK_GROWTH_BYTES_PER_HOUR=round(g.bytes_per_hour, 1),
            ),
        )
        return pb.LeakGrowth(
            site=g.site,
            bytes=g.bytes,
            count=g.count,
            first_bytes=g.first_bytes,
            scans=g.scans,
            seconds=g.seconds,
            bytes_per_hour=g.bytes_per_hour,
            backtrace=[pb.Frame(**{k: v for k, v in f.items() if v is not None}) for f in frames],
        )

    def failed(self, info: ProcessInfo, trigger: pb.Trigger, message: str) -> None:
        self.history.record_failure(info, trigger=TRIGGER_NAMES.get(trigger, "?"), error=message)
        if self.metrics is not None:
            self.metrics.failed()

    def forget(self, key: ProcessKey) -> None:
        if self.metrics is not None:
            self.metrics.forget(key)

    def prune(self) -> None:
        """Drop the gauges of processes that exited (signal-scanned ones included)."""
        if self.metrics is None:
            return
        for key in self.metrics.known():
            if not still_running(key):
                self.metrics.forget(key)

    def _fields(self, info: ProcessInfo, report: dict[str, Any], **more: Any) -> dict[str, Any]:
        return fields(
            TARGET_PID=info.pid,
            TARGET_UNIT=info.unit or None,
            TARGET_COMMAND=info.name,
            TARGET_CGROUP=info.cgroup or None,
            LEAK_BYTES=int(report.get("leak_bytes", 0)),
            LEAK_COUNT=int(report.get("leak_count", 0)),
            PAUSE_MS=float(report.get("pause_ms", 0.0)),
            SCAN_MS=float(report.get("scan_ms", 0.0)),
            **more,
        )

    def _expire(self) -> None:
        now = time.monotonic()
        if now - self._expired_at >= EXPIRE_EVERY or not self._expired_at:
            self._expired_at = now
            self.history.expire(self.config.history_days)
