"""Start C programs as scan targets and talk to them.

A target program prints one line `READY key=value ...` on stdout once its
scenario is set up, then waits; the test reads the line, scans, and the
fixture kills the program afterwards whatever happened.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cbuild import build
from unreachable.capture.target import open_target
from unreachable.errors import TargetNotShimmed


@dataclass
class Target:
    proc: subprocess.Popen[bytes]
    info: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def int(self, key: str) -> int:
        return int(self.info[key], 0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def state(self) -> str:
        with open(f"/proc/{self.pid}/stat", errors="surrogateescape") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def tracer(self) -> int:
        with open(f"/proc/{self.pid}/status", errors="surrogateescape") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
        return 0

    def read_line(self, timeout: float = 20.0) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"target said only {buf!r}")
            chunk = os.read(fd, 1)
            if not chunk:
                raise EOFError(f"target exited ({self.proc.poll()}) after {buf!r}")
            buf += chunk
        return buf.decode().rstrip("\n")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.kill()
        self.proc.wait(timeout=10)


def wait_for_helper(pid: int, timeout: float = 20.0) -> int:
    """The tid of the shim's helper thread, once it runs. The constructor
    starts it, but it records its tid itself, a moment later: a test that
    stops the target (SIGSTOP, a fork snapshot) before then finds none. An
    inert shim starts none: 0 at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            tid = open_target(pid).header.helper_tid
        except TargetNotShimmed:
            return 0
        if tid and os.path.exists(f"/proc/{pid}/task/{tid}"):
            return tid
        if time.monotonic() > deadline:
            raise TimeoutError(f"the shim's helper in pid {pid} never started")
        time.sleep(0.002)


def wait_state(target: Target, states: str, timeout: float = 20.0) -> None:
    """Until the target's state (/proc/PID/stat) is one of `states`."""
    deadline = time.monotonic() + timeout
    while (now := target.state()) not in states:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {target.pid} stays in state {now}, not {states}")
        time.sleep(0.002)


def stoppers_of(pid: int) -> list[int]:
    """The unreachable-stopper processes working on pid: one whose scanner
    died puts the target back by itself, a moment later."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/unreachable-stopper") and argv[1:2] == [str(pid).encode()]:
            found.append(int(entry))
    return found


def wait_untraced(target: Target, timeout: float = 20.0) -> None:
    """Until no tracer holds the target (the kernel detaches a dead one's)
    and no stopper is left to take it again (to reap its snapshot child)."""
    deadline = time.monotonic() + timeout
    while target.tracer() or stoppers_of(target.pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {target.pid} still traced by {target.tracer()}")
        time.sleep(0.002)


class TargetFactory:
    def __init__(self, shim: Path) -> None:
        self.shim = shim
        self.started: list[Target] = []

    def start(
        self,
        program: Path | list[Path],
        *args: str,
        options: str | None = None,
        cxx: bool = False,
        preload: bool = True,
        cflags: list[str] | None = None,
        ldflags: list[str] | None = None,
        env: dict[str, str] | None = None,
        wait_ready: bool = True,
        preexec: Callable[[], None] | None = None,
        wait_helper: bool = True,
    ) -> Target:
        """wait_helper: once READY, also wait for the shim's helper thread
        (wait_for_helper); False for a program that has none by then."""
        exe = build(program, cxx=cxx, cflags=cflags, ldflags=ldflags)
        full_env = dict(os.environ, **(env or {}))
        if preload:
            full_env["LD_PRELOAD"] = str(self.shim)
        if options is not None:
            full_env["UNREACHABLE_MALLOC_OPTIONS"] = options
        proc = subprocess.Popen(
            [str(exe), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=full_env,
            preexec_fn=preexec,
        )
        target = Target(proc)
        self.started.append(target)
        if wait_ready:
            line = target.read_line()
            while not line.startswith("READY"):
                line = target.read_line()
            target.info = dict(kv.split("=", 1) for kv in line.split()[1:])
            if preload and wait_helper:
                wait_for_helper(target.pid)
        return target

    def cleanup(self) -> None:
        for t in self.started:
            t.stop()
