"""Read the shim's allocation registry out of a stopped or frozen target."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from unreachable import _native
from unreachable.capture.descriptor import disabled_reason
from unreachable.capture.target import still_running
from unreachable.errors import TargetNotFound, TargetNotShimmed
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory
from unreachable.process.status import pid_namespace

THREAD_LIVE = _native.THREAD_LIVE
THREAD_EXITED = _native.THREAD_EXITED


@dataclass(slots=True, eq=False, repr=False)
class ThreadSlot:
    """A thread as the shim knows it, with the operation it is inside, if any."""

    tid: int
    state: int
    op: int
    in_ptr: int
    in_size: int
    out_ptr: int
    out_size: int
    stack_lo: int
    stack_hi: int

    def inflight_blocks(self) -> list[tuple[int, int]]:
        """(begin, size) of user blocks this thread is in the middle of handling."""
        if not self.op:
            return []
        blocks = [(self.in_ptr, self.in_size), (self.out_ptr, self.out_size)]
        return [(p, s) for p, s in blocks if p]


@dataclass(slots=True, eq=False, repr=False)
class Registry:
    """The shim's registry of live allocations, decoded."""

    allocs: memoryview  # flat u64: begin0, size0, begin1, size1, ...; sorted by begin
    stack_ids: memoryview  # u32 per allocation, same order
    threads: list[ThreadSlot]
    locked_shards: list[tuple[int, int]]
    helper_tid: int
    helper_cmd: int
    regions: list[tuple[int, int]]  # the shim's own memory: (begin, end), never a root
    options: str
    max_frames: int
    unregistered: int = 0  # blocks the shim had no memory to register
    helper_frames: int = 0  # the helper's stack below holds the shim's values only; 0: none
    # Sizes are glibc chunks' usable sizes (a walk without the shim), not
    # the sizes asked for: the mark's rule for an end pointer differs.
    usable_sizes: bool = False

    @property
    def total_bytes(self) -> int:
        # Summed when asked, not with every read: 0.15 s of Python for 2.7M
        # blocks, and only a heap dump asks.
        return sum(self.allocs[1::2])

    @property
    def count(self) -> int:
        return len(self.stack_ids)

    def begin(self, i: int) -> int:
        return self.allocs[2 * i]

    def size(self, i: int) -> int:
        return self.allocs[2 * i + 1]


def read_registry(memory: Memory, descriptor_addr: int, entries: bool = True) -> Registry:
    """entries=False: threads, shards and options only (allocs and stack_ids
    empty), for a scan whose snapshot child reads the entries itself."""
    try:
        # Without entries nothing here needs the count of the size maps' blocks.
        raw = _native.read_registry(memory, descriptor_addr, entries, entries)
    except (ProcessLookupError, ValueError) as e:
        # A process that exits mid-read reads as zeros: it is gone, not unshimmed.
        if isinstance(e, ProcessLookupError) or (
            isinstance(memory, int) and not still_running(memory)
        ):
            raise TargetNotFound(f"process {memory} exited while its registry was read") from None
        raise _forged(e) from None
    if not raw["enabled"]:
        why = disabled_reason(raw["disabled"], raw["disabled_errno"])
        raise TargetNotShimmed(f"the shim in this process is inert: {why}")
    if raw["unregistered"]:
        raise TargetNotShimmed(
            "the shim in this process could not grow its registry (out of memory, or"
            " under the program's own seccomp filter): "
            f"{raw['unregistered']} blocks are not registered, so a scan would miss or "
            "invent leaks (see the process's stderr; docs/design.md)"
        )
    # The native reader returns entries in address order, duplicates dropped.
    return Registry(
        allocs=memoryview(raw["allocs"]).cast("Q"),
        stack_ids=memoryview(raw["stack_ids"]).cast("I"),
        threads=[ThreadSlot(*t) for t in raw["threads"]],
        locked_shards=list(raw["locked_shards"]),
        helper_tid=raw["helper_tid"],
        helper_cmd=raw["helper_cmd"],
        regions=list(raw["regions"]),
        options=raw["options"],
        max_frames=raw["max_frames"],
        unregistered=raw["unregistered"],
        helper_frames=raw["helper_frames"],
    )


def _never_the_shims(path: str) -> bool:
    # Anonymous memory may be named (prctl PR_SET_VMA_ANON_NAME: "[anon:...]",
    # glibc's decorated arenas) or merged into the brk heap's mapping.
    return bool(path) and path != "[heap]" and not path.startswith("[anon")


def check_regions(registry: Registry, mappings: Sequence[Mapping]) -> None:
    """The shim's regions are cut out of the roots, so a forged one would
    hide roots and make leaks of the blocks they keep. The shim's memory is
    anonymous: a region over a file mapping or the main stack is forged
    (TargetNotShimmed). One over another anonymous mapping cannot be told
    from the shim's own."""
    named = sorted((m.start, m.end, m.path) for m in mappings if _never_the_shims(m.path))
    i = 0
    for b, e in sorted(registry.regions):
        while i < len(named) and named[i][1] <= b:
            i += 1
        j = i
        while j < len(named) and named[j][0] < e:
            if named[j][1] > b:
                raise _forged(
                    ValueError(
                        f"it is corrupt (a region of the shim's memory, {b:#x}-{e:#x}, "
                        f"covers {named[j][2]}, which the shim never maps): the process "
                        "overwrote it, so nothing read from it can be trusted"
                    )
                )
            j += 1


def _forged(e: ValueError) -> TargetNotShimmed:
    return TargetNotShimmed(f"the shim's registry is unreadable: {e}")


def registry_regions(pid: int, descriptor_addr: int) -> list[tuple[int, int]]:
    """The shim's regions alone (no entries, no count of the size maps'); a
    registry refused as forged is TargetNotShimmed."""
    try:
        regions: list[tuple[int, int]] = _native.read_registry(pid, descriptor_addr, False, False)[
            "regions"
        ]
    except ValueError as e:
        raise _forged(e) from None
    return regions


def size_map_pages(pid: int, descriptor_addr: int, blocks: bytes) -> tuple[bytes, bytes]:
    """_native.size_map_pages; a registry refused as forged is TargetNotShimmed."""
    try:
        return _native.size_map_pages(pid, descriptor_addr, blocks)
    except ValueError as e:
        raise _forged(e) from None


def size_map_pages_around(pid: int, descriptor_addr: int, ranges: bytes) -> bytes:
    """_native.size_map_pages_around; a registry refused as forged is TargetNotShimmed."""
    try:
        return _native.size_map_pages_around(pid, descriptor_addr, ranges)
    except ValueError as e:
        raise _forged(e) from None


def settle_gone_threads(registry: Registry, memory: Memory, stopped: Collection[int]) -> None:
    """A slot that announces an operation for a thread not among those
    stopped names nothing in flight: its thread ended inside the call (the
    raw exit system call from a signal handler, which runs no destructor to
    clear it: native/shim/threads.c) and the call will never finish, so its
    blocks are the program's, leaked or not. Only where the slots' tids (the
    target's gettid()) are the stop's: a target in this scanner's pid
    namespace, not a core file."""
    pid = memory if isinstance(memory, int) else memory.pid
    ns = pid_namespace(pid) if stopped and pid else ""
    if not ns or ns != pid_namespace("self"):
        return
    registry.threads = [
        t if not t.op or t.tid in stopped else replace(t, op=0) for t in registry.threads
    ]
