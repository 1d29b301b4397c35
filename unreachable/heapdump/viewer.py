"""Read a heap dump file and show it grouped by backtrace (native_heapdump_viewer).

The frames are symbolized against the dump's own MAPS section with the
files still on this machine; where a file is gone, a v1.2 dump's bt_info
(backtrace_full) supplies the map, relative pc and function instead.

A dump can be big (hundreds of MB): it is grouped per distinct backtrace as
parsed (unreachable.heapdump.dump_format keeps each backtrace once), each
distinct pc is symbolized once, and the text is written a group at a time.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from unreachable.heapdump.dump_format import BtInfo, HeapDumpFile, read_dump
from unreachable.symbolize.frame import Frame
from unreachable.symbolize.frames import Symbolizer

FORMATS = ("text", "collapsed", "pprof")


@dataclass(slots=True)
class BacktraceGroup:
    """Every record of one backtrace, whatever the allocation size."""

    frames: list[Frame]
    count: int = 0
    bytes: int = 0
    sizes: dict[int, int] = field(default_factory=dict)  # size -> allocations


@dataclass(slots=True)
class HeapRecordView:
    """(size, num_allocations, frames): what report.collapsed/pprof take."""

    size: int
    num_allocations: int
    frames: list[Frame]


def _merge_bt_info(frames: list[Frame], infos: list[BtInfo] | None) -> list[Frame]:
    if not infos or len(infos) != len(frames):
        return frames
    out = []
    for f, info in zip(frames, infos, strict=True):
        if not f.function and info.function:
            f = Frame(
                f.pc, f.map or info.map, info.rel_pc, info.function, info.offset, f.file, f.line
            )
        elif not f.map and info.map:
            f = Frame(f.pc, info.map, info.rel_pc, f.function, f.offset, f.file, f.line)
        out.append(f)
    return out


class SymbolizedDump:
    """A parsed dump with every distinct pc symbolized, grouped per backtrace."""

    def __init__(
        self,
        dump: HeapDumpFile,
        pid: int | None = None,
        budget: float | None | bool = True,
    ) -> None:
        self.dump = dump
        pcs: set[int] = set()
        for packed in dump.stacks:
            pcs.update(array("Q", packed))
        # The files its MAPS names: its owner's, opened with its owner's rights.
        owner = () if dump.owner is None else (dump.owner,)
        symbolizer = Symbolizer(
            pid, dump.mappings, trust_uids=owner, as_user=dump.owner, budget=budget
        )
        self._frames = symbolizer.resolve(pcs)
        self.note = symbolizer.note
        n = len(dump.stacks)
        self.counts = [0] * n
        self.bytes = [0] * n
        for size, num, sid in zip(dump.sizes, dump.nums, dump.stack_ids, strict=True):
            self.counts[sid] += num
            self.bytes[sid] += size * num
        # The records of each stack, contiguous: record indices sorted by stack id
        # (a counting sort: 4 bytes a record, where a dict of (stack, size) took ~90).
        self._first = array("I", bytes(4 * (n + 1)))
        for sid in dump.stack_ids:
            self._first[sid + 1] += 1
        for sid in range(n):
            self._first[sid + 1] += self._first[sid]
        fill = array("I", self._first[:n])
        self._by_stack = array("I", bytes(4 * len(dump.stack_ids)))
        for i, sid in enumerate(dump.stack_ids):
            self._by_stack[fill[sid]] = i
            fill[sid] += 1

    def frames(self, sid: int) -> list[Frame]:
        frames = [self._frames[pc] for pc in array("Q", self.dump.stacks[sid])]
        return _merge_bt_info(frames, self.dump.bt_infos.get(sid))

    def order(self) -> list[int]:
        """Stack ids, largest total bytes first (then most allocations, then file order)."""
        b, c = self.bytes, self.counts
        return sorted(range(len(b)), key=lambda s: (-b[s], -c[s], s))

    def sizes(self, sid: int) -> list[tuple[int, int]]:
        """(size, allocations) of one stack's records, largest size first."""
        out: dict[int, int] = {}
        sizes, nums = self.dump.sizes, self.dump.nums
        for i in self._by_stack[self._first[sid] : self._first[sid + 1]]:
            out[sizes[i]] = out.get(sizes[i], 0) + nums[i]
        return sorted(out.items(), reverse=True)

    def groups(self) -> Iterator[BacktraceGroup]:
        for sid in self.order():
            yield BacktraceGroup(
                self.frames(sid), self.counts[sid], self.bytes[sid], dict(self.sizes(sid))
            )

    def records(self) -> list[HeapRecordView]:
        """One view per (backtrace, size), for the profile formats."""
        out = []
        for sid in range(len(self.counts)):
            frames = self.frames(sid)
            out += [HeapRecordView(size, n, frames) for size, n in self.sizes(sid)]
        return out


def symbolize_dump(dump: HeapDumpFile, pid: int | None = None) -> list[HeapRecordView]:
    """The dump's records with symbolized frames, in file order."""
    sym = SymbolizedDump(dump, pid)
    frames: dict[int, list[Frame]] = {}
    out = []
    for size, num, sid in zip(dump.sizes, dump.nums, dump.stack_ids, strict=True):
        if sid not in frames:
            frames[sid] = sym.frames(sid)
        out.append(HeapRecordView(size, num, frames[sid]))
    return out


def group_by_backtrace(records: list[HeapRecordView]) -> list[BacktraceGroup]:
    """Records merged per backtrace, largest total bytes first."""
    groups: dict[tuple[int, ...], BacktraceGroup] = {}
    for r in records:
        key = tuple(f.pc for f in r.frames)
        g = groups.get(key)
        if g is None:
            g = groups[key] = BacktraceGroup(r.frames)
        g.count += r.num_allocations
        g.bytes += r.size * r.num_allocations
        g.sizes[r.size] = g.sizes.get(r.size, 0) + r.num_allocations
    return sorted(groups.values(), key=lambda g: (-g.bytes, -g.count, [f.pc for f in g.frames]))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _header_lines(dump: HeapDumpFile, total: int, count: int, groups: int) -> list[str]:
    lines = [f"Android Native Heap Dump v{dump.version or '?'}"]
    if dump.fingerprint is not None:
        lines.append(f"Build fingerprint: '{dump.fingerprint}'")
    lines.append(
        f"Total: {total} bytes in {_plural(count, 'allocation')},"
        f" {_plural(groups, 'backtrace')}"
        + (f" (header: Total memory: {dump.total_memory})"
           if dump.total_memory is not None and dump.total_memory != total else "")
    )  # fmt: skip
    if dump.backtrace_size is not None:
        lines.append(f"Backtrace size: {dump.backtrace_size}")
    if not dump.num_field_valid:
        lines.append(
            "Note: v1.0 dump: its allocation counts are unreliable; each record counts as 1"
        )
    lines += [f"Note: {w}" for w in dump.warnings]
    return lines


def _group_lines(g: BacktraceGroup, total: int) -> list[str]:
    from unreachable.report.text import format_frame

    share = f"{100 * g.bytes / total:.1f}%" if total else "0%"
    sizes = ", ".join(f"{n} x {size}" for size, n in sorted(g.sizes.items(), reverse=True))
    lines = [f"  {g.bytes} bytes in {_plural(g.count, 'allocation')} ({share}): {sizes}"]
    if not g.frames:
        lines.append("          <no backtrace>")
    lines += [format_frame(i, f) for i, f in enumerate(g.frames)]
    lines.append("")
    return lines


def format_groups_text(dump: HeapDumpFile, groups: list[BacktraceGroup]) -> str:
    total = sum(g.bytes for g in groups)
    count = sum(g.count for g in groups)
    lines = [*_header_lines(dump, total, count, len(groups)), ""]
    for g in groups:
        lines += _group_lines(g, total)
    return "\n".join(lines) + "\n"


def iter_text(sym: SymbolizedDump) -> Iterator[str]:
    """The text view, a group at a time (format_groups_text's layout)."""
    total, count = sum(sym.bytes), sum(sym.counts)
    lines = _header_lines(sym.dump, total, count, len(sym.counts))
    if sym.note:
        lines.append(f"Note: symbols: {sym.note}")
    yield "\n".join(lines) + "\n\n"
    for g in sym.groups():
        yield "\n".join(_group_lines(g, total)) + "\n"


def render_dump_chunks(
    path: str, fmt: str = "text", pid: int | None = None, budget: float | None | bool = True
) -> tuple[HeapDumpFile, str, Iterator[str] | bytes | str]:
    """(the parsed dump, the symbolizer's note, its rendering): text as an
    iterator of chunks, collapsed as one str, pprof as bytes. See render_dump."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    dump = read_dump(path)
    sym = SymbolizedDump(dump, pid, budget)
    if fmt == "collapsed":
        from unreachable.report.collapsed import samples_to_collapsed

        samples = ((g.frames, g.count, g.bytes) for g in sym.groups())
        return dump, sym.note, samples_to_collapsed(samples)
    if fmt == "pprof":
        from unreachable.report.pprof import heapdump_to_pprof

        comments = [f"heap dump {path} (v{dump.version or '?'})"]
        if dump.fingerprint:
            comments.append(f"build fingerprint: {dump.fingerprint}")
        return dump, sym.note, heapdump_to_pprof(_Records(sym.records()), comments)
    return dump, sym.note, iter_text(sym)


def render_dump(path: str, fmt: str = "text", pid: int | None = None) -> str | bytes:
    """Read the v1.0/v1.1/v1.2 heap dump at `path` and render it.

    fmt "text": allocations grouped by backtrace, largest total first (str);
    "collapsed": folded stacks weighted by bytes (str);
    "pprof": a gzip'ed profile.proto with inuse_objects/inuse_space (bytes).
    pid: open the mapped files through /proc/PID/root (the dumped process, if alive).
    Raises OSError for an unreadable file, DumpFormatError for a malformed one.
    """
    _, _, out = render_dump_chunks(path, fmt, pid)
    return out if isinstance(out, str | bytes) else "".join(out)


@dataclass(slots=True)
class _Records:
    records: list[HeapRecordView]
