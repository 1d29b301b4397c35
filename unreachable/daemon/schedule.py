"""Scheduled scans: the targets the configuration selects, each every `scan_interval` seconds.

Every tick (scan_interval, at most DISCOVERY_PERIOD) lists the processes:
those selected by a [[targets]] entry (every shimmed process when there is
none) that appeared are picked up and scanned at once, those that exited are
dropped. A selected process that cannot be scanned at all (it does not run
under the shim, or its shim is inert) is reported once and left alone. A
scan that fails is reported once, then retried after a back-off that doubles
from retry_backoff (default: scan_interval) up to retry_backoff_max; later
failures of the same process are logged at DEBUG only, and a success after
failures is logged again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from unreachable.daemon.config import Config, TargetSpec
from unreachable.daemon.journal import fields
from unreachable.daemon.matching import (
    ProcessInfo,
    ProcessKey,
    list_processes,
    matching,
    still_running,
)
from unreachable.daemon.monitor import Monitor
from unreachable.daemon.producer import ReportProducer
from unreachable.daemon.scans import WORKER_MODULE
from unreachable.daemon.targets import _maps_mention_shim, inert_reason, target_info
from unreachable.v1 import unreachable_pb2 as pb

log = logging.getLogger("unreachabled.schedule")
DISCOVERY_PERIOD = 30.0


@dataclass(slots=True)
class TargetState:
    info: ProcessInfo
    spec: TargetSpec | None
    next_due: float = 0.0
    failures: int = 0
    unscannable: str = ""  # why it can never be scanned (reported once)
    requested_at: float = 0.0
    in_flight: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    info: ProcessInfo
    spec: TargetSpec | None
    unscannable: str  # "" when it can be scanned


def classify(info: ProcessInfo) -> str | None:
    """ "" scannable; a reason when it never will be; None to skip silently for now."""
    target = target_info(info.pid)
    if target is None:
        shimmed = _maps_mention_shim(info.pid)
        if shimmed is None:
            return None  # it exited meanwhile (a scan's snapshot copy, often)
        if shimmed:
            return None  # a scan's snapshot copy
        return "it does not run under the shim (LD_PRELOAD)"
    if not target.enabled:
        return f"its shim is inert: {inert_reason(info.pid) or 'its options were rejected'}"
    return ""


def discover(specs: list[TargetSpec], me: int) -> list[Candidate]:
    found = []
    for info in list_processes(exclude=(me,)):
        if info.ppid == me and WORKER_MODULE in info.command:
            continue  # our own scan subprocesses
        spec = matching(specs, info) if specs else None
        if specs and spec is None:
            continue
        if not specs and not _maps_mention_shim(info.pid):
            continue
        why = classify(info)
        if why is None or (why and not specs):
            continue
        found.append(Candidate(info, spec, why))
    return found


class Scheduler:
    def __init__(
        self,
        config: Config,
        producer: ReportProducer,
        monitor: Monitor,
        *,
        clock: Callable[[], float] = time.monotonic,
        discover_fn: Callable[[list[TargetSpec], int], list[Candidate]] = discover,
    ) -> None:
        self.config = config
        self.producer = producer
        self.monitor = monitor
        self.clock = clock
        self.discover_fn = discover_fn
        self.targets: dict[ProcessKey, TargetState] = {}

    @property
    def period(self) -> float:
        return min(self.config.scan_interval, DISCOVERY_PERIOD)

    def backoff(self, failures: int) -> float:
        base = self.config.retry_backoff or self.config.scan_interval
        return min(base * (1 << max(failures - 1, 0)), self.config.retry_backoff_max)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # noqa: BLE001 - the schedule must go on
                log.exception("scheduled scans: tick failed")
            await asyncio.sleep(self.period)

    async def tick(self) -> int:
        """Discover, then request the due scans; returns how many were requested."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, self.discover_fn, self.config.targets, os.getpid())
        self._update(found)
        self.monitor.prune()
        now = self.clock()
        started = 0
        for key, st in self.targets.items():
            if st.unscannable or st.in_flight or st.next_due > now:
                continue
            if self.producer.pending(st.info.pid):
                continue  # a signal-triggered scan of it runs now
            st.in_flight = True
            st.requested_at = now
            self.producer.request(
                st.info.pid,
                pb.TRIGGER_SCHEDULED,
                st.info,
                partial(self._done, key),
            )
            started += 1
        scannable = sum(1 for st in self.targets.values() if not st.unscannable)
        self.monitor.status.update(targets=scannable)
        if self.monitor.metrics is not None:
            self.monitor.metrics.targets.set(scannable)
        return started

    def _update(self, found: list[Candidate]) -> None:
        seen = {c.info.key: c for c in found}
        for key in [k for k in self.targets if k not in seen]:
            st = self.targets.pop(key)
            log.info(
                "%s exited: no longer watched",
                st.info.label(),
                extra=fields(TARGET_PID=st.info.pid, TARGET_UNIT=st.info.unit or None),
            )
            self.monitor.forget(key)
        now = self.clock()
        for key, c in seen.items():
            if key in self.targets:
                continue
            self.targets[key] = TargetState(c.info, c.spec, next_due=now, unscannable=c.unscannable)
            how = f"matched by {c.spec.describe()}" if c.spec else "it runs under the shim"
            extra = fields(TARGET_PID=c.info.pid, TARGET_UNIT=c.info.unit or None)
            if c.unscannable:
                log.warning(
                    "%s (%s) cannot be scanned: %s; it will not be tried again",
                    c.info.label(),
                    how,
                    c.unscannable,
                    extra=extra,
                )
            else:
                log.info("watching %s (%s)", c.info.label(), how, extra=extra)

    def _done(self, key: ProcessKey, ok: bool, why: str) -> None:
        st = self.targets.get(key)
        if st is None:
            return
        st.in_flight = False
        if ok:
            if st.failures:
                log.info("%s scanned again after %d failed scan(s)", st.info.label(), st.failures)
            st.failures = 0
            st.next_due = st.requested_at + self.config.scan_interval
            return
        st.failures += 1
        wait = self.backoff(st.failures)
        st.next_due = self.clock() + wait
        if not still_running(key):
            log.debug("scan of %s failed as it exited: %s", st.info.label(), why)
        elif st.failures == 1:
            log.warning(
                "cannot scan %s: %s; retrying in %.0f s, then less and less often "
                "(further failures are logged at debug level)",
                st.info.label(),
                why,
                wait,
                extra=fields(TARGET_PID=st.info.pid, TARGET_UNIT=st.info.unit or None),
            )
        else:
            log.debug(
                "scan of %s failed again (%d): %s; next try in %.0f s",
                st.info.label(),
                st.failures,
                why,
                wait,
            )
