"""pprof profiles (gzip'ed profile.proto) of leak reports and heap dumps.

pprof, Pyroscope, Parca and speedscope read them. The message is encoded by
hand (the schema is small and stable, github.com/google/pprof
proto/profile.proto), which needs no generated module:

    Profile  1 sample_type (ValueType)  2 sample  3 mapping  4 location
             5 function  6 string_table  9 time_nanos  11 period_type
             12 period  13 comment  14 default_sample_type
    ValueType 1 type 2 unit (string indexes)
    Sample   1 location_id (packed, leaf first)  2 value (packed)  3 label
    Label    1 key  2 str  3 num  4 num_unit
    Mapping  1 id 2 memory_start 3 memory_limit 4 file_offset 5 filename
             6 build_id 7 has_functions 8 has_filenames 9 has_line_numbers
    Location 1 id 2 mapping_id 3 address 4 line
    Line     1 function_id 2 line
    Function 1 id 2 name 3 system_name 4 filename

Leak reports carry ``leak_objects/count`` and ``leak_space/bytes``; heap
dumps ``inuse_objects/count`` and ``inuse_space/bytes``. Every sample has a
numeric ``bytes`` label (allocation size) when all its allocations share one.
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from unreachable.report.collapsed import Sample, heap_samples, report_samples
from unreachable.symbolize.elf_file import Load
from unreachable.symbolize.frame import Frame

LEAK_TYPES = (("leak_objects", "count"), ("leak_space", "bytes"))
INUSE_TYPES = (("inuse_objects", "count"), ("inuse_space", "bytes"))


# -- protobuf wire format ---------------------------------------------------------------
def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_varint(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value) if value else b""


def _field_bytes(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _field_packed(num: int, values: Iterable[int]) -> bytes:
    body = b"".join(_varint(v) for v in values)
    return _field_bytes(num, body) if body else b""


class _Strings:
    def __init__(self) -> None:
        self.table = [""]
        self.index = {"": 0}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


class _Tables:
    """What samples refer to by id: locations (encoded as first met), the
    mappings and functions they lie in, and the string table."""

    def __init__(self) -> None:
        self.strings = _Strings()
        self.functions: dict[tuple[str, str], int] = {}
        self.locations: dict[tuple[int, str], int] = {}
        self.mappings: dict[str, dict[str, int]] = {}
        self.location_msgs: list[bytes] = []

    def location(self, f: Frame) -> int:
        key = (f.pc, f.map)
        loc_id = self.locations.get(key)
        if loc_id is not None:
            return loc_id
        loc_id = self.locations[key] = len(self.locations) + 1
        loc = _field_varint(1, loc_id) + _field_varint(2, self._mapping(f))
        loc += _field_varint(3, f.pc)
        if f.function:
            line = _field_varint(1, self._function(f)) + _field_varint(2, f.line)
            loc += _field_bytes(4, line)
        self.location_msgs.append(_field_bytes(4, loc))
        return loc_id

    def _mapping(self, f: Frame) -> int:
        """The id of the frame's file (0: none); its span grows to hold the frame."""
        if not f.map:
            return 0
        m = self.mappings.setdefault(
            f.map,
            {"id": len(self.mappings) + 1, "lo": f.pc, "hi": f.pc + 1,
             "bias": f.pc - f.rel_pc, "fn": 0, "file": 0},
        )  # fmt: skip
        m["lo"], m["hi"] = min(m["lo"], f.pc), max(m["hi"], f.pc + 1)
        m["fn"] |= bool(f.function)
        m["file"] |= bool(f.file)
        return m["id"]

    def _function(self, f: Frame) -> int:
        key = (f.function, f.file)
        fn_id = self.functions.get(key)
        if fn_id is None:
            fn_id = self.functions[key] = len(self.functions) + 1
        return fn_id


# -- profile ----------------------------------------------------------------------------
def samples_to_pprof(
    samples: Iterable[Sample | tuple[Sequence[Frame], int, int, int]],
    sample_types: Sequence[tuple[str, str]] = LEAK_TYPES,
    *,
    build_ids: dict[str, str] | None = None,
    segments: Mapping[str, Sequence[Load]] | None = None,
    comments: Sequence[str] = (),
    time_nanos: int | None = None,
    compress: bool = True,
) -> bytes:
    """samples: (frames innermost first, count, bytes[, allocation size for the label]).
    segments: each mapped file's PT_LOADs, for its mapping's real bounds."""
    # The string table is written last but filled in field order, so the
    # same input always gives the same bytes.
    tables = _Tables()
    body = bytearray()
    for st_type, st_unit in sample_types:
        body += _field_bytes(1, _value_type(tables.strings, st_type, st_unit))
    for sample in samples:
        body += _field_bytes(2, _sample_msg(tables, sample, len(sample_types)))
    body += _mapping_msgs(tables, build_ids or {}, segments or {})
    for loc in tables.location_msgs:
        body += loc
    body += _function_msgs(tables)
    tail = _profile_fields(tables.strings, sample_types, comments, time_nanos)
    for s in tables.strings.table:
        body += _field_bytes(6, s.encode())
    body += tail
    data = bytes(body)
    return gzip.compress(data, mtime=0) if compress else data


def _value_type(strings: _Strings, type_: str, unit: str) -> bytes:
    return _field_varint(1, strings(type_)) + _field_varint(2, strings(unit))


def _sample_msg(
    tables: _Tables, sample: Sample | tuple[Sequence[Frame], int, int, int], n_types: int
) -> bytes:
    frames, count, size = sample[0], sample[1], sample[2]
    loc_ids = [tables.location(f) for f in frames]
    values = [count, size][:n_types]
    msg = _field_packed(1, loc_ids) + _field_packed(2, values)
    alloc_size = sample[3] if len(sample) > 3 else (size // count if count else 0)
    if alloc_size and (len(sample) > 3 or count == 1):
        strings = tables.strings
        label = _field_varint(1, strings("bytes")) + _field_varint(3, alloc_size)
        label += _field_varint(4, strings("bytes"))
        msg += _field_bytes(3, label)
    return msg


def _mapping_msgs(
    tables: _Tables, build_ids: dict[str, str], segments: Mapping[str, Sequence[Load]]
) -> bytes:
    strings = tables.strings
    out = bytearray()
    for path, m in tables.mappings.items():
        lo, hi, offset = _bounds(m, segments.get(path, ()))
        msg = _field_varint(1, m["id"]) + _field_varint(2, lo) + _field_varint(3, hi)
        msg += _field_varint(4, offset)
        msg += _field_varint(5, strings(path))
        if build_ids.get(path):
            msg += _field_varint(6, strings(build_ids[path]))
        msg += _field_varint(7, m["fn"]) + _field_varint(8, m["file"])
        msg += _field_varint(9, m["file"])
        out += _field_bytes(3, msg)
    return bytes(out)


def _function_msgs(tables: _Tables) -> bytes:
    strings = tables.strings
    out = bytearray()
    for (name, file), fn_id in tables.functions.items():
        msg = _field_varint(1, fn_id) + _field_varint(2, strings(name))
        msg += _field_varint(3, strings(name)) + _field_varint(4, strings(file))
        out += _field_bytes(5, msg)
    return bytes(out)


def _profile_fields(
    strings: _Strings,
    sample_types: Sequence[tuple[str, str]],
    comments: Sequence[str],
    time_nanos: int | None,
) -> bytes:
    """time_nanos, period type and period, comments, default sample type."""
    comment_ids = [strings(c) for c in comments]
    period_type = _value_type(strings, *sample_types[-1])
    tail = _field_varint(9, time_nanos if time_nanos is not None else time.time_ns())
    tail += _field_bytes(11, period_type) + _field_varint(12, 1)
    tail += _field_packed(13, comment_ids)
    tail += _field_varint(14, strings(sample_types[-1][0]))
    return tail


def _bounds(m: dict[str, int], loads: Sequence[Load]) -> tuple[int, int, int]:
    """The mapping's start, limit and file offset: those of the PT_LOADs that
    hold its frames, page-aligned as the loader maps them; without the file,
    the span of its frames' pcs."""
    bias = m["bias"]
    held = [
        seg
        for seg in loads
        if seg.vaddr < m["hi"] - bias and m["lo"] - bias < seg.vaddr + seg.memsz
    ]
    if not held:
        return m["lo"], m["hi"], max(m["lo"] - bias, 0)
    page = os.sysconf("SC_PAGE_SIZE")
    start = min(bias + seg.vaddr for seg in held)
    limit = max(bias + seg.vaddr + seg.memsz for seg in held)
    first = min(held, key=lambda seg: seg.vaddr)
    return start & ~(page - 1), -(-limit // page) * page, first.offset & ~(page - 1)


def _elf_facts(frames: Iterable[Frame]) -> tuple[dict[str, str], dict[str, list[Load]]]:
    """Build-ids and PT_LOADs of the files the frames lie in."""
    from unreachable.symbolize.elf_file import NotElf, read_elf

    build_ids: dict[str, str] = {}
    segments: dict[str, list[Load]] = {}
    for f in frames:
        if f.map.startswith("/") and f.map not in build_ids:
            try:
                image = read_elf(f.map)
            except (OSError, NotElf, ValueError):
                build_ids[f.map] = ""
                continue
            build_ids[f.map], segments[f.map] = image.build_id, image.loads
    return build_ids, segments


def report_to_pprof(report: Any) -> bytes:
    """A ScanReport (unreachable.model.report) as a gzip'ed pprof profile."""
    samples = report_samples(report)
    build_ids, segments = _elf_facts(f for s in samples for f in s[0])
    return samples_to_pprof(
        samples,
        LEAK_TYPES,
        build_ids=build_ids,
        segments=segments,
        comments=[
            f"unreachable-cli scan {report.pid}: {report.command}",
            f"{report.leak_bytes} bytes in {report.leak_count} unreachable allocations",
        ],
    )


def heapdump_to_pprof(dump: Any, comments: Sequence[str] = ()) -> bytes:
    """Heap records (.records of size, num_allocations, frames) as a pprof profile."""
    samples = [
        (f, n, b, r.size)
        for (f, n, b), r in zip(heap_samples(dump.records), dump.records, strict=True)
    ]
    build_ids, segments = _elf_facts(f for s in samples for f in s[0])
    return samples_to_pprof(
        samples,
        INUSE_TYPES,
        build_ids=build_ids,
        segments=segments,
        comments=comments,
    )
