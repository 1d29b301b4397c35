"""Real sockets standing in for systemd (journal, NOTIFY_SOCKET) and the leaking program."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The daemon tests' fixture, shared rather than copied.
from tests.daemon.conftest import daemons  # noqa: F401
from tests.support.cbuild import build

PROGRAMS = Path(__file__).parent / "programs"
SCAN_PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"


class DatagramSink:
    """A unix datagram socket that keeps every datagram it receives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.received: list[bytes] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._cond:
                self.received.append(data)
                self._cond.notify_all()

    def wait_for(self, predicate, timeout: float = 60.0) -> bytes:
        """The first datagram (old or new) for which predicate(data) is true."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for data in self.received[seen:]:
                    if predicate(data):
                        return data
                seen = len(self.received)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no matching datagram in {self.received[-20:]!r}")
                self._cond.wait(left)

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="urm-", dir="/tmp"))  # short: sun_path is 108 bytes
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


@pytest.fixture
def journal(sockdir: Path) -> Iterator[DatagramSink]:
    sink = DatagramSink(sockdir / "journal.sock")
    yield sink
    sink.close()


@pytest.fixture
def notify(sockdir: Path) -> Iterator[DatagramSink]:
    sink = DatagramSink(sockdir / "notify.sock")
    yield sink
    sink.close()


@pytest.fixture(scope="session")
def timer_leak() -> Path:
    return build(PROGRAMS / "timer_leak.c")


def parse_journal(data: bytes) -> dict[str, str]:
    """journald's native format back into fields."""
    out: dict[str, str] = {}
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            out[k.decode()] = v.decode()
            i = nl + 1
        else:
            size = int.from_bytes(data[nl + 1 : nl + 9], "little")
            out[line.decode()] = data[nl + 9 : nl + 9 + size].decode()
            i = nl + 9 + size + 1
    return out


def free_env() -> dict[str, str]:
    """os.environ without systemd's variables of the test runner itself."""
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM"):
        env.pop(k, None)
    return env
