"""malloc_debug's "Android Native Heap Dump" text format: read v1.0-v1.2, write v1.2.

Layout (seed 000/001 "Backtrace Heap Dump Format"; bionic's write_dump and
PointerData::DumpLiveToFile)::

    Android Native Heap Dump v1.2
    <blank>
    Build fingerprint: '<fingerprint>'          (v1.2 only)
    <blank>
    Total memory: N                             (sum of size * num)
    Allocation records: N
    Backtrace size: N
    <blank>
    z 0  sz      400  num    1  bt a230 b500    (one line per record)
      bt_info {"/lib/libc.so" 2a0 "abort" 24} {"" 510 "" 0}   (backtrace_full only)
    MAPS
    <the process's /proc/PID/maps, verbatim>
    END

Version differences: v1.0's NUM_ALLOCATIONS is unreliable and is read as 1;
v1.0 and v1.1 zero-pad the frames (``0000a230``), v1.2 does not and adds the
fingerprint line and the optional bt_info lines.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import IO, Any

from unreachable.process.maps import Mapping, parse_maps

HEADER = "Android Native Heap Dump v"
_RECORD = re.compile(r"^z\s+(\d+)\s+sz\s+(\d+)\s+num\s+(\d+)\s+bt((?:\s+[0-9a-fA-F]+)*)\s*$")
_BT_INFO = re.compile(
    r'\{"((?:[^"\\]|\\.)*)"\s+([0-9a-fA-F]+)\s+"((?:[^"\\]|\\.)*)"\s+([0-9a-fA-F]+)\}'
)


def system_fingerprint() -> str:
    """The "Build fingerprint" of this system, as the shim's signal and exit
    dumps write it (native/shim/debug.c): uname's sysname/release/machine."""
    u = os.uname()
    return f"{u.sysname}/{u.release}/{u.machine}"


class DumpFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class BtInfo:
    map: str
    rel_pc: int
    function: str
    offset: int


@dataclass(slots=True)
class DumpRecord:
    size: int
    num_allocations: int
    pcs: tuple[int, ...]
    zygote: int = 0
    bt_info: list[BtInfo] | None = None

    @property
    def total(self) -> int:
        return self.size * self.num_allocations


@dataclass(slots=True)
class HeapDumpFile:
    version: str  # "1.0", "1.1", "1.2" ("" when the header line is missing)
    fingerprint: str | None = None
    total_memory: int | None = None  # as the header states it
    allocation_records: int | None = None
    backtrace_size: int | None = None
    records: list[DumpRecord] = field(default_factory=list)
    maps_text: str = ""
    num_field_valid: bool = True  # False for v1.0: every num was read as 1

    @property
    def mappings(self) -> list[Mapping]:
        return parse_maps(self.maps_text)

    @property
    def computed_total(self) -> int:
        return sum(r.total for r in self.records)


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_dump(text: str) -> HeapDumpFile:
    """Parse a heap dump (DumpFormatError if it has neither a header nor any record)."""
    dump = HeapDumpFile(version="")
    in_maps = False
    maps: list[str] = []
    seen_content = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if in_maps:
            if line.strip() == "END":
                in_maps = False
                continue
            maps.append(line)
            continue
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(HEADER):
            dump.version = stripped[len(HEADER) :].strip()
            dump.num_field_valid = dump.version != "1.0"
            seen_content = True
        elif stripped.startswith("Build fingerprint:"):
            value = stripped.split(":", 1)[1].strip()
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1]
            dump.fingerprint = value
        elif stripped.startswith("Total memory:"):
            dump.total_memory = _int_field(stripped, lineno)
        elif stripped.startswith("Allocation records:"):
            dump.allocation_records = _int_field(stripped, lineno)
        elif stripped.startswith("Backtrace size:"):
            dump.backtrace_size = _int_field(stripped, lineno)
        elif stripped.startswith("z "):
            m = _RECORD.match(stripped)
            if m is None:
                raise DumpFormatError(f"line {lineno}: not an allocation record: {stripped!r}")
            num = int(m.group(3)) if dump.num_field_valid else 1
            pcs = tuple(int(x, 16) for x in m.group(4).split())
            dump.records.append(DumpRecord(int(m.group(2)), num, pcs, int(m.group(1))))
            seen_content = True
        elif stripped.startswith("bt_info"):
            if not dump.records:
                raise DumpFormatError(f"line {lineno}: bt_info before any record")
            dump.records[-1].bt_info = [
                BtInfo(_unquote(a), int(b, 16), _unquote(c), int(d, 16))
                for a, b, c, d in _BT_INFO.findall(stripped)
            ]
        elif stripped == "MAPS":
            in_maps = True
            seen_content = True
        # Anything else (comments, extra headers of other writers) is ignored.
    if not seen_content:
        raise DumpFormatError("not an Android native heap dump (no header, record or MAPS)")
    dump.maps_text = "\n".join(maps) + ("\n" if maps else "")
    return dump


def _int_field(line: str, lineno: int) -> int:
    try:
        return int(line.split(":", 1)[1].strip())
    except ValueError:
        raise DumpFormatError(f"line {lineno}: bad number: {line!r}") from None


def read_dump(path: str) -> HeapDumpFile:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_dump(f.read())


# -- writing ----------------------------------------------------------------------------


def _bt_info_line(infos: Sequence[BtInfo]) -> str:
    parts = []
    for i in infos:
        if i.function:
            parts.append(f' {{"{i.map}" {i.rel_pc:x} "{i.function}" {i.offset:x}}}')
        else:
            parts.append(f' {{"{i.map}" {i.rel_pc:x} "" 0}}')
    return "  bt_info" + "".join(parts)


def _trim(pcs: Iterable[int]) -> tuple[int, ...]:
    out = []
    for pc in pcs:
        if pc == 0:  # bionic stops at the first zero frame
            break
        out.append(pc)
    return tuple(out)


def write_dump(
    records: Iterable[tuple[int, int, Sequence[int]]],
    maps_text: str,
    backtrace_size: int,
    fingerprint: str,
    fp: IO[str],
    *,
    bt_info: MappingABC[tuple[int, ...], Sequence[BtInfo]] | bool = False,
    pid: int | None = None,
) -> None:
    """Write records (size, num_allocations, pcs) as "Android Native Heap Dump v1.2".

    Records with the same size and backtrace are merged; then, as bionic sorts
    them: size descending, records with a backtrace first, deeper backtraces
    first (then by pcs, for a stable output). There are no zygote children on
    Linux, so every record is ``z 0``.

    bt_info (malloc_debug's backtrace_full): False for none; True to symbolize
    the pcs here against maps_text (through /proc/PID/root when pid is given);
    or a mapping pcs -> one BtInfo per frame, from a symbolization done earlier.
    """
    merged: dict[tuple[int, tuple[int, ...]], int] = {}
    for size, num, pcs in records:
        key = (int(size), _trim(pcs))
        merged[key] = merged.get(key, 0) + int(num)
    ordered = sorted(
        merged.items(), key=lambda kv: (-kv[0][0], not kv[0][1], -len(kv[0][1]), kv[0][1])
    )

    infos: MappingABC[tuple[int, ...], Sequence[BtInfo]] = {}
    if bt_info is True:
        infos = bt_info_for([pcs for (_, pcs), _ in ordered if pcs], parse_maps(maps_text), pid)
    elif bt_info:
        infos = bt_info

    total = sum(size * num for (size, _), num in ordered)
    out = [
        "Android Native Heap Dump v1.2",
        "",
        f"Build fingerprint: '{fingerprint}'",
        "",
        f"Total memory: {total}",
        f"Allocation records: {len(ordered)}",
        f"Backtrace size: {backtrace_size}",
        "",
    ]
    for (size, pcs), num in ordered:
        out.append(f"z 0  sz {size:8d}  num    {num}  bt" + "".join(f" {pc:x}" for pc in pcs))
        if pcs and pcs in infos:
            out.append(_bt_info_line(infos[pcs]))
    fp.write("\n".join(out) + "\n")
    fp.write("MAPS\n")
    fp.write(maps_text if not maps_text or maps_text.endswith("\n") else maps_text + "\n")
    fp.write("END\n")


def frames_to_bt_info(frames: Sequence[Any]) -> list[BtInfo]:
    """bt_info elements of already symbolized frames (unreachable.symbolize.frames.Frame)."""
    return [BtInfo(f.map, f.rel_pc, f.function, f.offset if f.function else 0) for f in frames]


def bt_info_for(
    stacks: Iterable[tuple[int, ...]], mappings: list[Mapping], pid: int | None = None
) -> dict[tuple[int, ...], list[BtInfo]]:
    """Symbolize backtraces into bt_info elements (map, relative pc, function, offset)."""
    from unreachable.symbolize.frames import Symbolizer

    unique = {pcs: i for i, pcs in enumerate(dict.fromkeys(stacks))}
    frames = Symbolizer(pid, mappings).symbolize({i: pcs for pcs, i in unique.items()})
    return {pcs: frames_to_bt_info(frames[i]) for pcs, i in unique.items()}
