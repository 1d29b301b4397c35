"""Checks made before a target is touched: does it exist, can it be scanned."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from unreachable.errors import (
    TargetNotFound,
    TargetPermissionDenied,
    TargetUnscannable,
)


@dataclass(slots=True, eq=False, repr=False)
class ProcessStatus:
    """What /proc/PID/status says of a process that decides whether it can be scanned."""

    pid: int
    name: str
    state: str
    tracer_pid: int
    is_kernel_thread: bool
    # The task whose /proc entry reads the process's memory: pid itself, or
    # a live thread once the main thread has exited (check_scannable).
    proc: int = 0


def read_status(pid: int) -> ProcessStatus:
    try:
        with open(f"/proc/{pid}/status", errors="surrogateescape") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except (FileNotFoundError, ProcessLookupError):
        raise TargetNotFound(f"no process with pid {pid}") from None
    except PermissionError:
        raise TargetPermissionDenied(f"no permission to inspect pid {pid}") from None
    try:
        kthread = "Kthread" in fields and fields["Kthread"].strip() == "1"
        if "Kthread" not in fields:
            # Kernels without the Kthread field: kernel threads have no memory map.
            with open(f"/proc/{pid}/stat", errors="surrogateescape") as f:
                flags = int(f.read().rsplit(")", 1)[1].split()[7])
            kthread = bool(flags & 0x00200000)  # PF_KTHREAD
    except (OSError, ValueError, IndexError):
        kthread = False
    return ProcessStatus(
        pid=pid,
        name=fields.get("Name", "").strip(),
        state=fields.get("State", "?").strip()[:1],
        tracer_pid=int(fields.get("TracerPid", "0").strip() or 0),
        is_kernel_thread=kthread,
        proc=pid,
    )


def live_thread(pid: int) -> int:
    """A thread of pid that has not exited (0 if none). A main thread that
    called pthread_exit stays a zombie while the others run: the kernel then
    shows the whole process as State Z, and its /proc/PID/maps and mem read
    nothing, where /proc/TID/ of a live thread reads the shared memory."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return 0
    for tid in tids:
        if thread_state(pid, tid) not in ("", "Z", "X"):  # "": exited since the listing
            return tid
    return 0


def thread_state(pid: int, tid: int | str) -> str:
    """A thread's state letter in /proc/PID/task/TID/stat (R, S, D, T, Z,
    ...); "" once it has exited. Its name, between the parentheses, is any
    bytes the program gave it."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", errors="surrogateescape") as f:
            return str(f.read().rsplit(")", 1)[1].split()[0])
    except (OSError, IndexError):
        return ""


def resident_anonymous_bytes(pid: int) -> int:
    """The process's anonymous memory in use (RssAnon): what a fork's
    page-table copy and a copy snapshot both grow with; 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status", errors="surrogateescape") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def pid_namespace(pid: int | str) -> str:
    """The process's pid namespace ("" if unreadable)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def innermost_pid(pid: int) -> int:
    """What getpid() returns in pid: its id in its own pid namespace (a
    container's), the last of NSpid's; pid itself if unreadable."""
    try:
        with open(f"/proc/{pid}/status", errors="surrogateescape") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def host_tid(pid: int, ns_tid: int) -> int:
    """The thread of `pid` that gettid() names ns_tid in the process's own pid
    namespace (a container's), by this process's name for it; 0 if none.
    ns_tid is the target's word (the shim's descriptor): a tid of another
    process is none (/proc/PID/task lists only the process's own)."""
    if not ns_tid:
        return 0
    if pid_namespace(pid) == pid_namespace("self"):
        return ns_tid if os.path.exists(f"/proc/{pid}/task/{ns_tid}") else 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status", errors="surrogateescape") as f:
                nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if nspid and int(nspid[-1]) == ns_tid:  # the innermost namespace's id comes last
            return int(tid)
    return 0


def thread_seccomp(pid: int, tid: int) -> int:
    """One thread's seccomp mode (0 none, 1 strict, 2 filter); -1 if unknown."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status", errors="surrogateescape") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return int(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return -1


def check_scannable(pid: int) -> ProcessStatus:
    """Refuse, with one clear line, every target a scan must not touch."""
    if pid <= 0:
        raise TargetNotFound(f"invalid pid {pid}")
    if pid == os.getpid():
        raise TargetUnscannable("refusing to scan the scanner itself")
    status = read_status(pid)
    if status.is_kernel_thread:
        raise TargetUnscannable(f"pid {pid} ({status.name}) is a kernel thread, it has no heap")
    if status.state in ("Z", "X"):
        if not (tid := live_thread(pid)):
            raise TargetUnscannable(f"pid {pid} ({status.name}) is a zombie: it has exited")
        # Only the main thread has exited: read the process through a live one.
        status = replace(read_status(tid), pid=pid, proc=tid)
    if status.tracer_pid:
        raise TargetUnscannable(
            f"pid {pid} ({status.name}) is already traced by pid {status.tracer_pid} "
            "(a debugger or strace?); detach it and retry"
        )
    return status
