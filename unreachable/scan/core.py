"""The core file's snapshot strategy (capture/core_file.py): the core's
memory is the snapshot, its threads' registers the register roots. A core
of a process that ran under the shim is swept against the shim's registry,
with its backtraces; one without is swept against glibc's heap, walked over
the core (scan/glibc.py). The stages after it are every scan's
(scan/run.py scan_core). Nothing runs, so nothing is paused: what the
kernel held for the process (epoll data, timers, pipes) is not in a core
and is no root here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from unreachable.allocations.source import ShimRegistry
from unreachable.capture.core_file import CoreFile
from unreachable.capture.descriptor import (
    DESCRIPTOR_SIZE,
    DescriptorHeader,
    ShimLocation,
    disabled_reason,
    parse_descriptor_header,
    shim_exported,
    shim_image,
    shim_named,
)
from unreachable.capture.stop_world import Capture
from unreachable.errors import TargetNotShimmed
from unreachable.process.maps import Mapping
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts
from unreachable.scan.glibc import NO_SHIM_PATH, walk_core
from unreachable.scan.plan import Plan, Retry


def _locate_shim(core: CoreFile) -> ShimLocation | None:
    """The shim's descriptor in the core, found as in a process: its
    exported symbol at the load bias of the shim's first mapping. A core
    keeps no environment to say what the process preloaded, so a shim under
    another name is looked for in every other file mapped (descriptor.py
    shim_exported)."""
    for m in core.mappings:
        if m.offset or not shim_named(m):
            continue
        real = core.file_for(m.path)
        if m.path in core.changed:
            raise TargetNotShimmed(
                f"{core.path} was dumped from a process under the shim, and {real} is not the"
                " shim it ran (another build): give that one's root with --sysroot"
            )
        try:
            st = os.stat(real)
            image = shim_image(real, st.st_dev, st.st_ino, int(st.st_mtime))
        except (OSError, ValueError):
            raise TargetNotShimmed(
                f"{core.path} was dumped from a process under the shim, and the shim it ran"
                f" ({real}) cannot be read: give its directory's root with --sysroot"
            ) from None
        if image.descriptor >= 0:
            return image.located(m.path, m.start)
    for m in core.mappings:
        if not m.offset and m.path.startswith("/") and not shim_named(m):
            if m.path not in core.changed and (found := shim_exported(core.file_for(m.path), m)):
                return found
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


@dataclass(frozen=True, slots=True)
class CoreProcess:
    """The process a core is of, as the stages after capture see it
    (scan/captured.py Subject): nothing runs, and its files are read where
    --exe and --sysroot say."""

    core: CoreFile
    own_path: str
    main_arena: tuple[int, int] | None
    altstacks: tuple[int, int] | None
    descriptor_addr: int | None
    # A shim's core looks for no C++ types: the files may not be the
    # process's. A glibc heap's core, without backtraces, names its leaks
    # by the types read from the files the mappings name.
    typed: bool
    own_bss: tuple[int, int] | None = None
    child_box: int = 0
    live: bool = False

    @property
    def pid(self) -> int:
        return self.core.pid

    @property
    def tgid(self) -> int:
        return self.core.pid

    @property
    def command(self) -> str:
        return self.core.command

    def symbol_files(self, mappings: list[Mapping]) -> list[Mapping]:
        return _symbol_mappings(self.core)


@contextmanager
def capture_core(facts: Facts, plan: Plan) -> Iterator[Captured | Retry]:
    """The core plan's capture: the core's memory is the snapshot, its
    threads' registers the register roots; its allocations are the shim's
    registry in it, or else glibc's heap walked over it."""
    core = facts.core
    assert core is not None
    held = Capture(
        None,
        core.threads,
        "core",
        "; ".join(core.notes),
        copy=core.memory,
        mappings=core.mappings,
    )
    shim = _locate_shim(core)
    if shim is None:
        heap, arena = walk_core(core)
        yield Captured(held, CoreProcess(core, NO_SHIM_PATH, arena, None, None, True), heap)
        return
    header = _shim_header(core, shim)
    altstacks = (header.altstacks, header.num_altstacks)
    addr = shim.descriptor_addr
    subject = CoreProcess(core, shim.path, None, altstacks, addr, False, shim.bss)
    yield Captured(held, subject, ShimRegistry(addr))


def _shim_header(core: CoreFile, shim: ShimLocation) -> DescriptorHeader:
    """The shim's descriptor in the core; refused if it was inert."""
    addr = shim.descriptor_addr
    core.lacks(addr, "the shim's registry descriptor")
    try:
        raw = core.memory.read(addr, DESCRIPTOR_SIZE)
    except OSError:
        raw = b""
    header = parse_descriptor_header(raw, core.path)
    if not header.enabled:
        why = disabled_reason(header.disabled, header.disabled_errno)
        raise TargetNotShimmed(f"the shim in {core.path} was inert: {why}")
    return header
