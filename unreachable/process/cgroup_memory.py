"""How much more memory a process's cgroup may be charged before it hits its limit.

A fork snapshot is charged to the target's memory cgroup: the child's page
tables, a copy of every page the target writes while the child lives, and
the in-child sweep's scratch (the allocation index). At the limit the kernel
OOM-kills a process of that cgroup, and the victim may be the target. A
scan asks first and, when the room is not there, sweeps the snapshot from
outside (the scanner's memory is charged to the scanner) or takes no
snapshot child at all (docs/design.md, "Memory limits").

The scanner may run under a limit of its own (a daemon with MemoryMax=):
its copies of target memory take at most half its room, and a sweep from
outside, whose index grows with the target's allocations, is refused
before it starts when the rest would not hold it.

cgroup v1 (a `memory` hierarchy) and v2 (the unified hierarchy) alike; every
ancestor with a limit counts, and page cache counts as room, since the
kernel reclaims it before it kills anyone.
"""

from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"
# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit value.
_UNLIMITED = 1 << 62
# What a snapshot child charges besides page tables: its stacks and inbox,
# and copies of the pages the target writes during a scan.
FORK_MARGIN = 32 << 20
# The in-child sweep's scratch per live allocation (the index, the
# reference graph, the mark and fold arrays: ~55-65 bytes measured,
# docs/design.md, "Memory limits") and its fixed part.
CHILD_BYTES_PER_ALLOCATION = 80
CHILD_FIXED_BYTES = 16 << 20
# A sweep from outside, in the scanner, per live allocation: the registry
# read out of the target, the index, the reference graph, the mark and fold
# arrays, the leak records (measured: ~145 bytes per allocation and ~63 more
# per leaked one, so this holds even when every block leaked;
# docs/design.md, "Memory limits"), and its fixed part.
SCANNER_BYTES_PER_ALLOCATION = 208
SCANNER_FIXED_BYTES = 16 << 20

_V1 = ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_")
_V2 = ("", "memory.max", "memory.current", "")


def fork_charge(anonymous_bytes: int) -> int:
    """What a snapshot child may charge the target's cgroup before any sweep:
    its page tables (8 bytes per 4 KiB page, doubled for the upper levels)
    and FORK_MARGIN."""
    return FORK_MARGIN + anonymous_bytes // 256


def child_sweep_charge(allocations: int, root_words: int = 0) -> int:
    """What sweeping inside the snapshot child adds to the target's cgroup;
    root_words: at most the bytes of root values the request carries into
    the child's inbox (of the memory kept out of the fork, read in the
    pause, the words that point into the heap are sent that way)."""
    return CHILD_FIXED_BYTES + allocations * CHILD_BYTES_PER_ALLOCATION + root_words


def outside_sweep_charge(allocations: int) -> int:
    """What sweeping from outside adds to the scanner's own memory."""
    return SCANNER_FIXED_BYTES + allocations * SCANNER_BYTES_PER_ALLOCATION


def no_room_for_outside_sweep(room: int | None, allocations: int) -> str:
    """Why the scanner's own memory cgroup, with `room` bytes free for it,
    cannot hold a sweep from outside ("" if it can)."""
    need = outside_sweep_charge(allocations)
    if room is None or room >= need:
        return ""
    return (
        f"this scanner's memory cgroup leaves {_mib(max(0, room))} for the sweep, and sweeping"
        f" {allocations} allocations here needs about {_mib(need)}"
    )


def no_room_for_fork(headroom: int | None, anonymous_bytes: int) -> str:
    """Why the target's cgroup has no room for a snapshot child ("" if it has)."""
    need = fork_charge(anonymous_bytes)
    if headroom is None or headroom >= need:
        return ""
    return (
        f"the target's memory cgroup has {_mib(headroom)} left, and a snapshot child"
        f" may be charged {_mib(need)} to it"
    )


def no_room_for_child_sweep(
    headroom: int | None, anonymous_bytes: int, allocations: int, root_words: int = 0
) -> str:
    """Why the target's cgroup has no room for a snapshot child that sweeps
    itself ("" if it has)."""
    need = fork_charge(anonymous_bytes) + child_sweep_charge(allocations, root_words)
    if headroom is None or headroom >= need:
        return ""
    return (
        f"the target's memory cgroup had {_mib(headroom)} left, and sweeping in the"
        f" snapshot child may be charged {_mib(need)} to it"
    )


def oom_victim_first(pid: int | None) -> None:
    """Make a process the OOM killer's first choice in its cgroup: a
    snapshot child, should the scan still push the target's cgroup to its
    limit (the child holds nothing the target needs), or a daemon's scan
    subprocess (killing it aborts one scan; the daemon serves on). Raising
    a score needs no privilege."""
    if not pid:
        return
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass  # best effort: the room checks came first


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def scanner_cache_budget(room: int | None) -> int:
    """What this process's copies of target memory (a copy snapshot, stopped
    mode's copy) may take, given the room its own memory cgroup has left
    (memory_headroom(os.getpid())): half of it, so that a scanner run under a
    limit (a daemon with MemoryMax=) is not the one OOM-killed. 0 when no
    limit applies: then half of MemAvailable bounds them."""
    return 0 if room is None else max(1, room // 2)


def memory_headroom(pid: int, root: str = CGROUP_ROOT) -> int | None:
    """Bytes the process's memory cgroup can still be charged: the least over
    it and its ancestors of limit - usage + page cache. None when no limit
    applies or the cgroup cannot be read (then nothing is held back)."""
    try:
        with open(f"/proc/{pid}/cgroup", errors="surrogateescape") as f:
            return headroom_from(f.read(), root)
    except OSError:
        return None


def headroom_from(proc_cgroup: str, root: str = CGROUP_ROOT) -> int | None:
    """memory_headroom for a process whose /proc/PID/cgroup reads proc_cgroup."""
    v1_path = v2_path = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1_path = path
        elif hierarchy == "0" and not controllers:
            v2_path = path
    if v1_path is not None:
        return _headroom(root, v1_path, _V1)
    if v2_path is not None:
        return _headroom(root, v2_path, _V2)
    return None


def _headroom(root: str, path: str, layout: tuple[str, str, str, str]) -> int | None:
    hierarchy, limit_file, usage_file, stat_prefix = layout
    parts = [p for p in path.split("/") if p and p != ".."]
    least: int | None = None
    for depth in range(len(parts), -1, -1):
        directory = os.path.join(root, hierarchy, *parts[:depth])
        limit = _read_number(os.path.join(directory, limit_file))
        if limit is None or limit >= _UNLIMITED:
            continue
        usage = _read_number(os.path.join(directory, usage_file))
        if usage is None:
            continue
        cache = _page_cache(os.path.join(directory, "memory.stat"), stat_prefix)
        room = max(0, limit - usage + cache)
        least = room if least is None else min(least, room)
    return least


def _read_number(path: str) -> int | None:
    """The file's integer; None if it is missing, unreadable or "max"."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _page_cache(stat_path: str, prefix: str) -> int:
    """File-backed pages the kernel may reclaim before it OOM-kills:
    (total_)active_file + (total_)inactive_file of memory.stat."""
    wanted = {prefix + "active_file", prefix + "inactive_file"}
    total = 0
    try:
        with open(stat_path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key in wanted and value.strip().isdigit():
                    total += int(value)
    except OSError:
        return 0
    return total
