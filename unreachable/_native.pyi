"""Types of unreachable._native (native/scanner/*.c; module.c lists the functions).

Dicts the extension returns are typed as TypedDicts; at run time they are plain dicts.
abi_* take a struct's name from native/include/unreachable/abi.h (abi_py.c's table).
"""

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypedDict, overload

from typing_extensions import Buffer

# abi.h constants (abi_py.c).
ABI_MAGIC: int
ABI_VERSION: int
DESCRIPTOR_SYMBOL: str
THREAD_FREE: int
THREAD_LIVE: int
THREAD_EXITED: int
DISABLED_NONE: int
DISABLED_OPTIONS: int
DISABLED_NO_MEMORY: int
DISABLED_OTHER_MALLOC: int
NO_HELPER_OWN_FILTER: int
NO_HELPER_RAW_CLONE: int
TRACK_IDLE: int
TRACK_START: int
TRACK_ON: int
TRACK_STOP: int
TRACK_FAILED: int
TRACK_HEARTBEAT_MS: int
TRACK_MODE_COW: int
TRACK_MODE_SCANNER: int
CHILD_REQ_HOLDS: int
CHILD_REQ_SWEEP: int
CHILD_REQ_EXIT: int
CHILD_REQ_BLOCKS: int
CHILD_FEATURE_TEAM: int
CHILD_FEATURE_TEAM_SIZE: int
CHILD_FEATURE_BLOCKS: int
CHILD_FEATURE_OWNED: int
CHILD_MAX_THREADS: int
LMU_MAGIC: int
LMU_VERSION: int
LMU_CONTENTS_BYTES: int
LMU_MAX_FRAMES: int

# abi.h structures, as abi_decode returns them (reserved words left out).
class Descriptor(TypedDict):
    magic: int
    version: int
    size: int
    enabled: int
    num_shards: int
    shards: int
    threads: int
    max_threads: int
    helper_tid: int
    helper_cmd: int
    stacks: int
    region_begin: int
    region_end: int
    options: int
    pid: int
    child_box: int
    write_tracker: int
    altstacks: int
    num_altstacks: int
    size_maps: int
    modules: int
    regions: int
    num_regions: int
    disabled: int
    disabled_errno: int
    unregistered: int
    helper_frames: int
    shard_locks: int
    no_helper: int

class WriteTracker(TypedDict):
    cmd: int
    error: int
    scanner_pid: int
    ranges: int
    heartbeat: int
    reserved: int

class ChildIndex(TypedDict):
    entries: int
    allocation_count: int
    allocation_bytes: int
    overlapping: int
    index_ns: int
    features: int

class ChildSweepRequest(TypedDict):
    nranges: int
    nvalues: int
    nexcluded: int
    nreadable: int

class ChildSweepOptions(TypedDict):
    threads: int

class ChildSweepReply(TypedDict):
    unreachable_count: int
    unreachable_bytes: int
    bytes_scanned: int
    pages_skipped: int
    mark_ns: int
    fold_ns: int
    nleaks: int
    bounced_pages: int

class LeakRecord(TypedDict):
    begin: int
    size: int
    referenced_count: int
    referenced_size: int
    stack_id: int

class Altstack(TypedDict):
    tid: int
    sp: int
    size: int

class Module(TypedDict):
    bias: int
    start: int
    end: int
    path: int
    path_len: int
    build_id_len: int
    build_id: bytes

class ModuleTable(TypedDict):
    modules: int
    strings: int
    capacity: int
    count: int
    strings_size: int
    lost: int

class Range(TypedDict):
    begin: int
    end: int

class Block(TypedDict):
    begin: int
    size: int

class LayoutSpan(TypedDict):
    begin: int
    end: int
    demand_zero: int

# native/mark/retention.h: graph mode's records.
class RootHit(TypedDict):
    where: int
    value: int
    region: int
    block: int

class RootRegion(TypedDict):
    begin: int
    end: int
    region: int

class RootSite(TypedDict):
    top: int
    key: int
    bytes: int
    count: int

class SiteTotal(TypedDict):
    key: int
    bytes: int
    count: int
    retained_bytes: int
    retained_count: int
    largest: int

class SiteHolder(TypedDict):
    key: int
    top: int
    bytes: int
    count: int

# <sys/user.h>: a thread's general registers (NT_PRSTATUS).
class UserRegs(TypedDict):
    r15: int
    r14: int
    r13: int
    r12: int
    rbp: int
    rbx: int
    r11: int
    r10: int
    r9: int
    r8: int
    rax: int
    rcx: int
    rdx: int
    rsi: int
    rdi: int
    orig_rax: int
    rip: int
    cs: int
    eflags: int
    rsp: int
    ss: int
    fs_base: int
    gs_base: int
    ds: int
    es: int
    fs: int
    gs: int

StructName = Literal[
    "ur_descriptor",
    "ur_write_tracker",
    "ur_child_index",
    "ur_child_sweep_req",
    "ur_child_sweep_opts",
    "ur_child_sweep_reply",
    "ur_leak_record",
    "ur_altstack",
    "ur_module",
    "ur_module_table",
    "ur_lmu_header",
    "ur_lmu_leak",
    "ur_range",
    "ur_block",
    "ur_layout_span",
    "ur_sync_range",
    "ur_root_hit",
    "ur_root_region",
    "ur_root_site",
    "ur_site_total",
    "ur_site_holder",
    "user_regs_struct",
]

@overload
def abi_decode(struct: Literal["ur_descriptor"], raw: Buffer, /) -> Descriptor: ...
@overload
def abi_decode(struct: Literal["ur_write_tracker"], raw: Buffer, /) -> WriteTracker: ...
@overload
def abi_decode(struct: Literal["ur_child_index"], raw: Buffer, /) -> ChildIndex: ...
@overload
def abi_decode(struct: Literal["ur_child_sweep_req"], raw: Buffer, /) -> ChildSweepRequest: ...
@overload
def abi_decode(struct: Literal["ur_child_sweep_opts"], raw: Buffer, /) -> ChildSweepOptions: ...
@overload
def abi_decode(struct: Literal["ur_child_sweep_reply"], raw: Buffer, /) -> ChildSweepReply: ...
@overload
def abi_decode(struct: Literal["ur_leak_record"], raw: Buffer, /) -> LeakRecord: ...
@overload
def abi_decode(struct: Literal["ur_altstack"], raw: Buffer, /) -> Altstack: ...
@overload
def abi_decode(struct: Literal["ur_module"], raw: Buffer, /) -> Module: ...
@overload
def abi_decode(struct: Literal["ur_module_table"], raw: Buffer, /) -> ModuleTable: ...
@overload
def abi_decode(struct: Literal["user_regs_struct"], raw: Buffer, /) -> UserRegs: ...
@overload
def abi_decode_array(struct: Literal["ur_leak_record"], raw: Buffer, /) -> list[LeakRecord]: ...
@overload
def abi_decode_array(struct: Literal["ur_range"], raw: Buffer, /) -> list[Range]: ...
@overload
def abi_decode_array(struct: Literal["ur_block"], raw: Buffer, /) -> list[Block]: ...
@overload
def abi_decode_array(struct: Literal["ur_layout_span"], raw: Buffer, /) -> list[LayoutSpan]: ...
@overload
def abi_decode_array(struct: Literal["ur_root_hit"], raw: Buffer, /) -> list[RootHit]: ...
@overload
def abi_decode_array(struct: Literal["ur_root_region"], raw: Buffer, /) -> list[RootRegion]: ...
@overload
def abi_decode_array(struct: Literal["ur_root_site"], raw: Buffer, /) -> list[RootSite]: ...
@overload
def abi_decode_array(struct: Literal["ur_site_total"], raw: Buffer, /) -> list[SiteTotal]: ...
@overload
def abi_decode_array(struct: Literal["ur_site_holder"], raw: Buffer, /) -> list[SiteHolder]: ...
@overload
def abi_decode_array(struct: Literal["ur_altstack"], raw: Buffer, /) -> list[Altstack]: ...
@overload
def abi_decode_array(struct: Literal["ur_module"], raw: Buffer, /) -> list[Module]: ...
def abi_encode(struct: StructName, fields: dict[str, int | bytes | list[int]], /) -> bytes: ...
def abi_encode_array(struct: StructName, rows: Sequence[Sequence[int]], /) -> bytes: ...
def abi_fields(struct: StructName, /) -> list[tuple[str, int, int]]: ...
def abi_field(struct: StructName, field: str, /) -> tuple[int, int]: ...
def abi_sizeof(struct: StructName, /) -> int: ...

# (tid, stack pointer, user_regs_struct, XSAVE area) of a stopped thread.
ThreadRegs = tuple[int, int, bytes, bytes]

class Session:
    def __init__(self, pid: int) -> None: ...
    def stop(self, urgent: bool = False) -> list[ThreadRegs]: ...
    def snapshot(self, helper_tid: int, cmd_addr: int) -> int: ...
    def seccomp_allows_clone(self, tid: int, /) -> bool: ...
    def pending_signal_values(self) -> bytes: ...
    def child_start(self, box_addr: int, /) -> None: ...
    def child_wait(self, timeout_s: float, /) -> bytes: ...
    def child_request(self, request: int, payload: Buffer, timeout_s: float, /) -> bytes: ...
    def calm(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Literal[False]: ...
    @property
    def pid(self) -> int: ...
    @property
    def mem_pid(self) -> int: ...
    @property
    def snapshot_pid(self) -> int | None: ...
    @property
    def pause_ns(self) -> int: ...
    @property
    def timings(self) -> dict[str, float]: ...
    @property
    def urgent(self) -> bool: ...
    @property
    def stopped_threads(self) -> int: ...
    @property
    def group_stopped(self) -> bool: ...
    @property
    def released(self) -> bool: ...

class CopyStats(TypedDict, total=False):
    # A classic copy's
    pages_read: int
    pages_zeroed: int
    pages_kept: int
    pages_untracked: int
    bytes_held: int  # both
    # A copy-on-write snapshot's (cow_start)
    bytes_lost: int
    pages_saved: int
    faults: int
    protect_ns: int
    seal_ns: int
    dirty: int
    seal_saved: int  # of the dirty pages, saved by the seal and left unprotected
    dirty_faults: int  # faults after the seal on pages dirty before it
    present_ns: int  # the seal's walk of the pages present
    lost_unrecorded: int  # some of bytes_lost is not in cow_lost()

class MemoryCopy:
    def __init__(self, pid: int, cache_bytes: int = 0) -> None: ...
    def sync(self, ranges: Buffer, refresh: bool = False, threads: int = 1) -> None: ...
    def load(self, fd: int, offset: int, addr: int, length: int, /) -> None: ...
    def finish(self) -> None: ...
    def read(self, addr: int, n: int, /) -> bytes: ...
    def reset_stats(self) -> None: ...
    def cow_start(self, uffd: int, limit: int = 0, /) -> None: ...
    def cow_register(self, pairs: Buffer, /) -> int: ...
    def cow_protect(self) -> None: ...
    def cow_save(self, pairs: Buffer, /) -> None: ...
    def cow_seal(self) -> None: ...
    def cow_failed(self) -> bool: ...
    def cow_lost(self) -> bytes: ...
    def close(self) -> None: ...
    @property
    def pid(self) -> int: ...
    @property
    def stats(self) -> CopyStats: ...

# Where a reader takes memory from: a pid's /proc/PID/mem, or a finished copy.
Source = int | MemoryCopy

# (tid, state, op, in_ptr, in_size, out_ptr, out_size, stack_lo, stack_hi)
SlotTuple = tuple[int, int, int, int, int, int, int, int, int]

class BigBuffer:
    """Read-only bytes of a native array, not copied (memoryview(b), bytes(b))."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...

class RegistryRead(TypedDict):
    allocs: BigBuffer  # (address, size) u64 pairs
    stack_ids: BigBuffer  # one u32 per allocation
    threads: list[SlotTuple]
    locked_shards: list[tuple[int, int]]  # (shard, owner tid)
    enabled: int
    helper_tid: int
    helper_cmd: int
    region_begin: int
    region_end: int
    options: str
    max_frames: int
    stack_count: int
    stacks_dropped: int  # allocations the shim kept no stack for (its table full or not grown)
    expected: int
    regions: list[tuple[int, int]]
    disabled: int
    disabled_errno: int
    unregistered: int
    helper_frames: int

def read_registry(
    memory: Source, descriptor_addr: int, entries: bool = True, count_maps: bool = True, /
) -> RegistryRead: ...
def read_stacks(
    memory: Source, descriptor_addr: int, ids: Buffer, /
) -> dict[int, tuple[int, ...]]: ...

class _SweepResultBase(TypedDict):
    unreachable: bytes
    leaks: bytes  # abi.h ur_leak_records
    unreachable_count: int
    unreachable_bytes: int
    bytes_scanned: int
    pages_skipped: int
    mark_ns: int
    fold_ns: int
    overlapping: int
    bytes_read: int
    # Of the bytes read from the process, those process_vm_readv read (pages
    # it maps alone); the rest came through /proc/PID/mem.
    bytes_vm_read: int
    allocation_count: int
    allocation_bytes: int
    released_early: bool
    mark_threads: int
    # Passes over the blocks a partial reference graph left out (dense in
    # pointers, read again in address order); 0 when it left none.
    mark_passes: int
    # What the mark's own arrays took at their largest: the walker's (mark
    # bytes, and a sorted copy of the pairs only when they came unsorted),
    # the allocation index's (page entries and buckets), the reference
    # graph's (per block and per edge).
    walker_bytes: int
    index_bytes: int
    graph_bytes: int

class SweepResult(_SweepResultBase, total=False):
    # Graph mode: hits, why and dominators, packed as native/mark/retention.h
    # lays them out (unreachable/retention reads them).
    graph: dict[str, Any]

def sweep(
    memory: Source,
    allocs: Buffer,
    root_ranges: Buffer,
    root_values: Buffer,
    *,
    stack_ids: Buffer = b"",
    excluded: Buffer = b"",
    cache_mb: int = 0,
    release: Session | None = None,
    threads: int = 1,
    layout: Buffer = b"",
    frozen: bool = False,
    regions: Buffer = ...,
    value_regions: Buffer = b"",
    default_region: int = 0,
    region_ids: int = 0,
    why: int | None = None,
    dominators: bool = False,
    live: bool = False,
    usable: bool = False,
) -> SweepResult: ...
def nudge_thread(pid: int, tid: int, /) -> None: ...
def pidfd_getfd(pidfd: int, fd: int, /) -> int: ...
def tee(fd_in: int, fd_out: int, len: int, flags: int, /) -> int: ...
def open_as_user(uid: int, gid: int, groups: Sequence[int], path: str, /) -> int: ...
def pin_open(pid: int, /) -> None: ...
def pin_shut(pid: int, /) -> None: ...
def present_ranges(memory: Source, ranges: Buffer, /) -> bytes: ...
def read_spans(pid: int, spans: Buffer, out: Buffer, threads: int, /) -> int: ...
def written_pages(pid: int, ranges: Buffer, clear: bool, threads: int = 1, /) -> bytes: ...
def track_arm(uffd: int, pid: int, ranges: Buffer, /) -> int: ...
def track_disarm(uffd: int, pid: int, ranges: Buffer, /) -> None: ...
def remark(
    candidates: Buffer,
    state: Buffer,
    store: Buffer,
    runs: Buffer,
    page_bytes: Buffer,
    values: Buffer,
    roots: bool,
    pending: Buffer,
    /,
) -> tuple[int, bytes]: ...
def resolve(
    candidates: Buffer,
    state: Buffer,
    store: Buffer,
    pending: Buffer,
    ranges: Buffer,
    blocks: Buffer,
    /,
) -> int: ...
def pairs_in(candidates: Buffer, allocs: Buffer, /) -> bytes: ...
def size_map_pages_around(memory: int, descriptor_addr: int, ranges: Buffer, /) -> bytes: ...
def size_map_pages(memory: int, descriptor_addr: int, blocks: Buffer, /) -> tuple[bytes, bytes]: ...
def set_cache_budget(nbytes: int, /) -> None: ...
def cache_bound() -> int: ...
def heap_words(words: Buffer, spans: Buffer, /) -> bytes: ...
def code_words(code: Buffer, lo: int, hi: int, /) -> bytes: ...

# (begin, size, stack_id, referenced_count, referenced_size, similar_count,
#  similar_size, similar_referenced_count, similar_referenced_size)
DedupLeak = tuple[int, int, int, int, int, int, int, int, int]

def dedup(leaks: Buffer, limit: int, /) -> list[DedupLeak]: ...

class GlibcHeapWalk(TypedDict):
    allocs: bytes  # (user address, usable size) u64 pairs
    error: str
    busy: bool
    arenas: int
    heaps: int
    chunks: int
    in_use: int
    in_use_bytes: int
    free_binned: int
    free_fast: int
    free_tcache: int
    mmapped: int
    mmapped_bytes: int
    internal: int

def walk_glibc_heap(
    memory: Source,
    minor: int,
    main_arena: int,
    mp: int,
    tcaches: Buffer,
    anon: Buffer,
    page_size: int,
    present: Buffer = ...,
    /,
) -> GlibcHeapWalk: ...
