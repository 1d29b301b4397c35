"""A memory cgroup of the test's own for a scan target, with a limit the test
sets: cgroup v1's memory hierarchy, the one this VM kind mounts (a pure v2
machine puts the test's own cgroup's processes in the way of a child with
the memory controller, so there the tests that need one skip)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from unreachable.process.cgroup_memory import CGROUP_ROOT


def _own_v1_memory_cgroup() -> Path | None:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                return Path(CGROUP_ROOT, "memory", path.lstrip("/"))
    return None


class MemoryCgroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    def enter(self) -> None:
        """Move the calling process in (a Popen preexec_fn: before exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def move(self, pid: int) -> None:
        """Move a running process in, every thread of it (its charges so far
        stay behind: only what it allocates from now on counts here)."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def usage(self) -> int:
        return int((self.path / "memory.usage_in_bytes").read_text())

    def limit(self, n: int) -> None:
        (self.path / "memory.limit_in_bytes").write_text(str(n))

    def oom_kills(self) -> int:
        fields = (self.path / "memory.oom_control").read_text().split()
        return int(dict(zip(fields[::2], fields[1::2], strict=True)).get("oom_kill", "0"))


@contextmanager
def memory_cgroup(name: str) -> Iterator[MemoryCgroup | None]:
    """A new v1 memory cgroup below the test's own; None where none can be made."""
    parent = _own_v1_memory_cgroup()
    if parent is None or not os.access(parent, os.W_OK):
        yield None
        return
    path = parent / f"{name}-{os.getpid()}"
    try:
        path.mkdir()
    except OSError:
        yield None
        return
    try:
        yield MemoryCgroup(path)
    finally:
        # Processes still inside (a target the fixture kills after us) go to
        # the parent first: a cgroup with members cannot be removed.
        for pid in (path / "cgroup.procs").read_text().split():
            try:
                (parent / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        try:
            path.rmdir()
        except OSError:
            pass
