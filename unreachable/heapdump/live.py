"""Capture a target briefly and group its live allocations by (size, backtrace).

The same capture as a scan (stop_world, then the shim's registry), without
the sweep: the target is released as soon as the registry and the stacks
are copied (at once in fork mode), and symbolization runs afterwards.
"""

from __future__ import annotations

from collections import Counter

from unreachable.allocations.descriptor import locate_shim, read_descriptor_header
from unreachable.allocations.registry import read_registry
from unreachable.capture.stop_world import SnapshotMode, stop_world
from unreachable.errors import TargetNotFound, TargetNotShimmed
from unreachable.heapdump.model import HeapDump, HeapRecord
from unreachable.process.maps import read_maps
from unreachable.process.status import check_scannable
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def heap_dump(pid: int, snapshot: SnapshotMode = "auto") -> HeapDump:
    status = check_scannable(pid)
    shim = locate_shim(pid, read_maps(pid))
    header = read_descriptor_header(pid, shim.descriptor_addr)
    if not header.enabled:
        raise TargetNotShimmed(
            f"the shim in pid {pid} is inert: its UNREACHABLE_MALLOC_OPTIONS were rejected "
            "at start (see the process's stderr)"
        )
    command = _command_line(pid)
    with stop_world(
        pid,
        helper_tid=header.helper_tid,
        helper_cmd=header.helper_cmd,
        mode=snapshot,
        seccomp=status.seccomp,
    ) as capture:
        mem_pid = capture.mem_pid
        mappings = read_maps(mem_pid)
        maps_text = _read_maps_text(pid)
        registry = read_registry(mem_pid, shim.descriptor_addr)
        groups = Counter(zip(registry.allocs[1::2], registry.stack_ids, strict=True))
        stacks = read_stacks(mem_pid, shim.descriptor_addr, {sid for _, sid in groups if sid})
        total = registry.total_bytes
        count = registry.count
        max_frames = registry.max_frames
    if not _alive(pid):
        raise TargetNotFound(f"process {pid} exited during the heap dump")
    frames = Symbolizer(pid, mappings).symbolize(stacks)
    records = [
        HeapRecord(size=size, num_allocations=n, frames=frames.get(sid, []) if sid else [])
        for (size, sid), n in groups.items()
    ]
    records.sort(key=lambda r: (-r.size * r.num_allocations, -r.size, r.num_allocations))
    return HeapDump(
        pid=pid,
        command=command,
        total_memory=total,
        backtrace_size=max_frames,
        allocation_count=count,
        records=records,
        pause_ms=capture.pause_ms,
        maps=maps_text,
    )


def _read_maps_text(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
