"""ListTargets: the processes that run with the shim mapped, and the options in effect.

Reads /proc only (maps, cmdline, comm, and the option string through
/proc/PID/mem): the targets are never stopped.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from unreachable.capture.descriptor import (
    SHIM_PREFIX,
    disabled_reason,
    locate_shim,
    read_descriptor_header,
    shim_mapped,
)
from unreachable.errors import ScanError
from unreachable.printable import printable
from unreachable.process.maps import parse_maps, read_maps, read_maps_text
from unreachable.process.status import innermost_pid

OPTIONS_MAX = 4096
log = logging.getLogger("unreachabled.targets")


@dataclass(frozen=True, slots=True)
class TargetInfo:
    pid: int
    command: str
    name: str
    options: str
    enabled: bool
    shim: str


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return printable(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
    except OSError:
        return ""


def _maps_mention_shim(pid: int) -> bool | None:
    """Whether pid maps the shim, under its name or another it preloads
    (descriptor.py shim_mapped); None when its maps cannot be read (gone)."""
    try:
        text = read_maps_text(pid)
    except ScanError:
        return None
    return SHIM_PREFIX in text or shim_mapped(pid, parse_maps(text))


def read_options(pid: int, addr: int) -> str:
    """The NUL-terminated option string at addr (the descriptor's `options`)."""
    if not addr:
        return ""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return ""
    try:
        data = os.pread(fd, OPTIONS_MAX, addr)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.split(b"\0", 1)[0].decode(errors="replace")


def target_info(pid: int) -> TargetInfo | None:
    """The target's description, or None when pid has no shim (or is unreadable)."""
    if not _maps_mention_shim(pid):
        return None
    try:
        shim = locate_shim(pid, read_maps(pid))
        header = read_descriptor_header(pid, shim.descriptor_addr)
    except ScanError as e:
        # Not listed, as a snapshot copy is not: say why, or a target the
        # scanner cannot read (a file check refused) vanishes without a word.
        log.debug("pid %d maps the shim but is not listed: %s", pid, e)
        return None
    # The shim records getpid(), which in a container is its own namespace's id.
    if header.pid and header.pid != innermost_pid(pid):
        return None  # a scan's frozen copy-on-write snapshot of another process
    return TargetInfo(
        pid=pid,
        command=_read_text(f"/proc/{pid}/cmdline"),
        name=_read_text(f"/proc/{pid}/comm"),
        options=read_options(pid, header.options),
        enabled=header.enabled,
        shim=shim.path,
    )


def inert_reason(pid: int) -> str:
    """Why the shim in pid is inert, as scan says it ("" if it is not, or unreadable)."""
    try:
        header = read_descriptor_header(pid, locate_shim(pid, read_maps(pid)).descriptor_addr)
    except ScanError:
        return ""
    return "" if header.enabled else disabled_reason(header.disabled, header.disabled_errno)


def list_targets() -> list[TargetInfo]:
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        info = target_info(int(entry))
        if info is not None:
            found.append(info)
    return sorted(found, key=lambda t: t.pid)
