"""A fork scan begun while the shim's helper still ends what a previous
scan left it (capture/helper_free.py): here a snapshot child still alive,
held by another scanner (this test, through a Session of its own), or a
write tracking the helper still takes down after its STOP. The fork scan
waits for the helper with the target running, never stopping it
meanwhile, and forks once the child is gone; past its bound it says why in
one line (exit 2) and leaves the target as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.scanner.procs import children, wait_until
from unreachable import _native
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import STOP, tracked_writes
from unreachable.scan import ScanOptions, scan

HERE = Path(__file__).parent
PROGRAMS = HERE.parent / "scan" / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


@contextmanager
def snapshot_child_held(pid: int) -> Iterator[int]:
    """A fork snapshot of pid taken and held as a scan holds it while its
    child sweeps: the target let go, the child frozen, the helper's command
    word SNAPSHOT until the child is gone."""
    header = open_target(pid).header
    session = _native.Session(pid)
    try:
        session.stop()
        child = session.snapshot(header.helper_tid, header.helper_cmd)
        session.release()
        yield child
    finally:
        session.close()


def _traced_while(target, busy: threading.Event | subprocess.Popen, polls: int = 0) -> bool:
    """Whether a tracer held the target at any look, `polls` looks (or
    until the scan ends)."""
    seen, n = False, 0
    while (n < polls) if polls else (busy.poll() is None):  # type: ignore[union-attr]
        seen |= target.tracer() != 0
        n += 1
        time.sleep(0.003)
    return seen


def test_a_fork_scan_waits_for_a_previous_snapshot_child_with_the_target_running(targets):
    target = targets.start(PROGRAMS / "many.c", "2000", "300")
    out: dict = {}

    def second() -> None:
        try:
            out["report"] = scan(target.pid, ScanOptions(snapshot="fork"))
        except Exception as e:  # noqa: BLE001 - reported below
            out["error"] = e

    with snapshot_child_held(target.pid):
        scanning = threading.Thread(target=second)
        scanning.start()
        # Half a second of looks while the child lives: the scan has begun
        # (its facts take milliseconds) and must not stop the target.
        traced = _traced_while(target, scanning, polls=150)  # type: ignore[arg-type]
    scanning.join()
    assert "error" not in out, out
    report = out["report"]
    assert not traced, "the target was stopped while the helper still held a child"
    assert report.snapshot == "fork" and report.snapshot_note == ""
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    wait_until(lambda: children(target.pid) == [], what="snapshot child gone")
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_a_helper_busy_past_the_bound_is_said_in_one_line(targets):
    target = targets.start(PROGRAMS / "many.c", "2000", "300")
    with snapshot_child_held(target.pid):
        proc = subprocess.Popen(
            [*CLI, "scan", str(target.pid), "--snapshot", "fork", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        traced = _traced_while(target, proc)
        _, err = proc.communicate()
    assert not traced, "the target was stopped while the helper still held a child"
    assert proc.returncode == 2, (proc.returncode, err)
    assert err.count("\n") == 1 and "previous scan's snapshot child" in err, err
    assert target.alive() and target.tracer() == 0 and target.state() != "t"
    # Once the child is gone, the same scan forks.
    done = subprocess.run(
        [*CLI, "scan", str(target.pid), "--snapshot", "fork", "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["snapshot"] == "fork"


def _tracker_cmd(pid: int, addr: int) -> int:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
        f.seek(addr)
        raw = f.read(_native.abi_sizeof("ur_write_tracker"))
    return int(_native.abi_decode("ur_write_tracker", raw)["cmd"])


def test_a_fork_scan_waits_for_a_tracking_the_helper_still_takes_down(targets, tmp_path):
    """A tracking the helper armed itself (mode 0: a shim whose descriptor
    the scanner cannot take, or a scanner that died) it also takes down,
    after the STOP: a 2 TiB read-write reservation, in a chroot where the
    helper cannot read its pagemap, in 8 MiB pieces, 0.3-0.6 s. A fork scan
    begun then waits for it; it stopped the target at once and let the
    helper finish alone in the pause."""
    target = targets.start(HERE / "programs" / "rw_reservation.c", "2048", str(tmp_path))
    opened = open_target(target.pid)
    tracker = opened.header.write_tracker
    out: dict = {}

    def second() -> None:
        out["report"] = scan(target.pid, ScanOptions(snapshot="fork"))

    with tracked_writes(opened, mode=0, arm_here=False):
        pass  # the STOP is written as it ends; the helper's teardown follows
    scanning = threading.Thread(target=second)
    scanning.start()
    stopped_in_teardown = False
    while scanning.is_alive():
        cmd = _tracker_cmd(target.pid, tracker)
        stopped_in_teardown |= cmd == STOP and target.tracer() != 0
        time.sleep(0.003)
    scanning.join()
    assert not stopped_in_teardown, "the target was stopped while the helper took a tracking down"
    report = out["report"]
    assert report.snapshot == "fork" and report.snapshot_note == ""
    assert (report.leak_count, report.leak_bytes) == (1, 48)
    assert target.alive() and target.tracer() == 0 and target.state() != "t"
