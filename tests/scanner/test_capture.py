"""Session.stop()/release() against real multi-threaded targets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scanner.procs import Counter, program, regs, spawn, state, wait_until
from unreachable import _native

R12_MAGIC = 0x5CA1AB1E12345678
XMM_MAGIC = 0x0DDBA11CAFEF00D
XMM15_OFFSET = 160 + 15 * 16  # legacy XSAVE area: XMM registers from byte 160


@pytest.fixture
def target(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Counter, int, int]]:
    counter = tmp_path / "counter"
    with spawn([str(program("threads")), str(counter), "4", "4"]) as (proc, line):
        _, r12_tid, xmm_tid = line.split()
        c = Counter(counter)
        wait_until(lambda: c.path.exists() and c.loops > 0, what="first counter write")
        yield proc, c, int(r12_tid), int(xmm_tid)


def _mappings(pid: int) -> list[tuple[int, int, str]]:
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        rng, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in rng.split("-"))
        out.append((lo, hi, perms))
    return out


def test_stop_returns_every_thread_with_registers(target) -> None:
    proc, counter, r12_tid, xmm_tid = target
    tids = {int(t) for t in os.listdir(f"/proc/{proc.pid}/task")}
    maps = _mappings(proc.pid)
    began = time.monotonic_ns()
    with _native.Session(proc.pid) as s:
        threads = s.stop()
        assert {t[0] for t in threads} == tids
        assert s.stopped_threads == len(tids) == 4 + 4 + 3
        assert not s.group_stopped
        assert s.mem_pid == proc.pid
        for tid, sp, raw, xstate in threads:
            r = regs(raw)
            assert r["rsp"] == sp
            assert any(lo <= sp < hi and perms.startswith("rw") for lo, hi, perms in maps), tid
            assert r["rip"] != 0
            assert len(xstate) >= 576  # legacy area + XSAVE header at least
            if tid == r12_tid:
                assert r["r12"] == R12_MAGIC
            if tid == xmm_tid:
                assert xstate[XMM15_OFFSET : XMM15_OFFSET + 8] == XMM_MAGIC.to_bytes(8, "little")
        # While stopped nothing moves; the state reads 't' (tracing stop).
        before = counter.read()
        time.sleep(0.05)
        assert counter.read() == before
        assert state(proc.pid) == "t"
        assert s.pause_ns > 0
        assert s.window_ns is None  # not released yet
        s.release()
        paused = s.pause_ns
        assert s.pause_ns == paused  # frozen once released
        # The pause on the target's clock (CLOCK_MONOTONIC, time.monotonic_ns):
        # after the session began, by now over, as long as pause_ns.
        start, end = s.window_ns
        assert began <= start < end <= time.monotonic_ns() and end - start == paused
        s.release()  # idempotent
    wait_until(lambda: counter.loops > before[0], what="progress after release")
    assert proc.poll() is None


def test_signal_sent_while_stopped_is_delivered_after_release(target) -> None:
    proc, counter, _, _ = target
    s = _native.Session(proc.pid)
    s.stop()
    os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(0.05)
    assert counter.read()[1] == 0
    s.close()
    wait_until(lambda: counter.read()[1] == 1, what="SIGUSR1 delivery")


def test_no_signal_lost_across_many_captures(target) -> None:
    """Queued real-time signals sent from outside at random points of
    stop/release are all delivered."""
    proc, counter, _, _ = target
    sent = 300
    done = threading.Event()

    def sender() -> None:
        for i in range(sent):
            os.kill(proc.pid, signal.SIGRTMIN)
            if i % 10 == 0:
                time.sleep(0.001)
        done.set()

    th = threading.Thread(target=sender)
    th.start()
    while not done.is_set():
        with _native.Session(proc.pid) as s:
            s.stop()
    th.join()
    wait_until(lambda: counter.read()[2] == sent, what=f"{sent} SIGRTMIN deliveries")


def test_signal_delivery_stops_are_reinjected(tmp_path: Path) -> None:
    """A thread of the target floods a sibling with queued signals, so that
    captures catch the sibling in signal-delivery-stops: every signal must
    still be handled once (re-injected through PTRACE_DETACH)."""
    storm = 5000
    counter = Counter(tmp_path / "counter")
    with spawn([str(program("threads")), str(counter.path), "0", "0", str(storm)]) as (proc, _):
        wait_until(lambda: counter.path.exists() and counter.loops > 0, what="first write")
        captures = 0
        while counter.read()[3] < storm or captures < 50:
            with _native.Session(proc.pid) as s:
                s.stop()
            captures += 1
            assert captures < 100000
        wait_until(lambda: counter.read()[4] == storm, what="every storm signal handled")


def test_group_stopped_target_stays_stopped(target) -> None:
    proc, counter, _, _ = target
    os.kill(proc.pid, signal.SIGSTOP)
    wait_until(lambda: state(proc.pid) == "T", what="SIGSTOP")
    before = counter.read()
    with _native.Session(proc.pid) as s:
        threads = s.stop()
        assert len(threads) == 11
        assert s.group_stopped
    # Detached, it passes through its group stop again on its way back.
    wait_until(lambda: state(proc.pid) == "T", what="back in the group stop")
    assert counter.read() == before
    os.kill(proc.pid, signal.SIGCONT)
    wait_until(lambda: counter.loops > before[0], what="progress after SIGCONT")


TRACER = textwrap.dedent(
    """
    import ctypes, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(0x4206, int(sys.argv[1]), None, None) != 0:  # PTRACE_SEIZE
        print("fail", ctypes.get_errno(), flush=True)
        sys.exit(1)
    print("ok", flush=True)
    time.sleep(60)
    """
)


def test_already_traced_target_names_the_tracer(target) -> None:
    proc, _, _, _ = target
    tracer = subprocess.Popen(
        [sys.executable, "-c", TRACER, str(proc.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert tracer.stdout is not None
        assert tracer.stdout.readline().strip() == "ok"
        with pytest.raises(PermissionError) as exc:
            _native.Session(proc.pid).stop()
        assert f"already traced by process {tracer.pid}" in str(exc.value)
    finally:
        tracer.kill()
        tracer.wait()


def test_missing_pid_and_self() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    with pytest.raises(ProcessLookupError):
        _native.Session(pid_max + 1).stop()
    with pytest.raises(ValueError):
        _native.Session(os.getpid()).stop()
    with pytest.raises(ValueError):
        _native.Session(threading.get_native_id()).stop()
    with pytest.raises(ValueError):
        _native.Session(0)


def test_misuse_is_reported(target) -> None:
    proc, _, _, _ = target
    s = _native.Session(proc.pid)
    with pytest.raises(RuntimeError):
        s.snapshot(proc.pid, 0)  # not stopped
    s.stop()
    with pytest.raises(RuntimeError):
        s.stop()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            s.release()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=other_thread)
    th.start()
    th.join()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    s.close()
    s.close()


SCANNER = textwrap.dedent(
    """
    import sys, time
    from unreachable import _native
    s = _native.Session(int(sys.argv[1]))
    s.stop()
    print("stopped", flush=True)
    time.sleep(60)
    """
)


def test_target_runs_on_after_the_scanner_is_killed(target) -> None:
    proc, counter, _, _ = target
    scanner = subprocess.Popen(
        [sys.executable, "-c", SCANNER, str(proc.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert scanner.stdout is not None
        assert scanner.stdout.readline().strip() == "stopped"
        before = counter.read()
        time.sleep(0.05)
        assert counter.read() == before
        scanner.kill()
        scanner.wait()
        wait_until(lambda: counter.loops > before[0], what="progress after scanner death")
        assert state(proc.pid) in "RS"
    finally:
        scanner.kill()
        scanner.wait()


def test_dealloc_releases(target) -> None:
    proc, counter, _, _ = target
    s = _native.Session(proc.pid)
    s.stop()
    before = counter.loops
    del s
    wait_until(lambda: counter.loops > before, what="progress after dealloc")


KILLING_SCANNER = textwrap.dedent(
    """
    import os, signal, sys
    from unreachable import _native
    pid = int(sys.argv[1])
    s = _native.Session(pid)
    s.stop()
    os.kill(pid, signal.SIGKILL)
    s.close()
    print("closed", flush=True)
    sys.stdin.read()
    """
)


def test_target_killed_while_stopped_is_left_to_its_parent(target) -> None:
    # The 11-thread target dies while every thread is ours; closing must reap
    # the deaths, or its parent (this test) never sees the exit while the
    # scanner lives on, and a new Session on a reused tid fails with EPERM.
    # The scanner is a separate process as in production: a tracer that is
    # also the parent would consume the exit status itself.
    proc, _, _, _ = target
    scanner = subprocess.Popen(
        [sys.executable, "-c", KILLING_SCANNER, str(proc.pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert scanner.stdout is not None
        assert scanner.stdout.readline().strip() == "closed"
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.returncode == -signal.SIGKILL
        assert scanner.poll() is None
    finally:
        scanner.kill()
        scanner.wait()


def test_an_urgent_stop_runs_real_time_until_the_release_and_no_longer(target) -> None:
    """stop(urgent=True): the tracer thread is not preempted by the threads it
    releases (SCHED_FIFO where allowed), and gets its own policy back at the
    release, and when the stop fails."""
    proc = target[0]
    before = os.sched_getscheduler(0)
    with _native.Session(proc.pid) as s:
        s.stop(urgent=True)
        allowed = s.urgent
        during = os.sched_getscheduler(0)
        s.release()
        assert os.sched_getscheduler(0) == before
        assert not s.urgent
    assert during == (os.SCHED_FIFO if allowed else before)
    if os.geteuid() == 0:
        assert allowed
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    with _native.Session(pid_max + 1) as s, pytest.raises(ProcessLookupError):
        s.stop(urgent=True)
    assert os.sched_getscheduler(0) == before
    with _native.Session(proc.pid) as s:
        s.stop()
        assert os.sched_getscheduler(0) == before and not s.urgent


def test_calm_ends_the_urgency_and_not_the_stop(target) -> None:
    """calm(): a stop that goes on for a whole sweep (a snapshot that could
    not be taken) no longer runs realtime, and the threads stay stopped
    until the release."""
    proc = target[0]
    before = os.sched_getscheduler(0)
    with _native.Session(proc.pid) as s:
        s.stop(urgent=True)
        s.calm()
        assert os.sched_getscheduler(0) == before and not s.urgent
        assert state(proc.pid) == "t"
        s.release()
        assert os.sched_getscheduler(0) == before
    wait_until(lambda: state(proc.pid) in "RS", what="the release")


def test_timings_follow_the_pause_in_order(target) -> None:
    """Session.timings: where the pause went, each mark after the one before,
    the last one the pause_ns the session reports."""
    proc = target[0]
    with _native.Session(proc.pid) as s:
        assert set(s.timings.values()) == {0.0}
        s.stop(urgent=True)
        s.release()
        t = s.timings
        order = ["interrupted", "first stopped", "last stopped", "registers read"]
        order += ["release begun", "released"]
        assert list(t) == order
        values = [t[k] for k in order]
        assert values == sorted(values) and values[0] > 0
        assert t["released"] == pytest.approx(s.pause_ns / 1e6, abs=1e-3)
