"""Everything checked and read about a target before any of its threads stops."""

from __future__ import annotations

from dataclasses import dataclass, replace

from unreachable.capture.descriptor import (
    DescriptorHeader,
    ShimLocation,
    disabled_reason,
    locate_shim,
    read_descriptor_header,
    shim_mapped,
)
from unreachable.errors import ScanError, TargetNotShimmed
from unreachable.printable import printable
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.secure_exec import runs_secure
from unreachable.process.status import ProcessStatus, check_scannable, host_tid


@dataclass(slots=True, eq=False, repr=False)
class Target:
    """A process opened for a scan: its status, its shim and the shim's descriptor."""

    # Where /proc reads the process: its pid, or a live thread's id when the
    # main thread has exited (process/status.py live_thread).
    pid: int
    status: ProcessStatus
    shim: ShimLocation
    header: DescriptorHeader
    command: str
    tgid: int  # the process's id, as reports name it

    # What the stages after capture read of any process (scan/captured.py Subject).
    @property
    def own_path(self) -> str:
        return self.shim.path

    @property
    def own_bss(self) -> tuple[int, int] | None:
        return self.shim.bss

    @property
    def main_arena(self) -> tuple[int, int] | None:
        return None  # looked for in libc's data by the roots stage

    @property
    def altstacks(self) -> tuple[int, int] | None:
        return (self.header.altstacks, self.header.num_altstacks)

    @property
    def descriptor_addr(self) -> int | None:
        return self.shim.descriptor_addr

    @property
    def child_box(self) -> int:
        return self.header.child_box

    @property
    def live(self) -> bool:
        return True

    @property
    def typed(self) -> bool:
        return True

    def symbol_files(self, mappings: list[Mapping]) -> list[Mapping]:
        return mappings


def command_line(pid: int) -> str:
    """/proc/PID/cmdline with spaces between the arguments, printable; "" if
    unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return printable(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
    except OSError:
        return ""


def open_target(pid: int) -> Target:
    """Refuse what must not be scanned; find the shim's registry descriptor."""
    tgid = pid
    status = check_scannable(pid)
    pid = status.proc
    shim = locate_shim(pid, read_maps(pid))
    header = read_descriptor_header(pid, shim.descriptor_addr)
    # The shim records its helper's gettid(), named in the target's own pid
    # namespace; ptrace and /proc want this scanner's name for it.
    header = replace(header, helper_tid=host_tid(pid, header.helper_tid))
    if not header.enabled:
        why = disabled_reason(header.disabled, header.disabled_errno)
        raise TargetNotShimmed(f"the shim in pid {pid} is inert: {why}")
    return Target(pid, status, shim, header, command_line(pid), tgid)


def runs_without_shim(pid: int) -> bool:
    """No shim mapped at all, and not for want of LD_PRELOAD in a
    secure-execution process (its line says why: the user meant a shim)."""
    try:
        mappings = read_maps(check_scannable(pid).proc)
    except ScanError:
        return False  # the refusal already raised says what is wrong
    return not shim_mapped(pid, mappings) and not runs_secure(pid)


def current_helper_tid(target: Target) -> int:
    """The helper's tid as the descriptor names it now (0: none). A helper
    steps aside for unshare() and setns() and a new one takes its place
    (native/shim/namespaces.c), so the tid read by open_target may be gone."""
    try:
        header = read_descriptor_header(target.pid, target.shim.descriptor_addr)
    except OSError:
        return 0
    return host_tid(target.pid, header.helper_tid)


def still_running(pid: int) -> bool:
    """False once the process has exited (gone, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", errors="surrogateescape") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
