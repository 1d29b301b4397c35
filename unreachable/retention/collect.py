"""What a scan hands the reference graph's questions (who holds a block, who
retains the heap), and what it gets back.

The scan (unreachable/scan/) runs as always, with its sweep from outside
(native/scanner/sweep.c) in graph mode: the mark keeps its reference graph,
records every root word that points into the heap, and answers while the
memory it read is still open. Each root word belongs to a root region,
labelled here before the sweep: a variable of an object (its data symbol;
the object's other globals otherwise), a thread's TLS, a thread's stack, an
anonymous mapping, a block a thread was inside malloc or free for; each
source of value roots is one (the registers of a thread, epoll data, ...).
Region ids follow a preference: of two roots holding a block directly, the
chain starts at the lower id, so a global names a block before a stack
slot or a register that happens to hold it too.
"""

from __future__ import annotations

import bisect
import errno
import os
import re
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from unreachable import _native
from unreachable.allocations.registry import Registry
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import CapturedThread
from unreachable.errors import ScannerOutOfMemory, TargetUnscannable
from unreachable.process.mapped_file import file_for, fs_root
from unreachable.process.maps import Mapping, find_mapping
from unreachable.process.memory import Memory, read_anonymous
from unreachable.retention.loads import Loads, ObjectLoad, every_load, load_of, object_loads
from unreachable.retention.unwind import frame_of, stack_reader, unwind
from unreachable.roots.classify import RED_ZONE, Roots
from unreachable.symbolize.data_symbols import DataSymbols, load_data_symbols
from unreachable.symbolize.demangle import demangle_all
from unreachable.symbolize.elf_file import NotElf, read_elf
from unreachable.symbolize.frame import Frame
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks
from unreachable.symbolize.unloaded import LoadedObject, read_loaded_objects

if TYPE_CHECKING:
    from unreachable.model.report import ScanReport
    from unreachable.scan import ScanOptions

# user_regs_struct's fields, word by word (NT_PRSTATUS order)
REGISTERS = [name for name, _, _ in _native.abi_fields("user_regs_struct")]
REGISTERS_SIZE = _native.abi_sizeof("user_regs_struct")
# glibc's struct pthread above the thread pointer: its pthread_setspecific
# values are thread-local too (2,304 bytes in glibc 2.36; rounded up).
THREAD_DESCRIPTOR = 0x1000
STACK_COPY = 8 << 20  # of each thread's stack, from SP up, kept for unwinding
PAGE = os.sysconf("SC_PAGE_SIZE")

# Root kinds, in order of preference for naming a chain's root.
KINDS = (
    "global",
    "tls",
    "anonymous",
    "kernel",
    "signal stack",
    "in-flight",
    "stack",
    "registers",
    "other",
)
KERNEL_SOURCES = ("epoll data", "timer values", "signal values", "pipe data", "socket data")


@dataclass(slots=True)
class RootRegion:
    """One root region: a node below the dominator tree's virtual root."""

    kind: str  # one of KINDS
    name: str  # what the report prints, e.g. "g_cache in /usr/bin/x", "stack of thread 12"
    thread: int = 0
    object: str = ""
    symbol: str = ""
    start: int = 0  # address of the symbol, thread pointer, mapping...
    id: int = -1
    bias: int | None = None  # an object's globals: its load's bias


@dataclass(frozen=True, slots=True)
class RootHit:
    where: int  # the word's address; a value root's index
    value: int  # the pointer
    region: int
    index: int  # the block's index in the registry's allocations


@dataclass(slots=True)
class _Labels:
    regions: list[RootRegion] = field(default_factory=list)
    keys: dict[tuple[object, ...], int] = field(default_factory=dict)

    def region(self, key: tuple[object, ...], make: RootRegion) -> int:
        if key not in self.keys:
            self.keys[key] = len(self.regions)
            self.regions.append(make)
        return self.keys[key]


def graph_scan(pid: int, options: ScanOptions | None, collector: GraphCollector) -> ScanReport:
    """A scan that hands its reference graph to collector. The graph is
    kept whole here (GRAPH_EDGES_PER_ALLOC in native/scanner/sweep.c: 64 edges per
    block on average); a heap denser in pointers, or one whose graph does
    not fit in memory, is a one-line error."""
    from unreachable.scan import ScanOptions, scan

    try:
        return scan(pid, replace(options or ScanOptions(), sweep="scanner"), graph=collector)
    except MemoryError:
        raise ScannerOutOfMemory(
            "the heap's reference graph does not fit in this process's memory"
        ) from None
    except OSError as e:
        if e.errno == errno.E2BIG:
            raise TargetUnscannable(
                "the heap holds more pointers than the reference graph keeps "
                "(64 per block on average)"
            ) from None
        raise


class GraphCollector:
    """Asks a scan for the graph (why: the address whose holders are wanted;
    dominators: the dominator tree) and keeps what comes back."""

    def __init__(self, pid: int, why: int | None = None, dominators: bool = False) -> None:
        self.pid = pid
        self.root = fs_root(pid)
        self.why_address = why
        self.dominators = dominators
        self.regions: list[RootRegion] = []
        self.value_sources: list[tuple[str, int]] = []  # (source, first value index)
        self.threads: dict[int, CapturedThread] = {}
        self.hits: list[RootHit] = []
        self.why: dict[str, Any] | None = None
        self.tree: dict[str, Any] | None = None
        self.allocs: memoryview = memoryview(b"").cast("Q")
        self.stack_ids: memoryview = memoryview(b"").cast("I")
        self.stacks: dict[int, tuple[int, ...]] = {}
        self.loaded: list[LoadedObject] = []
        self.mappings: list[Mapping] = []
        self.stack_copies: dict[int, tuple[int, bytes]] = {}
        self.epoll_owners: dict[int, list[tuple[int, int]]] = {}  # data -> (epoll fd, fd)

    # -- before the sweep ---------------------------------------------------

    def arguments(
        self,
        roots: Roots,
        registry: Registry,
        mappings: list[Mapping],
        threads: Sequence[CapturedThread],
        values: Sequence[tuple[str, bytes]],
        memory: Memory,
        kernel_held: KernelHeld | None = None,
    ) -> dict[str, Any]:
        """_native.sweep's graph-mode arguments: every root word labelled.
        For `why`, each thread's stack is copied too, while the target is
        still stopped (or frozen), to unwind it later."""
        labels = _Labels()
        self.threads = {t.tid: t for t in threads}
        if self.why_address is not None:
            self._copy_stacks(mappings, memory)
            if kernel_held is not None:
                self.epoll_owners = _epoll_owners(kernel_held)
        loads = object_loads(mappings, self.pid, self.root)
        specials = _special_intervals(labels, loads, threads)
        bss = _bss_regions(labels, loads)
        intervals = _root_range_intervals(labels, roots, mappings, threads, (specials, bss), loads)
        intervals += _in_flight_intervals(labels, registry)
        value_regions = self._value_regions(labels, values)
        default = labels.region(("other",), RootRegion("other", "other root memory"))
        new_id = self._number_regions(labels)
        return {
            "regions": _packed_intervals(intervals, new_id),
            # one uint32_t region id per root value
            "value_regions": array("I", (new_id[r] for r in value_regions)).tobytes(),
            "default_region": new_id[default],
            "region_ids": len(self.regions),
            "why": self.why_address,
            "dominators": self.dominators,
        }

    def _value_regions(self, labels: _Labels, values: Sequence[tuple[str, bytes]]) -> list[int]:
        """The region of each value root word, in the order the sweep reads
        them; each source's first index goes to value_sources."""
        value_regions: list[int] = []
        for source, words in values:
            count = len(words) // 8
            if not count:
                continue
            self.value_sources.append((source, len(value_regions)))
            rid = labels.region(("value", source), _value_region(source))
            value_regions += [rid] * count
        return value_regions

    def _number_regions(self, labels: _Labels) -> dict[int, int]:
        """Renumbers the regions in order of preference (the C side prefers
        lower ids) into self.regions; returns old id -> new id."""
        order = sorted(
            range(len(labels.regions)),
            key=lambda r: (KINDS.index(labels.regions[r].kind), labels.regions[r].start, r),
        )
        self.regions = [labels.regions[old] for old in order]
        for new, region in enumerate(self.regions):
            region.id = new
        return {old: new for new, old in enumerate(order)}

    def _copy_stacks(self, mappings: list[Mapping], memory: Memory) -> None:
        for t in self.threads.values():
            lo = _sp(t) - RED_ZONE
            m = find_mapping(mappings, lo) or find_mapping(mappings, lo + RED_ZONE)
            if m is None or not m.readable:
                continue
            lo = max(lo, m.start)
            hi = min(m.end, lo + STACK_COPY)
            try:
                self.stack_copies[t.tid] = (lo, read_anonymous(memory, lo, hi))
            except OSError:
                continue

    # -- in the pause (or over the frozen copy), after the sweep ------------

    def collect(
        self,
        graph: dict[str, Any],
        registry: Registry,
        memory: Memory,
        descriptor_addr: int,
        mappings: list[Mapping],
        pid: int,
    ) -> None:
        self.allocs = registry.allocs
        self.stack_ids = registry.stack_ids
        self.mappings = mappings
        self.pid = pid  # the thread group's, should the scan have read a thread's /proc
        self.hits = [
            RootHit(h["where"], h["value"], h["region"], h["block"])
            for h in _native.abi_decode_array("ur_root_hit", graph["hits"])
        ]
        self.why = graph.get("why")
        self.tree = graph.get("dominators")
        wanted: set[int] = set()
        if self.why is not None:
            blocks = [i for i, _, _ in self.why["path"]] + list(self.why["referrers"])
            if self.why["block"] >= 0:
                blocks.append(self.why["block"])
            wanted = {self.stack_ids[i] for i in blocks if i < len(self.stack_ids)}
        if self.tree is not None:
            wanted |= set(self.stack_ids)
        wanted.discard(0)
        self.stacks = read_stacks(memory, descriptor_addr, wanted)
        self.loaded = read_loaded_objects(memory, descriptor_addr) if self.stacks else []

    # -- after the release --------------------------------------------------

    def block(self, index: int) -> tuple[int, int, int]:
        """(address, size, stack id) of allocation `index`."""
        stack = self.stack_ids[index] if index < len(self.stack_ids) else 0
        return self.allocs[2 * index], self.allocs[2 * index + 1], stack

    def frames(self) -> dict[int, list[Frame]]:
        if not self.stacks:
            return {}
        symbolizer = Symbolizer(self.pid, self.mappings, unloaded=self.loaded)
        return symbolizer.symbolize(self.stacks)

    def describe_hit(self, hit: RootHit) -> dict[str, Any]:
        """The root a chain starts at, named: kind, name, and where in it."""
        region = self.regions[hit.region]
        out: dict[str, Any] = {
            "kind": region.kind,
            "region": region.name,
            "name": region.name,
            "value": hit.value,
        }
        if region.thread:
            out["thread"] = region.thread
        if region.kind in ("registers", "kernel", "signal stack") or (
            region.kind == "other" and region.start == -1
        ):
            source, first = self._value_source(hit.where)
            out["name"] = _value_name(source, hit.where - first)
            owners = self.epoll_owners.get(hit.value, []) if source == "epoll data" else []
            if owners:
                epfd, fd = owners[0]
                out["epoll_fd"], out["fd"] = epfd, fd
                out["name"] = f"epoll data of fd {fd} in epoll fd {epfd} (held by the kernel)"
            return out
        out["address"] = hit.where
        if region.kind == "global":
            out["object"] = region.object
            if region.symbol:
                out["symbol"] = region.symbol
                out["offset"] = hit.where - region.start
                out["name"] = f"{region.symbol}+{hit.where - region.start:#x} in {region.object}"
            else:
                out["offset"] = hit.where - region.start
                out["name"] = f"{region.object}+{hit.where - region.start:#x} (no symbol)"
                if region.bias is not None:
                    # The object's own address, as a frame's rel_pc is: what
                    # readelf and gdb name; an offset into a mapping is not.
                    out["vaddr"] = hit.where - region.bias
                    out["name"] = f"{region.object}+{out['vaddr']:#x} (no symbol)"
        elif region.kind == "tls":
            out["name"] = self._tls_name(region, hit.where)
        elif region.kind == "stack" and region.thread in self.threads:
            sp = _sp(self.threads[region.thread])
            out["sp_offset"] = hit.where - sp
            out["name"] = (
                f"stack of thread {region.thread} at {hit.where:#x} (SP+{hit.where - sp:#x})"
            )
            frame = self._frame(region.thread, hit.where)
            if frame is not None:
                out["frame"] = frame
                where = f" at {frame['file']}:{frame['line']}" if frame["file"] else ""
                fn = frame["function"] or f"{frame['map']}+{frame['rel_pc']:#x}"
                out["name"] = (
                    f"stack of thread {region.thread}, frame #{frame['index']} {fn}{where} "
                    f"(the word at {hit.where:#x}, SP+{hit.where - sp:#x})"
                )
        else:
            out["name"] = f"{region.name} at {hit.where:#x}"
        return out

    def _frame(self, tid: int, where: int) -> dict[str, Any] | None:
        """The unwound frame of thread tid that holds the word at where."""
        copy = self.stack_copies.get(tid)
        if copy is None:
            return None
        t = self.threads[tid]
        frames = unwind(_registers(t.regs), stack_reader(*copy), self.mappings, self.pid, self.root)
        frame = frame_of(frames, where)
        if frame is None:
            return None
        symbolizer = Symbolizer(self.pid, self.mappings, unloaded=self.loaded)
        (sym,) = symbolizer.symbolize_pcs([frame.pc])
        return {
            "index": frame.index,
            "pc": frame.pc,
            "map": sym.map,
            "rel_pc": sym.rel_pc,
            "function": sym.function,
            "file": sym.file,
            "line": sym.line,
            "cfa_offset": where - frame.cfa,
        }

    def _value_source(self, index: int) -> tuple[str, int]:
        best = ("", 0)
        for source, first in self.value_sources:
            if first <= index:
                best = (source, first)
        return best

    def _tls_name(self, region: RootRegion, where: int) -> str:
        tp = region.start
        if where >= tp:
            return (
                f"TLS of thread {region.thread}: thread descriptor (pthread keys) +{where - tp:#x}"
            )
        symbols = _exe_symbols(self.pid, self.mappings, self.root)
        if symbols is not None and symbols.tls_memsz:
            block = _round_up(symbols.tls_memsz, symbols.tls_align)
            if tp - block <= where:
                hit = symbols.lookup_tls(where - (tp - block))
                if hit:
                    return (
                        f"TLS of thread {region.thread}: {hit[0]}+{hit[1]:#x} in {_exe(self.pid)}"
                    )
        return f"TLS of thread {region.thread}: thread pointer-{tp - where:#x}"


_REGISTRATION = re.compile(rb"^tfd:\s*(\d+)\s.*\sdata:\s*([0-9a-f]+)", re.MULTILINE)


def _epoll_owners(held: KernelHeld) -> dict[int, list[tuple[int, int]]]:
    """Each epoll registration's data -> (epoll fd, registered fd), from
    the fdinfo read in the pause (or before it, for many registrations)."""
    texts = held.in_pause if held.in_pause is not None else held.before
    out: dict[int, list[tuple[int, int]]] = {}
    if len(texts) != len(held.fds):  # a descriptor closed meanwhile: no way to pair them
        return out
    for epfd, text in zip(held.fds, texts, strict=True):
        for fd, data in _REGISTRATION.findall(text):
            out.setdefault(int(data, 16), []).append((epfd, int(fd)))
    return out


def _round_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def _registers(raw: bytes) -> dict[str, int]:
    """A thread's user_regs_struct by name; registers a short one lacks read as 0."""
    regs = _native.abi_decode("user_regs_struct", bytes(raw).ljust(REGISTERS_SIZE, b"\0"))
    return cast(dict[str, int], regs)  # every field is a word


def _sp(t: CapturedThread) -> int:
    return _registers(t.regs)["rsp"]


def _tp(t: CapturedThread) -> int:
    return _registers(t.regs)["fs_base"]


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _exe_symbols(pid: int, mappings: list[Mapping], root: str) -> DataSymbols | None:
    exe = _exe(pid)
    for m in mappings:
        if m.path == exe:
            file = file_for(pid, m, root)
            return load_data_symbols(file.path, file.mapped)
    return None


def _bss_regions(labels: _Labels, loads: Loads) -> list[tuple[int, int, int]]:
    """Each load's .bss past its file's pages, sorted: the kernel maps it
    anonymous, so its mapping names no file, but it holds the object's
    globals (all that a stripped program's lack a symbol to name them by),
    one region with its .data's."""
    out: list[tuple[int, int, int]] = []
    for load in every_load(loads):
        try:
            segments = read_elf(load.file, mapped=load.mapped).loads
        except (OSError, NotElf, ValueError):
            continue
        for seg in segments:
            lo = _round_up(load.bias + seg.vaddr + seg.filesz, PAGE)
            hi = _round_up(load.bias + seg.vaddr + seg.memsz, PAGE)
            if hi > lo:
                out.append((lo, hi, _globals_region(labels, load, lo)))
    return sorted(out)


def _globals_region(labels: _Labels, load: ObjectLoad, at: int) -> int:
    """The region of a load's globals no symbol covers: its .data and .bss
    alike, which start at its lowest writable address (at, if none seen)."""
    start = load.data_start or at
    return labels.region(
        ("global", load.object, load.bias),
        RootRegion(
            "global", f"globals of {load.name}", object=load.object, start=start, bias=load.bias
        ),
    )


def _special_intervals(
    labels: _Labels,
    loads: Loads,
    threads: Sequence[CapturedThread],
) -> list[tuple[int, int, int]]:
    """Labelled parts of root memory, sorted, disjoint: every variable of
    every load of every object, every thread's TLS."""
    out: list[tuple[int, int, int]] = []
    tls_total = 0
    loaded: list[tuple[ObjectLoad, DataSymbols]] = []
    for load in every_load(loads):
        symbols = load_data_symbols(load.file, load.mapped)
        if symbols is None:
            continue
        if symbols.tls_memsz and load is loads[load.object][0]:
            tls_total += _round_up(symbols.tls_memsz, symbols.tls_align)
        loaded.append((load, symbols))
    # A C++ program's globals are printed as its functions are, demangled
    # (fde::Table, not _ZN3fde5TableE): one batch for every object's names.
    shown = demangle_all({n for _, symbols in loaded for n in symbols.names if n[:2] == "_Z"})
    for load, symbols in loaded:
        bias = load.bias
        # File-static variables of one name in several source files (HotSpot
        # has two _local_table) are told apart by their address in the object.
        twice = {n for n, k in Counter(symbols.names).items() if k > 1}
        for start, end, name in zip(symbols.starts, symbols.ends, symbols.names, strict=True):
            symbol = shown.get(name, name) + (f" (+{start:#x})" if name in twice else "")
            rid = labels.region(
                ("global", load.object, name, start + bias),
                RootRegion(
                    "global",
                    f"{symbol} in {load.name}",
                    object=load.object,
                    symbol=symbol,
                    start=start + bias,
                ),
            )
            out.append((start + bias, end + bias, rid))
    for t in threads:
        tp = _tp(t)
        if not tp:
            continue
        rid = labels.region(
            ("tls", t.tid), RootRegion("tls", f"TLS of thread {t.tid}", thread=t.tid, start=tp)
        )
        out.append((tp - tls_total, tp + THREAD_DESCRIPTOR, rid))
    out.sort()
    disjoint: list[tuple[int, int, int]] = []
    for s, e, rid in out:
        if disjoint and s < disjoint[-1][1]:
            continue  # an alias or a variable inside another: the first wins
        disjoint.append((s, e, rid))
    return disjoint


def _root_range_intervals(
    labels: _Labels,
    roots: Roots,
    mappings: list[Mapping],
    threads: Sequence[CapturedThread],
    labelled: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]],
    loads: Loads,
) -> list[tuple[int, int, int]]:
    """Each root range labelled: by the special intervals (variables, TLS)
    where they lie in it, by its mapping's region elsewhere (an object's
    globals in the anonymous part of its .bss: labelled = (specials, bss))."""
    specials, bss = labelled
    starts = [s for s, _, _ in specials]
    bss_starts = [s for s, _, _ in bss]
    intervals: list[tuple[int, int, int]] = []
    stacks = _stack_mappings(mappings, threads)
    for (begin, end), kind in zip(roots.ranges, roots.range_kinds, strict=True):
        m = find_mapping(mappings, begin)
        base = _base_region(labels, kind, m, begin, stacks, loads)
        pieces = [(begin, end, base)]
        if kind == "anonymous":
            # Cut into the objects' .bss where they cover it, base elsewhere.
            pieces = []
            _overlay(pieces, (begin, end, base), bss, bss_starts)
        for piece in pieces:
            _overlay(intervals, piece, specials, starts)
    return intervals


def _overlay(
    intervals: list[tuple[int, int, int]],
    piece: tuple[int, int, int],
    specials: list[tuple[int, int, int]],
    starts: list[int],
) -> None:
    """piece (begin, end, base) labelled by the special intervals where they
    lie in it, by base elsewhere; starts: the specials' starts."""
    begin, end, base = piece
    at = begin
    i = max(bisect.bisect_right(starts, begin) - 1, 0)
    while i < len(specials) and specials[i][0] < end:
        s, e, rid = specials[i]
        i += 1
        if e <= at:
            continue
        if s > at:
            intervals.append((at, s, base))
        intervals.append((max(s, at), min(e, end), rid))
        at = min(e, end)
    if at < end:
        intervals.append((at, end, base))


def _in_flight_intervals(labels: _Labels, registry: Registry) -> list[tuple[int, int, int]]:
    """The blocks threads were inside malloc or free for, one region per thread."""
    intervals = []
    for t in registry.threads:
        for p, size in t.inflight_blocks():
            rid = labels.region(
                ("in-flight", t.tid),
                RootRegion(
                    "in-flight",
                    f"a block thread {t.tid} was inside malloc/free for",
                    thread=t.tid,
                ),
            )
            intervals.append((p, p + max(size, 1), rid))
    return intervals


def _packed_intervals(intervals: list[tuple[int, int, int]], new_id: dict[int, int]) -> bytes:
    """Sorted, overlaps dropped, as the sweep's ur_root_regions."""
    rows: list[tuple[int, int, int]] = []
    last_end = 0
    for b, e, rid in sorted(intervals):
        if e <= b or b < last_end:
            continue
        rows.append((b, e, new_id[rid]))
        last_end = e
    return _native.abi_encode_array("ur_root_region", rows)


def _stack_mappings(mappings: list[Mapping], threads: Sequence[CapturedThread]) -> dict[int, int]:
    """Start of each mapping a live thread's SP lies in -> that thread."""
    out: dict[int, int] = {}
    for t in threads:
        sp = _sp(t)
        m = find_mapping(mappings, sp - RED_ZONE) or find_mapping(mappings, sp)
        if m is not None:
            out.setdefault(m.start, t.tid)
    return out


def _base_region(
    labels: _Labels,
    kind: str,
    m: Mapping | None,
    begin: int,
    stacks: dict[int, int],
    loads: Loads,
) -> int:
    start = m.start if m else begin
    path = m.path if m else ""
    load = load_of(loads, m) if m and kind == "globals" else None
    if load is not None:
        return _globals_region(labels, load, start)
    if kind == "globals":  # a writable file that is no object's
        return labels.region(
            ("global", path, "", start),
            RootRegion("global", f"globals of {path}", object=path, start=start),
        )
    if kind == "stack":
        tid = stacks.get(start, 0)
        name = f"stack of thread {tid}" if tid else f"stack {path or hex(start)}"
        return labels.region(
            ("stack", tid, start), RootRegion("stack", name, thread=tid, start=start)
        )
    if kind == "anonymous" and path.startswith("[stack"):
        return labels.region(
            ("stack", 0, start),
            RootRegion("stack", f"stack {path} (no thread runs on it)", start=start),
        )
    label = f"anonymous memory {start:#x}-{m.end:#x}" if m else f"root memory at {start:#x}"
    return labels.region(("anonymous", start), RootRegion("anonymous", label, start=start))


def _value_region(source: str) -> RootRegion:
    if source in KERNEL_SOURCES:
        return RootRegion("kernel", f"{source} (held by the kernel)", start=-1)
    if source == "signal stacks":
        return RootRegion("signal stack", "alternate signal stacks", start=-1)
    if source.startswith(("registers ", "vector registers ")):
        tid = int(source.rsplit(" ", 1)[1])
        return RootRegion("registers", f"{source.rsplit(' ', 1)[0]} of thread {tid}", thread=tid,
                          start=-1)  # fmt: skip
    return RootRegion("other", source, start=-1)


def _value_name(source: str, i: int) -> str:
    if source.startswith("registers "):
        reg = REGISTERS[i] if i < len(REGISTERS) else f"word {i}"
        return f"register {reg} of thread {source.split()[1]}"
    if source.startswith("vector registers "):
        off = 8 * i
        where = f"xmm{(off - 160) // 16}" if 160 <= off < 416 else f"xstate+{off:#x}"
        return f"vector register {where} of thread {source.split()[2]}"
    if source in KERNEL_SOURCES:
        return f"{source} (held by the kernel)"
    return source
