"""A scan of a core file (capture/core_file.py): the core's memory is the
snapshot, its threads' registers the register roots. A core of a process
that ran under the shim is swept against the shim's registry, with its
backtraces; one without is swept against glibc's heap, walked over the
core (scan_glibc.py). Nothing runs, so nothing is paused: what the kernel
held for the process (epoll data, timers, pipes) is not in a core and is no
root here.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from functools import partial

from unreachable.allocations.descriptor import (
    DESCRIPTOR_SIZE,
    SHIM_PREFIX,
    ShimLocation,
    _symbol_and_first_vaddr,
    disabled_reason,
    parse_descriptor_header,
)
from unreachable.allocations.registry import read_registry
from unreachable.capture.core_file import CoreFile, open_core
from unreachable.errors import InvalidArgument, TargetNotShimmed
from unreachable.fold.dedup import dedup
from unreachable.process.mapped_file import mapped_path
from unreachable.process.maps import Mapping
from unreachable.process.memory import present_ranges
from unreachable.report.model import LeakEntry, ScanReport, leak_counts
from unreachable.roots.classify import classify, register_words
from unreachable.roots.exited_threads import dtv_words
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.roots.glibc_heaps import heap_parts, registry_blocks_in
from unreachable.roots.heap_words import heap_spans
from unreachable.roots.jit_code import code_words
from unreachable.roots.signal_stacks import altstack_words
from unreachable.scan import CONTENTS_BYTES, Progress, ScanOptions
from unreachable.scan_glibc import sweep_glibc_core
from unreachable.sweep.child import default_mark_threads
from unreachable.sweep.mark import sweep
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks
from unreachable.symbolize.unloaded import read_loaded_objects


def _locate_shim(core: CoreFile) -> ShimLocation | None:
    """The shim's descriptor in the core, found as in a process: its
    exported symbol at the load bias of the shim's first mapping."""
    for m in core.mappings:
        if m.offset or not os.path.basename(mapped_path(m)).startswith(SHIM_PREFIX):
            continue
        real = core.file_for(m.path)
        if m.path in core.changed:
            raise TargetNotShimmed(
                f"{core.path} was dumped from a process under the shim, and {real} is not the"
                " shim it ran (another build): give that one's root with --sysroot"
            )
        try:
            st = os.stat(real)
            value, first_vaddr = _symbol_and_first_vaddr(
                real, st.st_dev, st.st_ino, int(st.st_mtime)
            )
        except (OSError, ValueError):
            raise TargetNotShimmed(
                f"{core.path} was dumped from a process under the shim, and the shim it ran"
                f" ({real}) cannot be read: give its directory's root with --sysroot"
            ) from None
        if value >= 0:
            bias = m.start - first_vaddr
            return ShimLocation(path=m.path, load_bias=bias, descriptor_addr=bias + value)
    return None


def _symbol_mappings(core: CoreFile) -> list[Mapping]:
    """The mappings with the paths of the files to read for them (--exe,
    --sysroot), for the symbolizer, which opens paths as given. A file that
    is not the one mapped is not read: its frames stay raw."""
    return [
        replace(m, path=core.file_for(m.path))
        if m.path.startswith("/") and m.path not in core.changed
        else replace(m, path=f"{m.path} (not the file mapped)")
        if m.path.startswith("/")
        else m
        for m in core.mappings
    ]


def _contents(core: CoreFile, addr: int, size: int) -> bytes:
    try:
        return core.memory.read(addr, min(size, CONTENTS_BYTES))
    except OSError:
        return b""


def scan_core(
    path: str,
    exe: str | None = None,
    sysroot: str | None = None,
    options: ScanOptions | None = None,
    progress: Progress | None = None,
) -> ScanReport:
    options = options or ScanOptions()
    if options.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    note = progress or (lambda _stage: None)
    started = time.monotonic()
    core = open_core(path, exe, sysroot)
    try:
        note("captured")
        shim = _locate_shim(core)
        if shim is None:
            return sweep_glibc_core(
                core, options.limit, options.contents, options.mark_threads, note, started
            )
        return _scan_shim_core(core, shim, options, note, started)
    finally:
        core.close()


def _scan_shim_core(
    core: CoreFile, shim: ShimLocation, options: ScanOptions, note: Progress, started: float
) -> ScanReport:
    memory, mappings = core.memory, core.mappings
    addr = shim.descriptor_addr
    core.lacks(addr, "the shim's registry descriptor")
    try:
        raw = memory.read(addr, DESCRIPTOR_SIZE)
    except OSError:
        raw = b""
    header = parse_descriptor_header(raw, core.path)
    if not header.enabled:
        why = disabled_reason(header.disabled, header.disabled_errno)
        raise TargetNotShimmed(f"the shim in {core.path} was inert: {why}")
    registry = read_registry(memory, addr)
    note("allocations")
    tids = {t.tid for t in core.threads}
    altstacks = altstack_words(memory, header.altstacks, header.num_altstacks, tids)
    arena = find_main_arena(memory, mappings)
    heap = heap_parts(memory, mappings, registry_blocks_in(registry))
    roots = classify(
        mappings,
        {t.tid: t.sp for t in core.threads},
        registry,
        shim.path,
        [arena] if arena else [],
        heap,
        partial(present_ranges, memory),
    )
    jit = code_words(memory, mappings, heap_spans(mappings, heap))
    dtv = dtv_words(memory, roots.dead_stacks)
    regs = register_words([t.regs for t in core.threads] + [t.xstate for t in core.threads])
    result = sweep(
        memory,
        registry,
        roots,
        altstacks + regs + dtv + jit,
        None,
        options.mark_threads or default_mark_threads(),
        mappings,
    )
    note("marked")
    leaks = dedup(result.leaks, options.limit)
    note("folded")
    contents = {leak.begin: _contents(core, leak.begin, leak.size) for leak in leaks}
    stacks = read_stacks(memory, addr, {leak.stack_id for leak in leaks if leak.stack_id})
    loaded = read_loaded_objects(memory, addr) if stacks else []
    symbolizer = Symbolizer(
        None, _symbol_mappings(core), unloaded=loaded, root="", budget=options.symbol_budget
    )
    frames = symbolizer.symbolize(stacks)
    entries = [
        LeakEntry(
            address=leak.begin,
            **leak_counts(leak),
            contents=contents[leak.begin] if options.contents else None,
            backtrace=frames.get(leak.stack_id, []),
            type="",
        )
        for leak in leaks
    ]
    note("done")
    return ScanReport(
        pid=core.pid,
        command=core.command,
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=result.allocation_count,
        allocation_bytes=result.allocation_bytes,
        pause_ms=0.0,
        scan_ms=(time.monotonic() - started) * 1000,
        snapshot="core",
        threads=len(core.threads),
        leaks=entries,
        roots=dict(roots.kinds)
        | ({"signal stacks": len(altstacks)} if altstacks else {})
        | ({"code immediates": len(jit)} if jit else {}),
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
        sweep=result.place,
        mark_threads=result.mark_threads,
        snapshot_note="; ".join(core.notes),
        symbol_note=symbolizer.note,
    )
