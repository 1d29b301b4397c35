"""Scans that nobody waits on: asked for through the notify socket or scheduled.

Each result goes to the Monitor (history, growth, log with journal fields,
metrics, Watch). One pending request per pid: asking again while one is
queued or running is answered BUSY.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from unreachable.daemon.matching import ProcessInfo, read_process
from unreachable.daemon.monitor import TRIGGER_NAMES, Monitor
from unreachable.daemon.scans import ScanFailed, ScanRunner

log = logging.getLogger("unreachabled.reports")
# Called when a requested scan ends: (True, "") or (False, the reason).
Done = Callable[[bool, str], None]


class ReportProducer:
    def __init__(self, runner: ScanRunner, monitor: Monitor, *, contents: bool) -> None:
        self._runner = runner
        self._monitor = monitor
        self._contents = contents
        self._pending: dict[int, asyncio.Task[None]] = {}

    def request(
        self, pid: int, trigger: int, info: ProcessInfo | None = None, done: Done | None = None
    ) -> bool:
        if pid in self._pending:
            return False
        task = asyncio.create_task(self._scan(pid, trigger, info, done))
        self._pending[pid] = task
        task.add_done_callback(lambda _t: self._pending.pop(pid, None))
        return True

    def pending(self, pid: int) -> bool:
        return pid in self._pending

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)

    async def _scan(
        self, pid: int, trigger: int, info: ProcessInfo | None, done: Done | None
    ) -> None:
        how = TRIGGER_NAMES.get(trigger, "?")
        if info is None:
            info = read_process(pid)
        ok, message = False, ""
        try:
            if info is None:
                message = f"pid {pid} is gone"
                return
            try:
                report = await self._runner.scan(pid, contents=self._contents)
            except ScanFailed as e:
                message = e.message
                if done is None:  # the scheduler logs its own failures, once
                    log.warning("%s scan of pid %d failed: %s", how, pid, e.message)
                self._monitor.failed(info, trigger, message)
                return
            ok = True
            self._monitor.scanned(info, trigger, report)
        except asyncio.CancelledError:
            message = "cancelled"
            raise
        except Exception as e:  # noqa: BLE001 - a background task must not die silently
            ok, message = False, f"{type(e).__name__}: {e}"
            log.exception("%s scan of pid %d failed", how, pid)
        finally:
            if done is not None:
                done(ok, message)
