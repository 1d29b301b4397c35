"""Scans that nobody waits on: asked for through the notify socket or scheduled.

Each result goes to the Monitor (history, growth, log with journal fields,
metrics, Watch). One pending request per pid: asking again while one is
queued or running is answered BUSY.

With the `baseline` setting (or a [[targets]] entry's own), these scans
report only allocation sites that are new or grew (scan --baseline): against
a saved scan, or ("first") against each process's first background scan,
which is published whole and kept, with every entry, in a private directory
until the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from unreachable.daemon.config import BASELINE_FIRST
from unreachable.daemon.matching import (
    ProcessInfo,
    ProcessKey,
    matching,
    read_process,
    still_running,
)
from unreachable.daemon.monitor import TRIGGER_NAMES, Monitor
from unreachable.daemon.scans import ScanFailed, ScanRunner
from unreachable.v1 import unreachable_pb2 as pb

log = logging.getLogger("unreachabled.reports")
DEFAULT_LIMIT = 100  # entries a background scan lists
EVERY_ENTRY = 0xFFFF_FFFF
# Called when a requested scan ends: (True, "") or (False, the reason).
Done = Callable[[bool, str], None]


class ReportProducer:
    def __init__(self, runner: ScanRunner, monitor: Monitor, *, contents: bool) -> None:
        self._runner = runner
        self._monitor = monitor
        self._contents = contents
        self._pending: dict[int, asyncio.Task[None]] = {}
        self._baselines: dict[ProcessKey, str] = {}  # baseline = "first": each process's file
        self._baseline_dir = ""

    def request(
        self,
        pid: int,
        trigger: pb.Trigger,
        info: ProcessInfo | None = None,
        done: Done | None = None,
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
        if self._baseline_dir:
            shutil.rmtree(self._baseline_dir, ignore_errors=True)

    def baseline_setting(self, info: ProcessInfo) -> str:
        """The process's baseline setting: its [[targets]] entry's when that
        names one, else the daemon's ("first", a file, "" none)."""
        config = self._monitor.config
        spec = matching(config.targets, info)
        if spec is not None and spec.baseline is not None:
            return spec.baseline
        return config.baseline

    def baseline_for(self, info: ProcessInfo) -> str:
        """The baseline file this process's scan compares with ("" for none)."""
        setting = self.baseline_setting(info)
        if setting != BASELINE_FIRST:
            return setting
        for key in [k for k in self._baselines if not still_running(k)]:
            with contextlib.suppress(OSError):
                os.unlink(self._baselines.pop(key))
        return self._baselines.get(info.key, "")

    def _keep_baseline(self, info: ProcessInfo, report: dict[str, Any]) -> None:
        if not self._baseline_dir:
            self._baseline_dir = tempfile.mkdtemp(prefix="unreachabled-baselines-")
        path = os.path.join(self._baseline_dir, f"{info.key[0]}-{info.key[1]}.json")
        with open(path, "w") as f:
            json.dump(report, f)
        self._baselines[info.key] = path

    async def _scan(
        self,
        pid: int,
        trigger: pb.Trigger,
        info: ProcessInfo | None,
        done: Done | None,
    ) -> None:
        how = TRIGGER_NAMES.get(trigger, "?")
        if info is None:
            info = read_process(pid)
        ok, message = False, ""
        try:
            if info is None:
                message = f"pid {pid} is gone"
                return
            if not still_running(info.key):
                # The process asked for is gone, and its pid may name another
                # one by now: that one did not ask.
                message = f"pid {pid} is gone"
                return
            baseline = self.baseline_for(info)
            # The first scan becomes the baseline: every entry, or leaks past
            # the list would look new at every later scan.
            first = self.baseline_setting(info) == BASELINE_FIRST and not baseline
            try:
                report = await self._runner.scan(
                    pid,
                    contents=self._contents,
                    baseline=baseline,
                    limit=EVERY_ENTRY if first else DEFAULT_LIMIT,
                )
            except ScanFailed as e:
                message = e.message
                if done is None:  # the scheduler logs its own failures, once
                    log.warning("%s scan of pid %d failed: %s", how, pid, e.message)
                self._monitor.failed(info, trigger, message)
                return
            ok = True
            if first:
                self._keep_baseline(info, report)
                report = dict(report, leaks=report["leaks"][:DEFAULT_LIMIT])
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
