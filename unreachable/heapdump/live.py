"""Capture a target briefly and group its live allocations by (size, backtrace).

The same capture as a scan (capture/strategies.py, then the shim's registry), without
the sweep: the target is released as soon as the registry and the stacks
are copied (at once in fork mode), and symbolization runs afterwards.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from unreachable.allocations.registry import read_registry
from unreachable.capture.stop_world import CaptureRequest, Strategy
from unreachable.capture.strategies import take_snapshot
from unreachable.capture.target import open_target, still_running
from unreachable.errors import TargetNotFound
from unreachable.heapdump.dump_format import system_fingerprint
from unreachable.heapdump.model import HeapDump, HeapRecord
from unreachable.process.maps import read_maps
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks
from unreachable.symbolize.unloaded import read_loaded_objects


def heap_dump(
    pid: int,
    # Not "concurrent": a dump reads the registry only, which any stop holds.
    snapshot: Strategy | Literal["auto"] = "auto",
    symbol_budget: float | None | bool = True,
) -> HeapDump:
    target = open_target(pid)
    # Only the registry is read: "auto" never copies the whole heap for it,
    # and stays stopped when no fork can be had.
    request = CaptureRequest(
        "fork" if snapshot == "auto" else snapshot,
        must={"fork": "snapshot failed: ", "copy": "no copy snapshot: "}.get(snapshot, ""),
        unread_filter_ok=snapshot == "fork",
        roots=False,
    )
    with take_snapshot(target, request) as capture:
        memory = capture.memory
        mappings = capture.mappings or read_maps(capture.mem_pid)
        maps_text = _read_maps_text(target.pid)
        registry = read_registry(memory, target.shim.descriptor_addr)
        groups = Counter(zip(registry.allocs[1::2], registry.stack_ids, strict=True))
        stacks = read_stacks(memory, target.shim.descriptor_addr, {sid for _, sid in groups if sid})
        loaded = read_loaded_objects(memory, target.shim.descriptor_addr) if stacks else []
        total = registry.total_bytes
        count = registry.count
        max_frames = registry.max_frames
    if not still_running(target.pid):
        raise TargetNotFound(f"process {pid} exited during the heap dump")
    symbolizer = Symbolizer(target.pid, mappings, unloaded=loaded, budget=symbol_budget)
    frames = symbolizer.symbolize(stacks)
    records = [
        HeapRecord(size=size, num_allocations=n, frames=frames.get(sid, []) if sid else [])
        for (size, sid), n in groups.items()
    ]
    records.sort(key=lambda r: (-r.size * r.num_allocations, -r.size, r.num_allocations))
    return HeapDump(
        pid=pid,
        command=target.command,
        total_memory=total,
        backtrace_size=max_frames,
        allocation_count=count,
        records=records,
        pause_ms=capture.pause_ms,
        maps=maps_text,
        fingerprint=system_fingerprint(),
        symbol_note=symbolizer.note,
    )


def _read_maps_text(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return ""
