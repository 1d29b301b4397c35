"""check_unreachable_on_signal: SIGRTMAX-16 has unreachabled scan the process, idle or busy."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.daemon.conftest import DaemonFactory, WatchThread
from unreachable.v1 import unreachable_pb2 as pb

CHECK = signal.SIGRTMAX - 16
PROGRAM = "unreachable_target.c"


@pytest.fixture
def daemons() -> Iterator[DaemonFactory]:
    factory = DaemonFactory()
    yield factory
    factory.cleanup()


def untraced(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        if int(fields["TracerPid"]) == 0 and fields["State"].strip()[0] not in "tT":
            return
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["idle", "busy"])
@pytest.mark.parametrize("extra", ["", " guard fill free_track=20 backtrace"])
def test_signal_scan_reaches_watch(daemons, procs, mode, extra):
    daemon = daemons.start()
    p = procs.start(
        PROGRAM,
        mode,
        options="check_unreachable_on_signal verbose" + extra,
        env={"UNREACHABLE_NOTIFY_SOCKET": str(daemon.notify_socket)},
    )
    ready = p.read_line()
    assert ready == "READY leak_count=1 leak_bytes=300"
    prog = p.proc.args[0]
    p.wait_stderr(
        rf"^malloc_debug: {prog}: Run: 'kill -{CHECK} {p.pid}' to check for unreachable memory\.$"
    )
    watch = WatchThread(daemon.address, pid=p.pid, timeout=180)
    try:
        os.kill(p.pid, CHECK)
        event = watch.get()
        assert event.trigger == pb.TRIGGER_SIGNAL
        assert event.report.pid == p.pid
        assert (event.report.leak_count, event.report.leak_bytes) == (1, 300)
        p.wait_stderr(r"^malloc_debug: Starting to check for unreachable memory\.$")
        daemon.wait_for_log(rf"signal scan: 300 bytes in 1 allocation unreachable .*pid {p.pid}")
        # and again: each signal is one more scan
        os.kill(p.pid, CHECK)
        assert watch.get().report.leak_bytes == 300
    finally:
        watch.close()
    untraced(p.pid)
    assert p.alive()
    assert "failed" not in p.stderr()


@pytest.mark.parametrize("mode", ["idle", "busy"])
def test_no_daemon_says_so_once(procs, tmp_path, mode):
    path = tmp_path / "nobody.sock"
    p = procs.start(
        PROGRAM,
        mode,
        options="check_unreachable_on_signal",
        env={"UNREACHABLE_NOTIFY_SOCKET": str(path)},
    )
    p.read_line()
    os.kill(p.pid, CHECK)
    failed = (
        "malloc_debug: Unreachable check failed: "
        f"no unreachabled at {path}: No such file or directory"
    )
    p.wait_stderr("^" + failed.replace(".", r"\.") + "$")
    time.sleep(0.3)
    lines = p.stderr().splitlines()
    assert lines == ["malloc_debug: Starting to check for unreachable memory.", failed]
    assert p.alive()
    if mode == "idle":
        p.send("")  # unharmed: it still reads its stdin and exits normally
        assert p.finish() == 0


def test_default_socket_path(procs):
    default = "/run/unreachable/notify.sock"
    if os.path.exists(default):
        pytest.skip("a system unreachabled is running")
    env = {"UNREACHABLE_NOTIFY_SOCKET": ""}
    p = procs.start(PROGRAM, options="check_unreachable_on_signal", env=env)
    p.read_line()
    os.kill(p.pid, CHECK)
    m = p.wait_stderr(r"^malloc_debug: Unreachable check failed: no unreachabled at (\S+): ")
    assert m.group(1) == default
    assert p.alive()


def _answering(path: str, reply: bytes) -> threading.Thread:
    """A notify socket answering one request with `reply`, then closing: the
    replies of this daemon and of one older than BUSY's reason line."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def answer() -> None:
        with server, server.accept()[0] as conn:
            conn.makefile("rb").readline()
            conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


USER_SHARE = (
    "malloc_debug: Unreachable check not queued: unreachabled at {} is busy with as many"
    " scans of this user's processes as it takes; try again later"
)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"BUSY\nuser\n", USER_SHARE),
        (b"BUSY\npending\n", "malloc_debug: Unreachable check already pending"),
        (b"BUSY\n", "malloc_debug: Unreachable check already pending"),
    ],
)
def test_busy_says_which_limit(procs, tmp_path, reply, said):
    """BUSY for the user's share of the daemon's scans is not "already
    pending"; a daemon sending BUSY alone still means a scan pending."""
    path = str(tmp_path / "notify.sock")
    answered = _answering(path, reply)
    p = procs.start(
        PROGRAM,
        "idle",
        options="check_unreachable_on_signal",
        env={"UNREACHABLE_NOTIFY_SOCKET": path},
    )
    p.read_line()
    os.kill(p.pid, CHECK)
    said = said.format(path)
    p.wait_stderr("^" + re.escape(said) + "$")
    answered.join(timeout=20)
    assert p.stderr().splitlines() == [
        "malloc_debug: Starting to check for unreachable memory.",
        said,
    ]
    assert p.alive()
