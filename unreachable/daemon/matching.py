"""Which processes the configured [[targets]] select: names, systemd units, cgroups from /proc.

A process is identified by (pid, start time): a pid reused by a new process
is a new target. Its unit is the first path component of its cgroup that is
not a slice (`/system.slice/foo.service/sub` -> `foo.service`), as systemd
names it; processes outside any unit have unit "".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from unreachable.daemon.config import TargetSpec
from unreachable.printable import printable

ProcessKey = tuple[int, int]  # (pid, start time in clock ticks after boot)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    start_time: int
    ppid: int
    name: str  # /proc/PID/comm
    argv0: str  # basename of argv[0]
    command: str  # the command line, arguments joined by spaces
    cgroup: str
    unit: str

    @property
    def key(self) -> ProcessKey:
        return (self.pid, self.start_time)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, self.argv0)

    def label(self) -> str:
        where = f", {self.unit}" if self.unit else ""
        return f"{self.name or '?'}[{self.pid}]{where}"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def parse_stat(text: str) -> tuple[int, int]:
    """(ppid, start time) from /proc/PID/stat (the comm may hold spaces and parentheses)."""
    rest = text.rsplit(")", 1)[1].split()
    # rest[0] is field 3 (state): ppid is field 4, starttime field 22.
    return int(rest[1]), int(rest[19])


def cgroup_path(text: str) -> str:
    """The process's cgroup: the unified (0::) path, else the name=systemd hierarchy's."""
    unified = named = ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            unified = parts[2]
        elif parts[1] == "name=systemd":
            named = parts[2]
    if named and unified in ("", "/"):
        return named
    return unified or named


UNIT_SUFFIXES = (".service", ".scope", ".socket", ".mount", ".swap", ".target", ".timer")


def unit_from_cgroup(path: str) -> str:
    """The first component that names a unit, slices skipped. Components before it that
    name none (a container's cgroup, seen from outside its cgroup namespace) are skipped
    too, so /docker/ID has no unit and /ID/system.slice/x.service is in x.service."""
    for part in path.split("/"):
        if part.endswith(".slice"):
            continue
        if part.endswith(UNIT_SUFFIXES) and not part.startswith("."):
            return part
    return ""


def read_process(pid: int) -> ProcessInfo | None:
    """The process's identity, or None if it is gone, a kernel thread, or a zombie."""
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    cmdline = _read(f"/proc/{pid}/cmdline")
    if not stat or not cmdline:
        return None
    try:
        ppid, start = parse_stat(stat)
    except (IndexError, ValueError):
        return None
    # What the process wrote there is logged and labels metrics: printable.
    args = [printable(a.decode(errors="replace")) for a in cmdline.rstrip(b"\0").split(b"\0")]
    cgroup = cgroup_path(_read(f"/proc/{pid}/cgroup").decode(errors="replace"))
    return ProcessInfo(
        pid=pid,
        start_time=start,
        ppid=ppid,
        name=printable(_read(f"/proc/{pid}/comm").decode(errors="replace").strip()),
        argv0=os.path.basename(args[0]) if args else "",
        command=" ".join(args),
        cgroup=cgroup,
        unit=unit_from_cgroup(cgroup),
    )


def still_running(key: ProcessKey) -> bool:
    stat = _read(f"/proc/{key[0]}/stat").decode(errors="replace")
    try:
        return bool(stat) and parse_stat(stat)[1] == key[1]
    except (IndexError, ValueError):
        return False


def list_processes(exclude: Iterable[int] = ()) -> list[ProcessInfo]:
    skip = set(exclude)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        info = read_process(int(entry))
        if info is not None:
            found.append(info)
    return found


def matching(specs: list[TargetSpec], info: ProcessInfo) -> TargetSpec | None:
    """The first spec that selects the process (None: none does)."""
    for spec in specs:
        if spec.matches(info.names, info.unit, info.cgroup):
            return spec
    return None
