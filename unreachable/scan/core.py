"""A scan of a core file (capture/core_file.py): the core's memory is the
snapshot, its threads' registers the register roots. A core of a process
that ran under the shim is swept against the shim's registry, with its
backtraces; one without is swept against glibc's heap, walked over the
core (scan/glibc.py). Nothing runs, so nothing is paused: what the kernel
held for the process (epoll data, timers, pipes) is not in a core and is no
root here.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from unreachable.allocations.source import ShimRegistry
from unreachable.capture.core_file import CoreFile, open_core
from unreachable.capture.descriptor import (
    DESCRIPTOR_SIZE,
    SHIM_PREFIX,
    ShimLocation,
    _symbol_and_first_vaddr,
    disabled_reason,
    parse_descriptor_header,
)
from unreachable.errors import InvalidArgument, TargetNotShimmed
from unreachable.model.report import ScanReport
from unreachable.process.mapped_file import mapped_path
from unreachable.process.maps import Mapping
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.scan.allocations import find_allocations
from unreachable.scan.fold import fold
from unreachable.scan.glibc import sweep_glibc_core
from unreachable.scan.mark import MarkOver, mark
from unreachable.scan.options import Progress, ScanOptions
from unreachable.scan.report import Scanned, build_report
from unreachable.scan.roots import RootInputs, find_roots
from unreachable.scan.symbolize import read_backtraces, symbolize


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


def scan_core(
    path: str,
    exe: str | None = None,
    sysroot: str | None = None,
    options: ScanOptions | None = None,
    progress: Progress | None = None,
) -> ScanReport:
    # A core's report shows contents only when asked for.
    options = replace(options or ScanOptions(), sample_contents=0)
    if options.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    note = progress or (lambda _stage: None)
    started = time.monotonic()
    core = open_core(path, exe, sysroot)
    try:
        note("captured")
        shim = _locate_shim(core)
        if shim is None:
            return sweep_glibc_core(core, options, note, started)
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
    allocations = find_allocations(ShimRegistry(addr), memory, mappings, core.threads)
    note("allocations")
    arena = find_main_arena(memory, mappings)
    altstacks = (header.altstacks, header.num_altstacks)
    inputs = RootInputs(shim.path, [arena] if arena else [], altstacks=altstacks)
    roots = find_roots(memory, mappings, core.threads, allocations, inputs)
    result = mark(
        MarkOver(memory, mappings, core.threads), allocations, roots, None, options.mark_threads
    )
    note("marked")
    # Types are not looked for: the files may not be the process's.
    folded = fold(result, options, memory, mappings, typed=False)
    note("folded")
    backtraces = read_backtraces(memory, addr, folded.leaks)
    symbolized = symbolize(None, _symbol_mappings(core), backtraces, options.symbol_budget, "")
    note("done")
    notes = "; ".join(core.notes)
    scanned = Scanned(core.pid, core.command, "core", len(core.threads), 0.0, started, notes)
    return build_report(scanned, result, folded, symbolized, roots.counts(), allocations.source)
