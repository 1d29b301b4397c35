"""Helpers for the scanner tests that drive real target processes."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.cbuild import build

PROGRAMS = Path(__file__).parent / "programs"

# struct user_regs_struct (x86_64) field order.
REGS = (
    "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags "
    "rsp ss fs_base gs_base ds es fs gs"
).split()


def program(name: str) -> Path:
    return build(PROGRAMS / f"{name}.c", cflags=["-O1"])


def regs(raw: bytes) -> dict[str, int]:
    return dict(zip(REGS, struct.unpack(f"<{len(REGS)}Q", raw[: 8 * len(REGS)]), strict=True))


@contextmanager
def spawn(args: list[str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start a target, yield it with its first stdout line; always kill it."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"{args[0]} exited early ({proc.poll()})"
        yield proc, line.strip()
    finally:
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            proc.kill()
        proc.wait()


def fields(line: str) -> dict[str, int]:
    out = {}
    for item in line.split():
        key, _, val = item.partition("=")
        out[key] = int(val, 0)
    return out


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def read_u64(pid: int, addr: int) -> int:
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        return struct.unpack("<Q", os.pread(fd, 8, addr))[0]
    finally:
        os.close(fd)


def read_u32(pid: int, addr: int) -> int:
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        return struct.unpack("<I", os.pread(fd, 4, addr))[0]
    finally:
        os.close(fd)


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except FileNotFoundError:
            pass
    return out


def exists(pid: int) -> bool:
    try:
        return state(pid) not in "ZX"
    except FileNotFoundError:
        return False


class Counter:
    """The progress file written by programs/threads.c."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> tuple[int, ...]:
        """(loops, sigusr1, sigrtmin, storm sent, storm received)"""
        for _ in range(100):
            parts = self.path.read_text().split()
            if len(parts) == 5 and all(p.isdigit() for p in parts):
                return tuple(int(p) for p in parts)
            time.sleep(0.001)  # torn read of a concurrent pwrite: retry
        raise AssertionError(f"unreadable counter file {self.path}")

    @property
    def loops(self) -> int:
        return self.read()[0]
