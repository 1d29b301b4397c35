"""Scans that nobody waits on: asked for through the notify socket or scheduled.

Each is logged with libmemunreachable's summary line and published to the
Watch hub. One pending request per pid: asking again while one is queued or
running is answered BUSY.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from unreachable.daemon.scans import ScanFailed, ScanRunner
from unreachable.daemon.watch import WatchHub
from unreachable.report.text import format_summary
from unreachable.rpc.convert import report_from_dict, report_to_model
from unreachable.v1 import unreachable_pb2 as pb

log = logging.getLogger("unreachabled.reports")
TRIGGER_NAMES = {pb.TRIGGER_SIGNAL: "signal", pb.TRIGGER_SCHEDULED: "scheduled"}


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace").strip("\0\n")
    except OSError:
        return ""


class ReportProducer:
    def __init__(self, runner: ScanRunner, hub: WatchHub, *, contents: bool) -> None:
        self._runner = runner
        self._hub = hub
        self._contents = contents
        self._pending: dict[int, asyncio.Task[None]] = {}

    def request(self, pid: int, trigger: int) -> bool:
        if pid in self._pending:
            return False
        task = asyncio.create_task(self._scan(pid, trigger))
        self._pending[pid] = task
        task.add_done_callback(lambda _t: self._pending.pop(pid, None))
        return True

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)

    async def _scan(self, pid: int, trigger: int) -> None:
        how = TRIGGER_NAMES.get(trigger, "?")
        name = _read(f"/proc/{pid}/comm")
        argv0 = _read(f"/proc/{pid}/cmdline").split("\0", 1)[0]
        try:
            report = await self._runner.scan(pid, contents=self._contents)
        except ScanFailed as e:
            log.warning("%s scan of pid %d failed: %s", how, pid, e.message)
            return
        except Exception:  # noqa: BLE001 - a background task must not die silently
            log.exception("%s scan of pid %d failed", how, pid)
            return
        proto = report_from_dict(report)
        summary = format_summary(report_to_model(proto))
        log.info("%s scan: %s", how, summary)
        event = pb.WatchEvent(trigger=trigger, name=name, summary=summary, report=proto)
        event.time.FromNanoseconds(time.time_ns())
        self._hub.publish(event, os.path.basename(argv0))
