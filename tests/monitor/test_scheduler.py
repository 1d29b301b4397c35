"""The scheduler, monitor and metrics in-process, scanning real shimmed targets.

Each test runs real scans (subprocesses, as in the daemon) of programs from
tests/scan/programs and programs/timer_leak.c; time for back-offs comes from
a clock the test moves. Metrics are read over HTTP from the real endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import urllib.request
from pathlib import Path

from tests.monitor.conftest import PROGRAMS, SCAN_PROGRAMS
from unreachable.daemon.config import Config, TargetSpec
from unreachable.daemon.history import History
from unreachable.daemon.metrics import Metrics
from unreachable.daemon.monitor import Monitor
from unreachable.daemon.producer import ReportProducer
from unreachable.daemon.scans import ScanRunner
from unreachable.daemon.schedule import Scheduler, discover
from unreachable.daemon.watch import WatchHub
from unreachable.v1 import unreachable_pb2 as pb

WAIT = 120.0
TIMER_LEAK = PROGRAMS / "timer_leak.c"


def own_processes(specs, me):
    """discover(), less the processes of other test runs on this machine."""
    return [c for c in discover(specs, me) if c.info.ppid == os.getpid()]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, config: Config, tmp_path: Path, *, metrics: bool = False) -> None:
        self.config = config
        self.clock = Clock()
        self.hub = WatchHub()
        self.history = History(str(tmp_path / "history.sqlite"))
        self.metrics = Metrics() if metrics else None
        self.port = self.metrics.serve("127.0.0.1:0")[1] if self.metrics else 0
        self.monitor = Monitor(config, self.hub, history=self.history, metrics=self.metrics)
        self.runner = ScanRunner(timeout=config.scan_timeout, max_concurrent=4)
        self.producer = ReportProducer(self.runner, self.monitor, contents=False)
        self.scheduler = Scheduler(
            config, self.producer, self.monitor, clock=self.clock, discover_fn=own_processes
        )

    async def settle(self) -> None:
        """Wait (bounded) until no requested scan is still running."""
        async with asyncio.timeout(WAIT):
            while any(st.in_flight for st in self.scheduler.targets.values()):
                await asyncio.sleep(0.02)

    async def tick(self) -> int:
        started = await self.scheduler.tick()
        await self.settle()
        return started

    async def close(self) -> None:
        self.runner.kill_all()
        await self.producer.close()
        if self.metrics is not None:
            self.metrics.close()
        self.history.close()


def run(coro):
    return asyncio.run(coro)


def test_new_targets_are_scanned_and_vanished_ones_dropped(targets, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    config = Config(
        scan_interval=60, targets=[TargetSpec(name="globals-*"), TargetSpec(name="timer_leak-*")]
    )

    async def go():
        rig = Rig(config, tmp_path, metrics=True)
        try:
            g = targets.start(SCAN_PROGRAMS / "globals.c")
            assert await rig.tick() == 1
            [scan] = rig.history.scans(pid=g.pid)
            assert (scan["result"], scan["leak_bytes"], scan["leak_count"]) == ("leaks", 300, 1)
            assert scan["trigger"] == "scheduled"
            # not due again before scan_interval
            rig.clock.now += 30
            t = targets.start(TIMER_LEAK, "100", "50")
            assert await rig.tick() == 1  # only the new one
            assert len(rig.history.scans(pid=t.pid)) == 1
            rig.clock.now += 60
            assert await rig.tick() == 2  # both due again
            g.stop()
            await rig.tick()
            assert [st.info.pid for st in rig.scheduler.targets.values()] == [t.pid]
            assert "globals-" in caplog.text and re.search(
                rf"\[{g.pid}\] exited: no longer watched", caplog.text
            )
            assert all(k[0] != g.pid for k in rig.metrics.known())
        finally:
            await rig.close()

    run(go())


def test_unscannable_target_is_reported_once_and_never_scanned(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    plain = subprocess.Popen(["sleep", "300"])
    config = Config(scan_interval=1, targets=[TargetSpec(name="sleep")])

    async def go():
        rig = Rig(config, tmp_path)
        try:
            for _ in range(3):
                assert await rig.tick() == 0
                rig.clock.now += 10
            assert rig.history.scans(pid=plain.pid) == []
        finally:
            await rig.close()

    try:
        run(go())
    finally:
        plain.kill()
        plain.wait()
    reports = [
        r
        for r in caplog.records
        if f"[{plain.pid}]" in r.getMessage() and "cannot be scanned" in r.getMessage()
    ]
    assert len(reports) == 1 and reports[0].levelno == logging.WARNING
    assert "does not run under the shim" in reports[0].getMessage()


def test_failing_scans_back_off_and_are_reported_once(targets, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    # A scan timeout no scan can meet: every scan fails with DEADLINE_EXCEEDED.
    config = Config(
        scan_interval=5,
        scan_timeout=0.001,
        retry_backoff=10,
        retry_backoff_max=25,
        targets=[TargetSpec(name="globals-*")],
    )

    async def go():
        rig = Rig(config, tmp_path, metrics=True)
        try:
            g = targets.start(SCAN_PROGRAMS / "globals.c")
            assert await rig.tick() == 1
            st = rig.scheduler.targets[next(iter(rig.scheduler.targets))]
            assert (st.failures, st.next_due) == (1, 1010.0)
            rig.clock.now = 1009.0
            assert await rig.tick() == 0  # backing off
            rig.clock.now = 1010.0
            assert await rig.tick() == 1
            assert (st.failures, st.next_due) == (2, 1030.0)  # doubled
            rig.clock.now = 1030.0
            assert await rig.tick() == 1
            assert (st.failures, st.next_due) == (3, 1055.0)  # capped at 25
            assert [s["result"] for s in rig.history.scans(pid=g.pid)] == ["error"] * 3
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{rig.port}/metrics", timeout=30)
                .read()
                .decode()
            )
            assert 'unreachable_scans_total{result="error"} 3.0' in text
            # it recovers: reported again once
            rig.config.scan_timeout = 300
            rig.runner._timeout = 300
            rig.clock.now = 1055.0
            assert await rig.tick() == 1
            assert st.failures == 0 and st.next_due == 1060.0
        finally:
            await rig.close()

    run(go())
    failures = [r for r in caplog.records if "cannot scan" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING
    assert "retrying in 10 s" in failures[0].getMessage()
    assert (
        sum("failed again" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
        == 2
    )
    assert any("scanned again after 3 failed scan(s)" in r.getMessage() for r in caplog.records)


def metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_growth_is_logged_published_and_exported(targets, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    config = Config(
        scan_interval=1,
        growth_scans=3,
        growth_bytes_per_hour=1000,
        targets=[TargetSpec(name="timer_leak-*")],
    )

    async def go():
        rig = Rig(config, tmp_path, metrics=True)
        try:
            t = targets.start(TIMER_LEAK, "1000", "20", options="backtrace=16")
            with rig.hub.subscribe(pid=t.pid) as sub:
                events = []
                for _ in range(3):
                    assert await rig.tick() == 1
                    events.append(await asyncio.wait_for(sub.queue.get(), WAIT))
                    rig.clock.now += 1
                    await asyncio.sleep(0.3)  # let it leak some more
            first, last = events[0].event, events[-1].event
            assert first.trigger == pb.TRIGGER_SCHEDULED and first.report.pid == t.pid
            assert list(first.growth) == []
            assert len(last.growth) == 1, last
            g = last.growth[0]
            assert g.scans == 3 and g.bytes > g.first_bytes > 0 and g.bytes_per_hour > 1000
            assert any(f.function == "leak_one" for f in g.backtrace)
            grow_logs = [r for r in caplog.records if "leak growing in" in r.getMessage()]
            assert len(grow_logs) == 1 and grow_logs[0].levelno == logging.WARNING
            assert "leak_one" in grow_logs[0].getMessage()
            assert grow_logs[0].journal_fields["LEAK_SITE"] == g.site
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{rig.port}/metrics", timeout=30)
                .read()
                .decode()
            )
            command = Path(f"/proc/{t.pid}/comm").read_text().strip()
            assert metric(text, "unreachable_leak_bytes", command=command) == last.report.leak_bytes
            assert (
                metric(text, "unreachable_leak_allocations", command=command)
                == last.report.leak_count
            )
            assert metric(text, "unreachable_leak_growth_bytes_per_hour", command=command) > 1000
            assert metric(text, "unreachable_scans_total", result="leaks") == 3
            assert metric(text, "unreachable_scan_pause_seconds_count") == 3
            assert metric(text, "unreachable_scan_duration_seconds_count") == 3
            assert metric(text, "unreachable_targets") == 1
            assert "pid=" not in text
            t.stop()
            await rig.tick()
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{rig.port}/metrics", timeout=30)
                .read()
                .decode()
            )
            assert metric(text, "unreachable_leak_bytes", command=command) is None
        finally:
            await rig.close()

    run(go())


def test_scan_duration_histogram_holds_the_scans_own_duration(targets, tmp_path):
    """The histogram observes the report's scan_ms, not the daemon's clock
    around the scan subprocess (whose interpreter start-up it includes)."""
    config = Config(scan_interval=60, targets=[TargetSpec(name="globals-*")])

    async def go():
        rig = Rig(config, tmp_path, metrics=True)
        try:
            g = targets.start(SCAN_PROGRAMS / "globals.c")
            with rig.hub.subscribe(pid=g.pid) as sub:
                assert await rig.tick() == 1
                event = (await asyncio.wait_for(sub.queue.get(), WAIT)).event
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{rig.port}/metrics", timeout=30)
                .read()
                .decode()
            )
            assert metric(text, "unreachable_scan_duration_seconds_count") == 1
            observed = metric(text, "unreachable_scan_duration_seconds_sum")
            [row] = rig.history.scans(pid=g.pid)
            assert event.report.scan_ms == row["scan_ms"] > 0
            assert observed == event.report.scan_ms / 1000.0
        finally:
            await rig.close()

    run(go())
