"""Prometheus metrics, served over HTTP on a loopback address (prometheus_client).

    unreachable_leak_bytes{unit,command}          unreachable bytes at the last scan
    unreachable_leak_allocations{unit,command}    unreachable allocations at the last scan
    unreachable_leak_growth_bytes_per_hour{unit,command}  sum over growing call sites
    unreachable_targets                            processes the schedule watches
    unreachable_scans_total{result}                result: leaks | clean | error
    unreachable_scan_pause_seconds                 how long targets stayed stopped
    unreachable_scan_duration_seconds              scans, as each measured itself (scan_ms)

The gauges add up the live processes with the same unit and command (comm);
a process that exits leaves them. No pid label: pids would make the number of
series unbounded.

A scan's duration is the one its report gives (scan_ms: from opening the
target to the symbolized report), not the daemon's wall clock around the
scan subprocess, whose interpreter start-up would otherwise dominate.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from unreachable.daemon.config import split_host_port
from unreachable.daemon.matching import ProcessKey

log = logging.getLogger("unreachabled.metrics")
RESULTS = ("leaks", "clean", "error")
PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(slots=True)
class _Last:
    labels: tuple[str, str]
    bytes: int
    count: int
    growth: float


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        labels = ("unit", "command")
        self.leak_bytes = Gauge(
            "unreachable_leak_bytes", "Unreachable bytes at the last scan", labels, registry=r
        )
        self.leak_allocations = Gauge(
            "unreachable_leak_allocations",
            "Unreachable allocations at the last scan",
            labels,
            registry=r,
        )
        self.growth = Gauge(
            "unreachable_leak_growth_bytes_per_hour",
            "Growth of the call sites whose leaks grow, summed",
            labels,
            registry=r,
        )
        self.targets = Gauge(
            "unreachable_targets", "Processes the scheduled scans watch", registry=r
        )
        self.scans = Counter("unreachable_scans", "Scans done, by result", ("result",), registry=r)
        for result in RESULTS:
            self.scans.labels(result)
        self.pause = Histogram(
            "unreachable_scan_pause_seconds",
            "How long a scan kept the target's threads stopped",
            buckets=PAUSE_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "unreachable_scan_duration_seconds",
            "How long a scan took from opening the target to its report (its scan_ms)",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._last: dict[ProcessKey, _Last] = {}
        self._lock = threading.Lock()
        self._server: object | None = None

    def scanned(
        self,
        key: ProcessKey,
        *,
        unit: str,
        command: str,
        leak_bytes: int,
        leak_count: int,
        growth: float,
        pause_ms: float,
        scan_ms: float,
    ) -> None:
        self.scans.labels("leaks" if leak_count else "clean").inc()
        self.pause.observe(pause_ms / 1000.0)
        self.duration.observe(scan_ms / 1000.0)
        with self._lock:
            old = self._last.get(key)
            self._last[key] = _Last((unit, command), leak_bytes, leak_count, growth)
            self._refresh({(unit, command)} | ({old.labels} if old else set()))

    def failed(self) -> None:
        self.scans.labels("error").inc()

    def forget(self, key: ProcessKey) -> None:
        with self._lock:
            old = self._last.pop(key, None)
            if old is not None:
                self._refresh({old.labels})

    def known(self) -> list[ProcessKey]:
        with self._lock:
            return list(self._last)

    def _refresh(self, label_sets: set[tuple[str, str]]) -> None:
        for labels in label_sets:
            members = [v for v in self._last.values() if v.labels == labels]
            if not members:
                for gauge in (self.leak_bytes, self.leak_allocations, self.growth):
                    try:
                        gauge.remove(*labels)
                    except KeyError:
                        pass
                continue
            self.leak_bytes.labels(*labels).set(sum(m.bytes for m in members))
            self.leak_allocations.labels(*labels).set(sum(m.count for m in members))
            self.growth.labels(*labels).set(sum(m.growth for m in members))

    def serve(self, address: str) -> tuple[str, int]:
        """Start the HTTP endpoint (a daemon thread); returns the bound (host, port)."""
        host, port = split_host_port(address)
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        bound = server.server_address
        return host, int(bound[1])

    def close(self) -> None:
        server = self._server
        self._server = None
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
