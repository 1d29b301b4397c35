"""Scheduled scans: every shimmed process, every `scan_interval` seconds, to Watch."""

from __future__ import annotations

import asyncio
import logging

from unreachable.daemon.producer import ReportProducer
from unreachable.daemon.targets import list_targets
from unreachable.v1 import unreachable_pb2 as pb

log = logging.getLogger("unreachabled.schedule")


async def run_schedule(interval: float, producer: ReportProducer) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        targets = await loop.run_in_executor(None, list_targets)
        started = sum(producer.request(t.pid, pb.TRIGGER_SCHEDULED) for t in targets if t.enabled)
        log.debug("scheduled scans: %d of %d targets", started, len(targets))
