"""What grew between two snapshots (seed 004's workflow: dump, exercise, dump, diff).

A snapshot is a heap dump file (Android Native Heap Dump v1.0-v1.2), the
JSON of ``unreachable-cli scan --json``, or the JSON of
``unreachable-cli heapdump --json``. Both sides are reduced to groups per
backtrace, keyed by (map, relative pc) of every frame, so two snapshots of
different runs of the same binaries match even though ASLR moved them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from unreachable.model.report import LEAK_COUNTS, export_weights
from unreachable.report.collapsed import UNLISTED_FRAME
from unreachable.symbolize.frame import Frame, frame_to_dict

FrameKey = tuple[str, int]
StackKey = tuple[FrameKey, ...]


class SnapshotError(ValueError):
    pass


@dataclass(slots=True)
class Group:
    frames: list[Frame]
    count: int = 0
    bytes: int = 0


@dataclass(slots=True)
class Snapshot:
    source: str
    kind: str  # "heapdump", "scan" or "heapdump-json"
    groups: dict[StackKey, Group] = field(default_factory=dict)
    note: str = ""  # what symbolization left out (heap dumps)
    warnings: list[str] = field(default_factory=list)  # e.g. a truncated dump
    # One (map, rel_pc) tuple per distinct frame, shared by every key holding
    # it: a big dump's keys then cost a pointer a frame.
    _frame_keys: dict[FrameKey, FrameKey] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(g.count for g in self.groups.values())

    @property
    def bytes(self) -> int:
        return sum(g.bytes for g in self.groups.values())

    def add(self, frames: list[Frame], count: int, size: int) -> None:
        known = self._frame_keys
        key = tuple(known.setdefault(k, k) for k in stack_key(frames))
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group(frames)
        g.count += count
        g.bytes += size


@dataclass(frozen=True, slots=True)
class DiffRow:
    frames: list[Frame]
    before_count: int
    before_bytes: int
    after_count: int
    after_bytes: int

    @property
    def delta_count(self) -> int:
        return self.after_count - self.before_count

    @property
    def delta_bytes(self) -> int:
        return self.after_bytes - self.before_bytes

    @property
    def grew(self) -> bool:
        return self.delta_bytes > 0 or (self.delta_bytes == 0 and self.delta_count > 0)


def stack_key(frames: Iterable[Frame]) -> StackKey:
    return tuple((f.map, f.rel_pc) if f.map else ("", f.pc) for f in frames)


# -- loading ----------------------------------------------------------------------------
# A JSON report is read whole; a heap dump a line at a time
# (unreachable.heapdump.dump_format's limits).
MAX_JSON_BYTES = 128 << 20
_U64 = (1 << 64) - 1


class _BadEntry(Exception):
    pass


def _num(d: dict[str, Any], key: str, default: int = 0) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64:
        raise _BadEntry(f"{key!r} is not a number from 0 to 2^64-1")
    return value


def _str(d: dict[str, Any], key: str) -> str:
    value = d.get(key, "")
    if not isinstance(value, str):
        raise _BadEntry(f"{key!r} is not a string")
    return value


def _entries(value: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = value[key]
    for item in items:
        if not isinstance(item, dict):
            raise _BadEntry(f"an element of {key!r} is not an object")
    return items


def _frame(d: Any) -> Frame:
    if not isinstance(d, dict):
        raise _BadEntry("a frame is not an object")
    return Frame(
        _num(d, "pc"),
        _str(d, "map"),
        _num(d, "rel_pc"),
        _str(d, "function"),
        _num(d, "offset"),
        _str(d, "file"),
        _num(d, "line"),
    )


def _frames(d: dict[str, Any], key: str) -> list[Frame]:
    frames = d.get(key, [])
    if not isinstance(frames, list):
        raise _BadEntry(f"{key!r} is not a list")
    return [_frame(f) for f in frames]


def snapshot_from_json(value: Any, source: str) -> Snapshot:
    try:
        return _snapshot_from_json(value, source)
    except _BadEntry as e:
        raise SnapshotError(f"{source}: not a valid report: {e}") from None


def _snapshot_from_json(value: Any, source: str) -> Snapshot:
    if isinstance(value, dict) and isinstance(value.get("leaks"), list):
        # Weighed as the pprof and collapsed exports do: the totals are the
        # report's, folded blocks under their root's stack.
        snap = Snapshot(source, "scan")
        leaks = _entries(value, "leaks")
        counts = [{k: _num(leak, k) for k in LEAK_COUNTS} for leak in leaks]
        weights = export_weights(
            counts,
            _num(value, "leak_count", sum(1 + c["similar_count"] for c in counts)),
            _num(value, "leak_bytes", sum(c["size"] + c["similar_size"] for c in counts)),
        )
        for leak, (count, size) in zip(leaks, weights.entries, strict=True):
            snap.add(_frames(leak, "backtrace"), count, size)
        if weights.unlisted_count or weights.unlisted_bytes:
            snap.add([UNLISTED_FRAME], weights.unlisted_count, weights.unlisted_bytes)
        return snap
    if isinstance(value, dict) and isinstance(value.get("records"), list):
        snap = Snapshot(source, "heapdump-json")
        for rec in _entries(value, "records"):
            frames = _frames(rec, "frames")
            num = _num(rec, "num_allocations", 1)
            snap.add(frames, num, _num(rec, "size") * num)
        return snap
    raise SnapshotError(f"{source}: JSON is neither a scan report nor a heap dump")


def snapshot_from_dump(dump: Any, source: str, pid: int | None = None) -> Snapshot:
    """A parsed heap dump (unreachable.heapdump.dump_format.HeapDumpFile), symbolized."""
    from unreachable.heapdump.viewer import SymbolizedDump

    sym = SymbolizedDump(dump, pid)
    snap = Snapshot(source, "heapdump", note=sym.note, warnings=list(dump.warnings))
    for sid in range(len(dump.stacks)):
        snap.add(sym.frames(sid), sym.counts[sid], sym.bytes[sid])
    return snap


def snapshot_from_dump_text(text: str, source: str, pid: int | None = None) -> Snapshot:
    from unreachable.heapdump.dump_format import parse_dump

    return snapshot_from_dump(parse_dump(text), source, pid)


def load_snapshot(path: str) -> Snapshot:
    """A snapshot from a file (OSError; SnapshotError when it is neither format,
    naming the file and, for a malformed dump or JSON, the line)."""
    from unreachable.heapdump.dump_format import (
        MAX_DUMP_BYTES,
        DumpFormatError,
        open_regular,
        parse_dump_file,
    )

    with open_regular(path, MAX_DUMP_BYTES) as f:
        head = f.read(4096)
        if head.lstrip()[:1] in (b"{", b"["):
            rest = f.read(MAX_JSON_BYTES + 1 - len(head))
            if len(head) + len(rest) > MAX_JSON_BYTES:
                raise SnapshotError(f"{path}: JSON larger than {MAX_JSON_BYTES} bytes")
            try:
                value = json.loads(head + rest)
            except RecursionError:
                raise SnapshotError(f"{path}: JSON nested too deeply") from None
            except json.JSONDecodeError as e:
                raise SnapshotError(f"{path}:{e.lineno}: bad JSON: {e.msg}") from None
            except ValueError as e:  # an integer of more than 4300 digits
                raise SnapshotError(f"{path}: bad JSON: {str(e).split(':')[0]}") from None
            return snapshot_from_json(value, path)
        f.seek(0)
        try:
            dump = parse_dump_file(f)
        except DumpFormatError as e:
            where = f"{path}:{e.line}" if e.line else path
            raise SnapshotError(f"{where}: {e.message}") from None
    return snapshot_from_dump(dump, path)


# -- diffing ----------------------------------------------------------------------------
def diff_snapshots(old: Snapshot, new: Snapshot, include_all: bool = False) -> list[DiffRow]:
    """Per backtrace, before and after; only what grew unless include_all.

    Sorted by bytes grown (then allocations grown), largest first.
    """
    rows = []
    for key in dict.fromkeys([*new.groups, *old.groups]):
        a, b = old.groups.get(key), new.groups.get(key)
        row = DiffRow(
            (b or a).frames,  # type: ignore[union-attr]
            a.count if a else 0,
            a.bytes if a else 0,
            b.count if b else 0,
            b.bytes if b else 0,
        )
        if include_all or row.grew:
            rows.append(row)
    rows.sort(key=lambda r: (-r.delta_bytes, -r.delta_count, stack_key(r.frames)))
    return rows


def _signed(n: int) -> str:
    return f"{n:+d}"


def format_diff_text(old: Snapshot, new: Snapshot, rows: list[DiffRow]) -> str:
    from unreachable.report.text import format_frame

    grew = [r for r in rows if r.grew]
    lines = [
        f"Before: {old.bytes} bytes in {old.count} allocations ({old.source})",
        f"After:  {new.bytes} bytes in {new.count} allocations ({new.source})",
        f"Change: {_signed(new.bytes - old.bytes)} bytes, {_signed(new.count - old.count)}"
        f" allocations; {len(grew)} backtrace{'' if len(grew) == 1 else 's'} grew",
        "",
    ]
    for r in rows:
        lines.append(
            f"  {_signed(r.delta_bytes)} bytes in {_signed(r.delta_count)} allocations"
            f" (before {r.before_bytes} bytes in {r.before_count},"
            f" after {r.after_bytes} bytes in {r.after_count})"
        )
        if not r.frames:
            lines.append("          <no backtrace>")
        lines += [format_frame(i, f) for i, f in enumerate(r.frames)]
        lines.append("")
    return "\n".join(lines) + "\n"


def diff_to_dict(old: Snapshot, new: Snapshot, rows: list[DiffRow]) -> dict[str, Any]:
    def side(s: Snapshot) -> dict[str, Any]:
        return {"source": s.source, "kind": s.kind, "count": s.count, "bytes": s.bytes}

    return {
        "before": side(old),
        "after": side(new),
        "rows": [
            {
                "before_count": r.before_count,
                "before_bytes": r.before_bytes,
                "after_count": r.after_count,
                "after_bytes": r.after_bytes,
                "delta_count": r.delta_count,
                "delta_bytes": r.delta_bytes,
                "backtrace": [frame_to_dict(f) for f in r.frames],
            }
            for r in rows
        ],
    }


def diff_to_collapsed(rows: list[DiffRow]) -> str:
    """Folded stacks of the growth (positive byte deltas only)."""
    from unreachable.report.collapsed import samples_to_collapsed

    return samples_to_collapsed(
        (r.frames, max(r.delta_count, 0), max(r.delta_bytes, 0)) for r in rows
    )
