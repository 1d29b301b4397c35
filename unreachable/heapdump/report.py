"""A heap dump as JSON, and as text in malloc_debug's dump-heap format."""

from __future__ import annotations

import io
import json
from typing import Any

from unreachable.heapdump.dump_format import BtInfo, write_dump
from unreachable.heapdump.model import HeapDump
from unreachable.symbolize.frame import frame_to_dict


def dump_to_dict(dump: HeapDump) -> dict[str, Any]:
    return {
        "pid": dump.pid,
        "command": dump.command,
        "total_memory": dump.total_memory,
        "backtrace_size": dump.backtrace_size,
        "allocation_count": dump.allocation_count,
        "pause_ms": round(dump.pause_ms, 3),
        "records": [
            {
                "size": r.size,
                "num_allocations": r.num_allocations,
                "frames": [frame_to_dict(f) for f in r.frames],
            }
            for r in dump.records
        ],
        "maps": dump.maps,
        "fingerprint": dump.fingerprint,
        "symbol_note": dump.symbol_note,
    }


def format_json(dump: HeapDump) -> str:
    return json.dumps(dump_to_dict(dump), indent=2) + "\n"


def format_text(dump: HeapDump) -> str:
    """An "Android Native Heap Dump v1.2" file (dump_format.write_dump), bt_info included.

    The file reads back with dump_format.parse_dump and the heap dump viewer.
    """
    records = [(r.size, r.num_allocations, [f.pc for f in r.frames]) for r in dump.records]
    bt_info = {
        tuple(f.pc for f in r.frames): [
            BtInfo(f.map, f.rel_pc, f.function, f.offset if f.function else 0) for f in r.frames
        ]
        for r in dump.records
        if r.frames
    }
    out = io.StringIO()
    write_dump(records, dump.maps, dump.backtrace_size, dump.fingerprint, out, bt_info=bt_info)
    return out.getvalue()
