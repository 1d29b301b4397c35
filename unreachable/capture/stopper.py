"""The scanner's side of native/stopper (unreachable-stopper): the process
that stops a target without the shim and injects the clone() of its
copy-on-write snapshot, in a process group of its own so that it outlives
the scanner (docs/glibc-heap.md, "The snapshot").

Stopper(pid, syscall_ip) starts it; stop() stops every thread (running
those inside malloc out of it) and asks each its sigaltstack, clone()
makes the frozen child and leaves the target stopped (what the child
lacks is read from it then; the whole copy, scan/glibc.py, copies the
memory instead, from this process), release() lets it go, close() kills
the child and has the target reap it. Closing the pipe in any state (the
scanner killed) makes the stopper put everything back by itself.
"""

from __future__ import annotations

import errno
import os
import signal
import struct
import subprocess
from dataclasses import dataclass

from unreachable._paths import package_file
from unreachable.capture.signal_stacks import RECORD, SignalStacks

STOPPER_NAME = "unreachable-stopper"
# Tests only: the step at which the scanner kills itself ("stopped",
# "sigaltstack", "clone", "child", "wait4", "copied"); the stopper holds its
# injections there.
KILL_AT = "UNREACHABLE_TEST_KILL_AT"
_THREAD = struct.Struct("<iiQII")  # tid, pad, sp, regs length, xstate length


@dataclass(frozen=True, slots=True)
class Stopped:
    left: int  # threads still inside malloc
    threads: list[tuple[int, int, bytes, bytes]]  # (tid, sp, regs, xstate), as Session.stop()
    inject_tid: int  # the thread to clone from (0: none can)
    why_not: str  # why none can
    signal_values: bytes  # queued signals' sigvals, 64-bit words
    signal_stacks: SignalStacks  # each thread's sigaltstack, when asked


def _ended() -> OSError:
    return OSError(errno.EPIPE, "the stopper ended")


def stopper_path() -> str:
    return str(package_file(STOPPER_NAME).resolve())


def kill_here(step: str) -> None:
    """The test fault point: the scanner dies at this step."""
    if os.environ.get(KILL_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)


class Stopper:
    def __init__(self, pid: int, syscall_ip: int) -> None:
        self.pid = pid
        self.child = 0
        self.pause_ns = 0  # the stop's, once released (docs/pause.md)
        self.hold_ns = 0
        self._proc = subprocess.Popen(
            [stopper_path(), str(pid), f"{syscall_ip:x}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # Not killed with the scanner's process group. Not a session of
            # its own: that is an autogroup of its own, new at each stop,
            # whose share of a busy machine made every stop 3-5x longer.
            process_group=0,
            close_fds=True,
        )

    def _ask(self, command: str) -> list[str]:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(command.encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            raise _ended() from None
        while True:
            line = proc.stdout.readline().decode(errors="replace").rstrip("\n")
            if not line:
                raise _ended()
            word, _, rest = line.partition(" ")
            if word == "hold":
                kill_here(rest)
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
                continue
            if word == "ok":
                return rest.split(" ") if rest else []
            code, _, message = rest.partition(" ")
            # OSError(errno, ...) is the errno's own class (PermissionError, ...).
            raise OSError(int(code) if code.isdigit() else errno.EIO, message)

    def _read(self, n: int) -> bytes:
        assert self._proc.stdout is not None
        data = self._proc.stdout.read(n) if n else b""
        if len(data) != n:
            raise _ended()
        return data

    def stop(self, malloc_code: tuple[int, int], rounds: int, flags: int, ask: bool) -> Stopped:
        """Every thread stopped, those inside malloc run out of it; ask:
        then each asked its sigaltstack, in the same command (the target
        held while the scanner waits for one reply, not two). Before
        clone(): the words the answers were written to are back by then."""
        lo, hi = malloc_code
        words = self._ask(f"stop {lo:x} {hi:x} {rounds} {flags:x} {int(ask)}")
        left, n, tid, nsig = (int(w) for w in words[:4])
        threads = []
        for _ in range(n):
            t, _pad, sp, regs_len, xstate_len = _THREAD.unpack(self._read(_THREAD.size))
            threads.append((t, sp, self._read(regs_len), self._read(xstate_len)))
        values = self._read(8 * nsig)
        stacks = SignalStacks(b"", -1, "not asked")
        if ask:
            counts = self._line().split(" ")
            asked, unread = int(counts[0]), int(counts[1])
            stacks = SignalStacks(self._read(asked * RECORD.size), unread, " ".join(counts[2:]))
        return Stopped(left, threads, tid, " ".join(words[4:]), values, stacks)

    def _line(self) -> str:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().decode(errors="replace")
        if not line.endswith("\n"):
            raise _ended()
        return line.rstrip("\n")

    def clone(self, tid: int, flags: int) -> int:
        """The frozen child's pid; the target stays stopped until release()."""
        (child,) = (int(w) for w in self._ask(f"clone {tid} {flags:x}"))
        self.child = child
        return child

    def release(self) -> None:
        pause, hold = self._ask("release")
        self.pause_ns, self.hold_ns = int(pause), int(hold)

    def close(self) -> None:
        """The child killed and reaped, the stopper gone. Raises OSError
        when the target could not reap it."""
        proc = self._proc
        try:
            if proc.poll() is None:
                self._ask("close")
        finally:
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    f.close()
            proc.wait()
            self.child = 0
