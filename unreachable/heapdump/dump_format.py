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
import stat
from array import array
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import IO, Any

from unreachable.process.maps import Mapping, parse_maps

HEADER = "Android Native Heap Dump v"
# Input limits: every dump malloc_debug or this package writes is far inside
# them; a file past one is refused with the line that crossed it.
MAX_DUMP_BYTES = 2 << 30  # the file
MAX_LINE = 1 << 20  # one line, in bytes (bt_info lines of 256 frames are ~100 KiB)
MAX_FRAMES = 256  # per record, malloc_debug's largest backtrace=N
MAX_MAPS_LINES = 1 << 20  # /proc/PID/maps lines (vm.max_map_count is 65530 by default)
_U64 = (1 << 64) - 1
# Numbers are bounded in the patterns (20 decimal / 16 hex digits), so a
# 5,000-digit "size" is a malformed line, not a slow or failing int().
_RECORD = re.compile(
    r"^z\s+(\d{1,20})\s+sz\s+(\d{1,20})\s+num\s+(\d{1,20})\s+bt((?:\s+[0-9a-fA-F]{1,16})*)\s*$"
)
_INT = re.compile(r"^\d{1,20}$")
_MAPS_LINE = re.compile(
    r"^([0-9a-fA-F]{1,16})-([0-9a-fA-F]{1,16})\s+([-rwxsp]{4})\s+([0-9a-fA-F]{1,16})"
    r"\s+\S+\s+(\d{1,20})(?:\s+(.*?))?\s*$"
)
_BT_INFO = re.compile(
    r'\{"((?:[^"\\]|\\.)*)"\s+([0-9a-fA-F]{1,16})\s+"((?:[^"\\]|\\.)*)"\s+([0-9a-fA-F]{1,16})\}'
)


def system_fingerprint() -> str:
    """The "Build fingerprint" of this system, as the shim's signal and exit
    dumps write it (native/shim/debug_dump.c): uname's sysname/release/machine."""
    u = os.uname()
    return f"{u.sysname}/{u.release}/{u.machine}"


class DumpFormatError(ValueError):
    """A malformed dump; `line` is the 1-based line of the first error (0: the whole file)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


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
    """A parsed dump, stored compactly: a big dump's records are three arrays
    and its backtraces are kept once each, packed, whatever number of records
    share them (`records` builds DumpRecord objects on demand)."""

    version: str  # "1.0", "1.1", "1.2" ("" when the header line is missing)
    fingerprint: str | None = None
    total_memory: int | None = None  # as the header states it
    allocation_records: int | None = None
    backtrace_size: int | None = None
    maps_text: str = ""
    num_field_valid: bool = True  # False for v1.0: every num was read as 1
    sizes: array[int] = field(default_factory=lambda: array("Q"))  # per record
    nums: array[int] = field(default_factory=lambda: array("Q"))
    stack_ids: array[int] = field(default_factory=lambda: array("I"))
    zygotes: bytearray = field(default_factory=bytearray)
    stacks: list[bytes] = field(default_factory=list)  # stack id -> pcs, packed as u64
    bt_infos: dict[int, list[BtInfo]] = field(default_factory=dict)  # stack id -> bt_info
    warnings: list[str] = field(default_factory=list)  # e.g. a truncated file
    maps: list[Mapping] = field(default_factory=list)  # MAPS, parsed
    # The file's owner, from the descriptor read (None: not read from a
    # file): its writer, with whose rights its MAPS's files are opened.
    owner: int | None = None

    def stack(self, stack_id: int) -> tuple[int, ...]:
        return tuple(array("Q", self.stacks[stack_id]))

    def iter_records(self) -> Iterator[DumpRecord]:
        for i, sid in enumerate(self.stack_ids):
            yield DumpRecord(
                self.sizes[i],
                self.nums[i],
                self.stack(sid),
                self.zygotes[i],
                self.bt_infos.get(sid),
            )

    @property
    def records(self) -> list[DumpRecord]:
        return list(self.iter_records())

    @property
    def record_count(self) -> int:
        return len(self.stack_ids)

    @property
    def mappings(self) -> list[Mapping]:
        return self.maps

    @property
    def computed_total(self) -> int:
        return sum(size * num for size, num in zip(self.sizes, self.nums, strict=True))


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


class _Parser:
    """Reads a dump one line at a time (what parse_dump and read_dump share)."""

    def __init__(self) -> None:
        self.dump = HeapDumpFile(version="")
        self._in_maps = False
        self._maps: list[str] = []
        self._seen_maps = self._seen_end = self._seen_content = False
        self._stack_index: dict[bytes, int] = {}
        self._last_stack = -1
        self._bad_maps = self._first_bad_map = 0

    def line(self, line: str, lineno: int) -> None:
        dump = self.dump
        if self._in_maps:
            if line.strip() == "END":
                self._in_maps = False
                self._seen_end = True
            elif len(self._maps) >= MAX_MAPS_LINES:
                raise DumpFormatError(f"MAPS has more than {MAX_MAPS_LINES} lines", lineno)
            else:
                self._maps.append(line)
                if line.strip():
                    self._mapping(line, lineno)
            return
        stripped = line.strip()
        if not stripped:
            return
        if stripped.startswith(HEADER):
            dump.version = stripped[len(HEADER) :].strip()[:32]
            dump.num_field_valid = dump.version != "1.0"
            self._seen_content = True
        elif stripped.startswith("Build fingerprint:"):
            value = stripped.split(":", 1)[1].strip()
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1]
            dump.fingerprint = value[:4096]
        elif stripped.startswith("Total memory:"):
            dump.total_memory = _int_field(stripped, lineno)
        elif stripped.startswith("Allocation records:"):
            dump.allocation_records = _int_field(stripped, lineno)
        elif stripped.startswith("Backtrace size:"):
            dump.backtrace_size = _int_field(stripped, lineno)
        elif stripped.startswith("z "):
            self._record(stripped, lineno)
        elif stripped.startswith("bt_info"):
            if self._last_stack < 0:
                raise DumpFormatError("bt_info before any record", lineno)
            if self._last_stack not in dump.bt_infos:
                dump.bt_infos[self._last_stack] = [
                    BtInfo(_unquote(a), int(b, 16), _unquote(c), int(d, 16))
                    for a, b, c, d in _BT_INFO.findall(stripped)
                ]
        elif stripped == "MAPS":
            if self._seen_maps:
                raise DumpFormatError("a second MAPS section", lineno)
            self._in_maps = self._seen_maps = self._seen_content = True
        # Anything else (comments, extra headers of other writers) is ignored.

    def _mapping(self, line: str, lineno: int) -> None:
        m = _MAPS_LINE.match(line)
        if m is None:  # kept in maps_text, useless to symbolize with
            self._bad_maps += 1
            if self._bad_maps == 1:
                self._first_bad_map = lineno
            return
        start, end, perms, offset, inode, path = m.groups()
        self.dump.maps.append(
            Mapping(int(start, 16), int(end, 16), perms, int(offset, 16), int(inode), path or "")
        )

    def _record(self, text: str, lineno: int) -> None:
        m = _RECORD.match(text)
        if m is None:
            raise DumpFormatError(f"not an allocation record: {_excerpt(text)}", lineno)
        zygote, size, num = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if size > _U64 or num > _U64 or zygote > 1:
            raise DumpFormatError(f"number out of range: {_excerpt(text)}", lineno)
        words = m.group(4).split()
        if len(words) > MAX_FRAMES:
            raise DumpFormatError(
                f"{len(words)} frames in one record (at most {MAX_FRAMES})", lineno
            )
        packed = array("Q", [int(x, 16) for x in words]).tobytes()
        sid = self._stack_index.get(packed)
        if sid is None:
            sid = self._stack_index[packed] = len(self.dump.stacks)
            self.dump.stacks.append(packed)
        dump = self.dump
        dump.sizes.append(size)
        dump.nums.append(num if dump.num_field_valid else 1)
        dump.stack_ids.append(sid)
        dump.zygotes.append(zygote)
        self._last_stack = sid
        self._seen_content = True

    def finish(self, lineno: int) -> HeapDumpFile:
        dump = self.dump
        if not self._seen_content:
            raise DumpFormatError("not an Android native heap dump (no header, record or MAPS)")
        self._stack_index.clear()
        dump.maps_text = "\n".join(self._maps) + ("\n" if self._maps else "")
        self._maps.clear()
        if not self._seen_maps:
            dump.warnings.append(
                f"no MAPS section after line {lineno}: the dump is truncated; "
                "frames cannot be symbolized"
            )
        elif not self._seen_end:
            dump.warnings.append(f"no END line after line {lineno}: the dump is truncated")
        if self._bad_maps:
            dump.warnings.append(
                f"{self._bad_maps} MAPS lines are not /proc/PID/maps lines, the first"
                f" at line {self._first_bad_map}; they are ignored"
            )
        if (
            dump.allocation_records is not None
            and dump.allocation_records != dump.record_count
            and self._seen_end
        ):
            dump.warnings.append(
                f"the header says {dump.allocation_records} allocation records, "
                f"the file has {dump.record_count}"
            )
        return dump


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def parse_dump(text: str) -> HeapDumpFile:
    """Parse a heap dump (DumpFormatError if it has neither a header nor any
    record, or a malformed line)."""
    parser = _Parser()
    lineno = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        parser.line(raw.rstrip("\r"), lineno)
    return parser.finish(lineno)


def _int_field(line: str, lineno: int) -> int:
    value = line.split(":", 1)[1].strip()
    if not _INT.match(value) or int(value) > _U64:
        raise DumpFormatError(f"bad number: {_excerpt(line)}", lineno)
    return int(value)


def open_regular(path: str, limit: int) -> IO[bytes]:
    """`path` opened for reading if it is a regular file of at most `limit`
    bytes (OSError otherwise). Opened non-blocking, so a FIFO is refused
    instead of waiting for a writer; a device is refused before any read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        if st.st_size > limit:
            raise OSError(f"{st.st_size} bytes, more than the {limit} byte limit")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def iter_lines(f: IO[bytes]) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, each at most MAX_LINE bytes (DumpFormatError)."""
    lineno = 0
    while True:
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE:
            raise DumpFormatError(f"line longer than {MAX_LINE} bytes", lineno)
        yield lineno, raw.decode("utf-8", errors="replace").rstrip("\r\n")


def parse_dump_file(f: IO[bytes]) -> HeapDumpFile:
    """Parse an open dump file from its current position, a line at a time."""
    parser = _Parser()
    lineno = 0
    for lineno, line in iter_lines(f):
        parser.line(line, lineno)
    dump = parser.finish(lineno)
    try:
        dump.owner = os.fstat(f.fileno()).st_uid
    except (OSError, ValueError):  # io.UnsupportedOperation: not a file
        pass
    return dump


def read_dump(path: str) -> HeapDumpFile:
    """Parse the dump file at `path`, a line at a time (OSError, DumpFormatError)."""
    with open_regular(path, MAX_DUMP_BYTES) as f:
        return parse_dump_file(f)


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
