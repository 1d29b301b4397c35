"""A process whose children are made by a raw clone() (tests/shim/programs/
raw_clone.c, the way vsftpd makes its sessions), started under the shim:
the children as the program announced them, and all of it killed after."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.cbuild import build

PROGRAM = Path(__file__).resolve().parents[1] / "shim" / "programs" / "raw_clone.c"
LEAK_SIZE = 4321
GRANDCHILD_LEAK = 1234
THREADS = 4  # the parent's threads allocating and freeing meanwhile
CHURN_SIZES = range(16, 2016)  # the sizes of their blocks


@dataclass(frozen=True)
class Child:
    pid: int  # as this process names it
    leak: int  # the address of the block it dropped (LEAK_SIZE bytes)
    setgroups: int  # 0, or the errno of its setgroups(0, NULL)
    quiet: bool  # cloned while the parent's threads waited between two blocks


@dataclass(frozen=True)
class Grandchild:
    pid: int
    leak: int  # the block it dropped (GRANDCHILD_LEAK bytes)


@dataclass(frozen=True)
class Family:
    parent: subprocess.Popen[bytes]
    children: list[Child]
    grandchildren: list[Grandchild]

    def quiet(self) -> Child:
        return next(c for c in self.children if c.quiet)

    def busy(self) -> Child:
        return next(c for c in self.children if not c.quiet)


def _lines(proc: subprocess.Popen[bytes], timeout: float) -> Iterator[str]:
    """The program's lines until READY (TimeoutError past timeout: a child
    that never got past its setgroups() or a lock says nothing)."""
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()
            if line.startswith(b"READY"):
                return
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"the program said only {buf!r} in {timeout} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise EOFError(f"the program exited ({proc.poll()}) after {buf!r}")
        buf += chunk


def _child(line: str) -> Child:
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    return Child(int(f["pid"]), int(f["leak"], 16), int(f["setgroups"]), f["quiet"] == "1")


@contextmanager
def raw_clone_family(
    shim: Path,
    how: str = "newipc",
    children: int = 4,
    timeout: float = 30.0,
    grandchildren: bool = False,
) -> Iterator[Family]:
    """grandchildren: each child forks one through glibc's fork()."""
    exe = build(PROGRAM)
    proc = subprocess.Popen(
        [str(exe), how, str(children), "grandchild" if grandchildren else "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, LD_PRELOAD=str(shim)),
    )
    found: list[Child] = []
    below: list[Grandchild] = []
    try:
        for line in _lines(proc, timeout):
            if line.startswith("CHILD"):
                found.append(_child(line))
            elif line.startswith("GRANDCHILD"):
                f = dict(kv.split("=", 1) for kv in line.split()[1:])
                below.append(Grandchild(int(f["pid"]), int(f["leak"], 16)))
        yield Family(proc, found, below)
    finally:
        # Every child, announced or not (one stuck before its line): the
        # parent's, and CLONE_PARENT's, which are this process's.
        family = {c.pid for c in found} | {g.pid for g in below}
        family |= _made_by(exe, {proc.pid, os.getpid(), *family})
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
        proc.wait(timeout=10)
        for pid in family:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass  # the parent's child: the parent's death reaps it


def _made_by(exe: Path, parents: set[int]) -> set[int]:
    """Processes running exe whose parent is one of parents."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/exe") != str(exe):
                continue
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in parents:
            found.add(int(entry))
    return found
