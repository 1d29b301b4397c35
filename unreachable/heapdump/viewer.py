"""Read a heap dump file and show it grouped by backtrace (native_heapdump_viewer).

The frames are symbolized against the dump's own MAPS section with the
files still on this machine; where a file is gone, a v1.2 dump's bt_info
(backtrace_full) supplies the map, relative pc and function instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from unreachable.heapdump.dump_format import DumpRecord, HeapDumpFile, read_dump
from unreachable.symbolize.frames import Frame, Symbolizer

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


def _merge_bt_info(frames: list[Frame], record: DumpRecord) -> list[Frame]:
    if not record.bt_info or len(record.bt_info) != len(frames):
        return frames
    out = []
    for f, info in zip(frames, record.bt_info, strict=True):
        if not f.function and info.function:
            f = Frame(
                f.pc, f.map or info.map, info.rel_pc, info.function, info.offset, f.file, f.line
            )
        elif not f.map and info.map:
            f = Frame(f.pc, info.map, info.rel_pc, f.function, f.offset, f.file, f.line)
        out.append(f)
    return out


def symbolize_dump(dump: HeapDumpFile, pid: int | None = None) -> list[HeapRecordView]:
    """The dump's records with symbolized frames, in file order."""
    stacks = {i: r.pcs for i, r in enumerate(dump.records)}
    frames = Symbolizer(pid, dump.mappings).symbolize(stacks)
    return [
        HeapRecordView(r.size, r.num_allocations, _merge_bt_info(frames[i], r))
        for i, r in enumerate(dump.records)
    ]


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


def format_groups_text(dump: HeapDumpFile, groups: list[BacktraceGroup]) -> str:
    from unreachable.report.text import format_frame

    total = sum(g.bytes for g in groups)
    count = sum(g.count for g in groups)
    lines = [f"Android Native Heap Dump v{dump.version or '?'}"]
    if dump.fingerprint is not None:
        lines.append(f"Build fingerprint: '{dump.fingerprint}'")
    lines.append(
        f"Total: {total} bytes in {_plural(count, 'allocation')},"
        f" {_plural(len(groups), 'backtrace')}"
        + (f" (header: Total memory: {dump.total_memory})"
           if dump.total_memory is not None and dump.total_memory != total else "")
    )  # fmt: skip
    if dump.backtrace_size is not None:
        lines.append(f"Backtrace size: {dump.backtrace_size}")
    if not dump.num_field_valid:
        lines.append(
            "Note: v1.0 dump: its allocation counts are unreliable; each record counts as 1"
        )
    lines.append("")
    for g in groups:
        share = f"{100 * g.bytes / total:.1f}%" if total else "0%"
        sizes = ", ".join(f"{n} x {size}" for size, n in sorted(g.sizes.items(), reverse=True))
        lines.append(f"  {g.bytes} bytes in {_plural(g.count, 'allocation')} ({share}): {sizes}")
        if not g.frames:
            lines.append("          <no backtrace>")
        lines += [format_frame(i, f) for i, f in enumerate(g.frames)]
        lines.append("")
    return "\n".join(lines) + "\n"


def render_dump(path: str, fmt: str = "text", pid: int | None = None) -> str | bytes:
    """Read the v1.0/v1.1/v1.2 heap dump at `path` and render it.

    fmt "text": allocations grouped by backtrace, largest total first (str);
    "collapsed": folded stacks weighted by bytes (str);
    "pprof": a gzip'ed profile.proto with inuse_objects/inuse_space (bytes).
    pid: open the mapped files through /proc/PID/root (the dumped process, if alive).
    Raises OSError for an unreadable file, DumpFormatError for a malformed one.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    dump = read_dump(path)
    records = symbolize_dump(dump, pid)
    if fmt == "collapsed":
        from unreachable.report.collapsed import heap_samples, samples_to_collapsed

        return samples_to_collapsed(heap_samples(records))
    if fmt == "pprof":
        from unreachable.report.pprof import heapdump_to_pprof

        comments = [f"heap dump {path} (v{dump.version or '?'})"]
        if dump.fingerprint:
            comments.append(f"build fingerprint: {dump.fingerprint}")
        return heapdump_to_pprof(_Records(records), comments)
    return format_groups_text(dump, group_by_backtrace(records))


@dataclass(slots=True)
class _Records:
    records: list[HeapRecordView]
