"""A heap dump, independent of how it is printed or sent."""

from __future__ import annotations

from dataclasses import dataclass, field

from unreachable.symbolize.frame import Frame


@dataclass(slots=True)
class HeapRecord:
    size: int
    num_allocations: int
    frames: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class HeapDump:
    pid: int
    command: str
    total_memory: int
    backtrace_size: int  # the shim's backtrace=N (0: no backtraces recorded)
    allocation_count: int
    records: list[HeapRecord]  # largest size * num_allocations first
    pause_ms: float
    maps: str = ""  # /proc/PID/maps text at the dump
    fingerprint: str = ""  # the target's system (dump_format.system_fingerprint)
    symbol_note: str = ""  # frames left unsymbolized or files not read, and why
