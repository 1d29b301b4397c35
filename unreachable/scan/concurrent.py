"""The concurrent snapshot: a mostly-concurrent mark (Boehm, Demers and
Shenker) over the live target, with two short stops and no copy of its heap.

1. Writes tracked (write_tracking.py); the shim's registry copied while the
   target runs (only its own memory: the descriptor, shards, size maps).
2. Stop: bring that copy up to date (the registry pages written since), read
   the registers, release. The allocation set is the registry of this moment.
3. Running: mark from the roots, reading the live memory (no copy): the
   blocks left unmarked are candidates. Their bytes are read into a store.
   Rounds: ask which pages were written since (clearing the marks, so the
   next round sees only newer writes), read those, keep the bytes that lie
   in candidates in the store, and rescue the candidates the other words
   point into (native/scanner/concurrent_mark.c).
   A mapping born after the helper registered the target's is registered
   too, with the helper's own userfaultfd (_Rearm), so that a round
   protects its pages as it does the others'.
4. Stop: read the pages written since the last round and the registers,
   bring the registry copy up to date, release. Given a bound (auto's: the
   pause of the plan it falls through to), rounds that do not converge,
   the stop's read predicted to take longer, end the scan before this stop
   instead (GaveWay): the target has been stopped once, briefly.
5. A candidate is reported only if the registry at the second stop holds
   the same block (begin and size), no thread is inside malloc or free
   for it, and no word of the written pages, the registers or a rescued
   candidate points into it. Blocks allocated between the stops are not in
   the set: never reported (the next scan finds their leaks).

docs/pause.md ("The concurrent mark") argues why no leak can be invented.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import struct
import time
from array import array
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import accumulate

from unreachable import _native
from unreachable.allocations.registry import (
    Registry,
    read_registry,
    registry_regions,
    settle_gone_threads,
    size_map_pages,
    size_map_pages_around,
)
from unreachable.capture.copy_snapshot import SYNC_ANON, SYNC_HELD
from unreachable.capture.kept_out_of_fork import KeptOut
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import CapturedThread, hold_ms, stop_error
from unreachable.capture.target import Target
from unreachable.capture.write_tracking import (
    TrackingUnavailable,
    helper_uffd,
    tracked_writes,
    wait_untracked,
)
from unreachable.errors import mark_reads_too_much
from unreachable.process.cgroup_memory import memory_headroom, scanner_cache_budget
from unreachable.process.maps import SPECIAL, Mapping, parse_maps, read_maps, read_maps_text
from unreachable.process.memory import present_ranges
from unreachable.roots import sources
from unreachable.roots.classify import Roots, classify, stack_sps
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.roots.glibc_heaps import heap_parts, registry_blocks_in
from unreachable.roots.heap_words import heap_spans
from unreachable.sweep.child import mark_threads_beside, words
from unreachable.sweep.mark import SweepResult, from_native, layout

# The mark reads the live heap through a chunk cache: this bounds it (the
# scanner's memory is the allocation index, the candidates' bytes and this).
CACHE_BYTES = 8 << 20
# Concurrent rounds before the final stop: each reads the pages written
# since the previous one, so the stop reads only what was written during
# the last. Stop early once a round reads this little.
MAX_ROUNDS = 3
SMALL_ROUND = 1 << 20
# A round that reads more than this share of the one before has not
# shrunk: with a bound to keep, the mark gives way at once rather than
# spend its last rounds.
SHRINK = 0.5
# The probe before the first mark: how long it lets the target write, and
# how much of what it wrote it reads to time the reading.
PROBE_S = 0.05
PROBE_READ = 16 << 20
# Readers in a stop. While the target runs, the first mark's threads (each
# reading the live target through a chunk cache of its own, CACHE_BYTES
# each) and the readers of the rounds and the registry copies are the
# cores the target's busy threads leave free (sweep/child.py
# mark_threads_beside): one on a core the target's thread needs makes that
# thread wait a scheduler slice (docs/pause.md, "What the target feels").
READ_THREADS = 2
# The descriptor fields that point into shim memory the registry reader reads.
_POINTERS = ("shards", "threads", "stacks", "size_maps", "regions", "options", "modules")


@dataclass(slots=True)
class ConcurrentSweep:
    """What the stages after the sweep need (scan/run.py, run_concurrent)."""

    result: SweepResult
    mappings: list[Mapping]  # as at the second stop
    roots: Roots
    threads: list[CapturedThread]  # as at the second stop
    pauses_ms: tuple[float, float]
    value_counts: dict[str, int] = field(default_factory=dict)  # root words by kind
    rounds: list[int] = field(default_factory=list)  # bytes read per round, then at the stop
    rescued: int = 0  # candidates the re-mark found reachable after all
    rearmed: int = 0  # bytes of mappings born during the mark, registered for tracking
    gone: int = 0  # candidates freed or reallocated between the stops
    # Each stop, step by step (ms): what its pause went to.
    stop1_ms: dict[str, float] = field(default_factory=dict)
    stop2_ms: dict[str, float] = field(default_factory=dict)
    # time.monotonic() as each release begins, every thread still stopped: a
    # thread's clock reading before it came before the stop's end.
    released_at: list[float] = field(default_factory=list)
    unread: str = ""  # queues of pipes and sockets the last stop did not read (in_flight.py)

    @property
    def pause_ms(self) -> float:
        """The longer of the two stops: what the target felt at once."""
        return max(self.pauses_ms)

    @property
    def hold_ms(self) -> float:
        """The longer of the two stops' holds, each from its last thread stopped."""
        stops = (self.stop1_ms, self.stop2_ms)
        return max(hold_ms({k[1:]: v for k, v in s.items() if k[:1] == "@"}) for s in stops)


class GaveWay(Exception):
    """The rounds did not converge: the last stop, predicted from the bytes
    the last round read and the rate it read them at, would have paused
    the target longer than the bound. Raised before that stop; nothing is
    reported, and the target was stopped once. probe_ms: raised by the
    probe before the first mark, the target writing more in that time than
    the scanner reads."""

    def __init__(
        self, rounds: list[int], predicted_ms: float, bound_ms: float, probe_ms: float = 0.0
    ) -> None:
        self.rounds = rounds  # bytes read per round (the probe's: listed)
        self.predicted_ms = predicted_ms
        self.bound_ms = bound_ms
        self.probe_ms = probe_ms
        per = f"in {probe_ms:.0f} ms, more than it reads" if probe_ms else "per round"
        super().__init__(
            f"concurrent mark did not converge: {rounds[-1] / 1e6:.0f} MB written {per}"
            f" (its last stop would have paused about {predicted_ms:.0f} ms,"
            f" the next plan about {bound_ms:.0f} ms)"
        )


def _pack(ranges: Sequence[tuple[int, int]]) -> bytes:
    return _native.abi_encode_array("ur_range", ranges)


def _merged_runs(listed: Sequence[bytes]) -> bytes:
    """Runs of written pages listed at different times, as one sorted list
    of disjoint runs."""
    decoded = (_native.abi_decode_array("ur_range", runs) for runs in listed)
    return _pack(_merge([(r["begin"], r["end"]) for runs in decoded for r in runs]))


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b, e in sorted(ranges):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out


Span3 = tuple[int, int, int]  # begin, end, page_sync flags


def _registry_spans(pid: int, addr: int, mappings: list[Mapping]) -> list[Span3]:
    """What the registry reader reads: the shim's regions, exactly (an
    anonymous mapping in /proc/PID/maps may merge a region with its
    neighbours, the heap's among them), and the mappings that hold the
    descriptor and what it points to outside them; readable parts only."""
    raw = _native.abi_decode(
        "ur_descriptor", os.pread(_mem_fd(pid), _native.abi_sizeof("ur_descriptor"), addr)
    )
    points = [addr, *(int(raw[name]) for name in _POINTERS if raw.get(name))]  # type: ignore[literal-required]
    # Not read_registry(): that counts every size map's entries.
    regions = registry_regions(pid, addr)
    want = list(regions)
    for m in mappings:
        if any(m.start <= p < m.end and not any(b <= p < e for b, e in regions) for p in points):
            want.append((m.start, m.end))
    out: list[Span3] = []
    for m in mappings:
        if not m.readable:
            continue
        for b, e in _merge(want):
            lo, hi = max(b, m.start), min(e, m.end)
            if lo < hi:
                out.append((lo, hi, SYNC_ANON if m.demand_zero else 0))
    return sorted(out)


_fds: dict[int, int] = {}


def _mem_fd(pid: int) -> int:
    if pid not in _fds:
        _fds[pid] = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    return _fds[pid]


def _sync_ranges(spans: Sequence[Span3]) -> bytes:
    return _native.abi_encode_array("ur_sync_range", spans)


def _subtract(ranges: list[tuple[int, int]], holes: Sequence[Span3]) -> list[tuple[int, int]]:
    out = []
    for b, e in ranges:
        pos = b
        for hb, he, _ in sorted(holes):
            if he <= pos or hb >= e:
                continue
            if hb > pos:
                out.append((pos, hb))
            pos = max(pos, he)
        if pos < e:
            out.append((pos, e))
    return out


def _pairs(packed: bytes) -> list[tuple[int, int]]:
    """Packed ur_range pairs (two u64 each) as tuples: a memoryview's slices,
    not a dict per range (thousands: a candidate's entry page each)."""
    words = memoryview(packed).cast("Q")
    return list(zip(words[::2], words[1::2], strict=True))


def _candidate_spans(
    spans: Sequence[Span3], bodies: list[tuple[int, int]], pages: list[tuple[int, int]]
) -> list[Span3]:
    """The registry's spans without the size maps' bodies, but for the pages
    of the candidates' entries (_native.size_map_pages): a copy of these
    decodes each candidate as a whole copy would. A map made after bodies
    were found is copied whole."""
    holes = sorted((b, e, 0) for b, e in bodies)
    pages = sorted(pages)
    begins = [pb for pb, _ in pages]
    # The furthest end up to each page: every page before the first whose
    # reach passes b ends at or before b.
    reach = list(accumulate((pe for _, pe in pages), max))
    out: list[Span3] = []
    for b, e, flags in spans:
        kept = _subtract([(b, e)], holes)
        first, last = bisect.bisect_right(reach, b), bisect.bisect_left(begins, e)
        kept += [(max(pb, b), min(pe, e)) for pb, pe in pages[first:last] if pb < e and b < pe]
        out += [(lo, hi, flags) for lo, hi in _merge(kept)]
    return out


def _held_spans(
    spans: Sequence[Span3], copied: Sequence[Span3], whole: Sequence[tuple[int, int]] = ()
) -> list[Span3]:
    """What the second stop brings up to date: in the spans the copy was
    made from, the pages it holds (UR_SYNC_HELD: a few kernel walks, where
    the scattered pages themselves were one walk each, thousands in the
    pause); whatever is new since, and the pages of `whole`, whole."""
    out: list[Span3] = []
    for b, e, flags in spans:
        asked = [(max(wb, b), min(we, e)) for wb, we in whole if wb < e and b < we]
        new = _merge(_subtract([(b, e)], copied) + asked)
        held = _subtract([(b, e)], [(nb, ne, 0) for nb, ne in new])
        out += [(lo, hi, flags | SYNC_HELD) for lo, hi in held]
        out += [(lo, hi, flags) for lo, hi in new]
    return sorted(out)


def _may_hold_words(m: Mapping) -> bool:
    """Writable or anonymous readable memory."""
    return m.readable and m.path not in SPECIAL and (m.writable or m.inode == 0)


def _tracked(mappings: Sequence[Mapping], skip: Sequence[Span3]) -> bytes:
    """Where words may be roots or candidates and writes are tracked: the
    private memory of _may_hold_words, the registry's own left out (never a
    root, and its write marks are the registry copy's: a round must not
    clear them)."""
    out = [(m.start, m.end) for m in mappings if m.private and _may_hold_words(m)]
    return _pack(_subtract(_merge(out), skip))


def _shared(mappings: Sequence[Mapping]) -> bytes:
    """Shared memory that may hold words. Its writes are not tracked (another
    process writes it through page tables of its own), so a round or the
    stop would list every present page: it is read after the last stop is
    released instead, as a fork or copy snapshot reads it, live."""
    return _pack(
        _merge([(m.start, m.end) for m in mappings if not m.private and _may_hold_words(m)])
    )


def _read_runs(pid: int, runs: bytes, threads: int = READ_THREADS) -> bytearray:
    total = sum(r["end"] - r["begin"] for r in _native.abi_decode_array("ur_range", runs))
    out = bytearray(total)
    if total:
        _native.read_spans(pid, runs, out, threads)
    return out


def _values(
    threads: Sequence[CapturedThread],
    held: KernelHeld | None,
    mappings: Sequence[Mapping],
    registry: Registry,
) -> dict[str, bytes]:
    """The values only the kernel holds, and the registers: roots/sources.py's
    own, pipe and socket bytes filtered by the same spans as in every mode
    (every readable anonymous mapping at that stop: a superset of where the
    candidates lie, as each is the same block at both stops)."""
    return {
        "registers": b"".join(v.words for v in sources.registers(threads, registry)),
        **{
            v.source: v.words
            for v in (
                sources.epoll_data(held),
                sources.timer_values(held),
                sources.signal_values(held),
                sources.pipe_data(held, mappings),
                sources.socket_data(held, mappings),
            )
        },
    }


def _stop(
    pid: int, steps: dict[str, float]
) -> tuple[_native.Session, list[CapturedThread], KernelHeld]:
    held = KernelHeld.before_stop(pid)
    session = _native.Session(pid)
    t0 = time.monotonic()
    try:
        threads = [CapturedThread(*t) for t in session.stop(urgent=True)]
    except OSError as e:
        session.close()
        held.close()
        raise stop_error(pid, e) from None
    t1 = time.monotonic()
    held.read_in_pause()
    held.signals = session.pending_signal_values()
    steps["stop threads"] = (t1 - t0) * 1000
    steps["kernel-held"] = (time.monotonic() - t1) * 1000
    return session, threads, held


class _MapsAhead:
    """The target's mappings and the registry's spans found before a stop,
    while it runs. In the stop, /proc/PID/maps and the descriptor are read
    again (two reads) and the rest is done again only if either changed
    meanwhile: a region of the shim is mapped before it is counted, and its
    span never changes once counted."""

    def __init__(self, pid: int, addr: int) -> None:
        self.pid, self.addr = pid, addr
        self.text = read_maps_text(pid)
        self.maps = parse_maps(self.text)
        self.key = self._key()
        self.spans = _registry_spans(pid, addr, self.maps)

    def _key(self) -> tuple[int, ...]:
        raw = _native.abi_decode(
            "ur_descriptor",
            os.pread(_mem_fd(self.pid), _native.abi_sizeof("ur_descriptor"), self.addr),
        )
        return tuple(int(raw[name]) for name in (*_POINTERS, "num_regions"))  # type: ignore[literal-required]

    def in_pause(self) -> tuple[list[Mapping], list[Span3]]:
        text = read_maps_text(self.pid)
        if text == self.text and self._key() == self.key:
            return self.maps, self.spans
        maps = parse_maps(text)
        return maps, _registry_spans(self.pid, self.addr, maps)


def _begin_of(pairs: memoryview, i: int) -> int:
    return int(pairs[2 * i])


def _read_registry(
    copy: _native.MemoryCopy, addr: int, threads: Sequence[CapturedThread]
) -> Registry:
    """The registry copied at a stop of threads, read as the other
    snapshots read it: a slot whose thread was not stopped (gone inside a
    call) names nothing in flight (allocations/registry.py
    settle_gone_threads), where its blocks stayed roots of every scan."""
    registry = read_registry(copy, addr)
    settle_gone_threads(registry, copy, {t.tid for t in threads})
    return registry


def _inflight(registry: Registry) -> dict[int, int]:
    return {p: s for t in registry.threads for p, s in t.inflight_blocks()}


def concurrent_sweep(
    target: Target, give_way_ms: float | None = None, mark_threads: int = 0, spare: int = 0
) -> ConcurrentSweep:
    """The whole concurrent mark (module docstring), by mark_threads
    marking threads (0: the spare cores). spare: the cores the target's
    busy threads leave the scan (mark_threads_beside; 0: counted here);
    with one, the tracking's end runs on this thread, not beside the rest
    of the scan (end_in_background). Raises TrackingUnavailable, having
    reported nothing, when writes cannot be tracked; GaveWay, before its
    last stop, when that stop is predicted to pause longer than
    give_way_ms."""
    pid, addr = target.pid, target.shim.descriptor_addr
    spare = spare or mark_threads_beside(pid, (target.header.helper_tid,))
    rearm = _Rearm(pid)
    try:
        with ExitStack() as tracking:
            tracking.enter_context(tracked_writes(target, beside=spare > 1))
            team = mark_threads or spare
            return _sweep(target, pid, addr, rearm, give_way_ms, team, tracking.close)
    except GaveWay:
        rearm.close()
        wait_untracked(target)
        raise
    finally:
        # After the helper's STOP: a mapping registered here after the
        # helper unregistered the others is unregistered as the last
        # descriptor of that userfaultfd closes.
        rearm.close()
        if (fd := _fds.pop(pid, None)) is not None:
            os.close(fd)


_UFFDIO_REGISTER = 0xC020AA00  # _IOWR(0xAA, 0x00, struct uffdio_register)
_UFFDIO_REGISTER_MODE_WP = 2


class _Rearm:
    """Mappings born after the helper registered the target's (an arena,
    the brk heap grown, a thread's stack) carry no write protection, and
    the kernel's protecting walk passes over them: no round lists them,
    and the last stop would read all their pages. The helper's
    userfaultfd, duplicated here (pidfd_getfd), registers them: its ioctls
    act on the target's memory whoever calls them. The round that follows
    lists their present pages and protects them, as it does the others'.
    Without that descriptor (the call not allowed, no single userfaultfd
    of the helper's kind in the target), the last stop reads them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd = -1
        self.known: set[tuple[int, int]] = set()
        self.registered = 0

    def start(self, mappings: Sequence[Mapping]) -> None:
        """Once tracking is on: the mappings there now are the helper's."""
        self.known = {(m.start, m.end) for m in mappings if _armable(m)}
        self.fd = helper_uffd(self.pid, asynchronous=True)

    def arm(self, mappings: Sequence[Mapping], skip: Sequence[Span3]) -> None:
        if self.fd < 0:
            return
        for m in mappings:
            if not _armable(m) or (m.start, m.end) in self.known:
                continue
            self.known.add((m.start, m.end))
            if any(b < m.end and m.start < e for b, e, _ in skip):
                continue  # the registry copy's own marks
            arg = bytearray(
                struct.pack("<QQQQ", m.start, m.end - m.start, _UFFDIO_REGISTER_MODE_WP, 0)
            )
            try:
                fcntl.ioctl(self.fd, _UFFDIO_REGISTER, arg)
            except OSError:
                continue  # gone meanwhile, or another userfaultfd's: read by the stop
            self.registered += m.end - m.start

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _armable(m: Mapping) -> bool:
    """What the helper registers (write_tracking.c, track_mapping)."""
    return m.readable and m.writable and m.private and m.path not in SPECIAL


def _registry_copy(
    pid: int, reg_maps: Sequence[Span3], threads: int = READ_THREADS
) -> _native.MemoryCopy:
    """The registry's memory copied while the target runs (brought up to
    date at the next stop)."""
    copy = _native.MemoryCopy(pid)
    try:
        copy.sync(_sync_ranges(reg_maps), threads=threads)
    except (OSError, MemoryError) as e:
        copy.close()
        raise TrackingUnavailable(f"copying the shim's registry failed: {e}") from None
    return copy


def _sweep(
    target: Target,
    pid: int,
    addr: int,
    rearm: _Rearm,
    give_way_ms: float | None,
    mark_threads: int,
    end_tracking: Callable[[], object],
) -> ConcurrentSweep:
    released: list[float] = []
    maps0 = read_maps(pid)
    rearm.start(maps0)
    team = mark_threads
    copy = _registry_copy(pid, _registry_spans(pid, addr, maps0), team)
    try:
        # First stop: the allocation set of this moment, and the registers.
        stop1: dict[str, float] = {}
        ahead = _MapsAhead(pid, addr)
        session, threads1, held1 = _stop(pid, stop1)
        try:
            t0 = time.monotonic()
            maps1, reg_maps = ahead.in_pause()
            t1 = time.monotonic()
            copy.sync(_sync_ranges(reg_maps), refresh=True, threads=READ_THREADS)
            copy.finish()
            t2 = time.monotonic()
            released.append(time.monotonic())
            session.release()
            stop1["maps"] = (t1 - t0) * 1000
            stop1["registry"] = (t2 - t1) * 1000
            stop1 |= {f"@{k}": v for k, v in session.timings.items()}
            pause1 = session.pause_ns / 1e6
        finally:
            session.close()
        holder = [_read_registry(copy, addr, threads1)]
    finally:
        copy.close()
    # Handed over in a list the callee empties: the decoded registry (16-20
    # bytes per allocation) is let go once the candidates are known, before
    # the second registry copy is made.
    return _mark(
        target,
        pid,
        addr,
        holder,
        maps1,
        threads1,
        held1,
        pause1,
        stop1,
        released,
        rearm,
        give_way_ms,
        team,
        end_tracking,
    )


def _first_roots(
    target: Target,
    pid: int,
    registry: Registry,
    maps1: list[Mapping],
    threads1: list[CapturedThread],
    held1: KernelHeld,
) -> tuple[Roots, list[tuple[int, int]], dict[str, bytes]]:
    """The roots of the first stop: ranges, the heap's spans, and the
    values that are roots wherever they lie."""
    roots, spans = _root_ranges(target, pid, registry, maps1, threads1, present=True)
    values1 = _values(threads1, held1, maps1, registry)
    values1["signal stacks"] = sources.signal_stacks(pid, _altstacks(target), threads1).words
    values1["exited threads' control blocks"] = sources.exited_threads_dtvs(roots.dead_dtvs).words
    values1["code immediates"] = sources.jit_code(pid, maps1, spans, KeptOut()).words
    return roots, spans, values1


def _root_ranges(
    target: Target,
    pid: int,
    registry: Registry,
    maps: list[Mapping],
    threads: list[CapturedThread],
    present: bool,
) -> tuple[Roots, list[tuple[int, int]]]:
    """The root ranges at a stop, and the heap's spans. present: trimmed
    to the pages that exist (the mark reads them; a range only tested
    for holding an address needs no trimming)."""
    arena = find_main_arena(pid, maps)
    heap = heap_parts(pid, maps, registry_blocks_in(registry))
    roots = classify(
        maps,
        stack_sps(threads, registry),
        registry,
        target.shim.path,
        [r for r in (arena, target.shim.bss) if r],
        heap,
        partial(present_ranges, pid) if present else None,
        pid,
    )
    return roots, heap_spans(maps, heap)


def _resolve(
    target: Target,
    pid: int,
    final: Registry,
    maps2: list[Mapping],
    threads2: list[CapturedThread],
    cands: bytes,
    state: bytearray,
    store: bytearray,
    pending: bytes,
) -> int:
    """The pending words (written pages' words outside the candidates) that
    lie, at the second stop, in a root range or in a block: they rescue
    their candidates. The others were stale (a freed chunk, a stack's dead
    frames): no roots, as in every mode. The registry copy holds every
    block over a pending word (_second_stop), if not every block."""
    if not pending:
        return 0
    roots, _ = _root_ranges(target, pid, final, maps2, threads2, present=False)
    inflight = [(p, p + max(s, 1)) for p, s in _inflight(final).items()]
    ranges = _pack(_merge(list(roots.ranges) + inflight))
    return _native.resolve(cands, state, store, pending, ranges, final.allocs.cast("B"))


def _altstacks(target: Target) -> tuple[int, int]:
    return target.header.altstacks, target.header.num_altstacks


def _candidates(
    pid: int, registry: Registry, raw: _native.SweepResult, team: int
) -> tuple[bytes, list[int], bytearray, bytearray]:
    """Every block the first mark left unmarked, sorted by address: their
    (begin, size) pairs, stack ids, re-mark states and stored bytes, read
    by team threads (the target runs)."""
    pairs = registry.allocs
    ids = registry.stack_ids
    idx = sorted(array("I", raw["unreachable"]), key=partial(_begin_of, pairs))
    cands = _native.abi_encode_array("ur_block", [(pairs[2 * i], pairs[2 * i + 1]) for i in idx])
    cand_ids = [ids[i] for i in idx]
    runs = _pack([(pairs[2 * i], pairs[2 * i] + pairs[2 * i + 1]) for i in idx])
    return cands, cand_ids, bytearray(len(idx)), _read_runs(pid, runs, team)


def _mark(
    target: Target,
    pid: int,
    addr: int,
    holder: list[Registry],
    maps1: list[Mapping],
    threads1: list[CapturedThread],
    held1: KernelHeld,
    pause1: float,
    stop1: dict[str, float],
    released: list[float],
    rearm: _Rearm,
    give_way_ms: float | None,
    team: int,
    end_tracking: Callable[[], object],
) -> ConcurrentSweep:
    plan = _Rounds(pid, _registry_spans(pid, addr, maps1), rearm, pause1, give_way_ms, team)
    plan.end_tracking = end_tracking
    if give_way_ms is not None:
        plan.probe()
    # The first mark, over the live memory.
    registry = holder.pop()
    roots, spans, values1 = _first_roots(target, pid, registry, maps1, threads1, held1)
    inflight = _inflight(registry)
    ranges = list(roots.ranges) + [(p, p + max(s, 1)) for p, s in inflight.items()]
    allocs = registry.allocs.cast("B")
    _native.set_cache_budget(CACHE_BYTES)
    try:
        raw = _native.sweep(
            pid,
            allocs,
            _pack(ranges),
            b"".join(values1.values()),
            stack_ids=registry.stack_ids.cast("B"),
            excluded=words(inflight),
            threads=team,
            layout=layout(maps1),
            live=True,
        )
    except OSError as e:
        if (why := mark_reads_too_much(e)) is None:
            raise
        raise why from None
    finally:
        # The registry copies are bounded by the scanner's own room only.
        _native.set_cache_budget(scanner_cache_budget(memory_headroom(os.getpid())))
    cands, cand_ids, state, store = _candidates(pid, registry, raw, team)
    del allocs, registry
    # The registry copy for the second stop, made before the last rounds:
    # whatever the target writes meanwhile is then read by a round, not in
    # the pause. It only decides which candidates are still the same
    # blocks, so of the size maps (most of the registry) it holds only the
    # pages of the candidates' entries.
    maps_now = read_maps(pid)
    reg_maps = _registry_spans(pid, addr, maps_now)
    bodies, pages = size_map_pages(pid, addr, cands)
    copy = _registry_copy(pid, _candidate_spans(reg_maps, _pairs(bodies), _pairs(pages)), team)
    second = partial(_held_spans, copied=reg_maps)
    try:
        return _finish(
            target,
            pid,
            addr,
            roots,
            spans,
            raw,
            values1,
            cands,
            cand_ids,
            state,
            store,
            copy,
            second,
            pause1,
            stop1,
            released,
            replace(plan, reg_maps=reg_maps),
        )
    finally:
        copy.close()


@dataclass(slots=True)
class _Rounds:
    """The rounds' inputs, and what they measure to predict the last stop."""

    pid: int
    reg_maps: list[Span3]
    rearm: _Rearm
    pause1_ms: float  # the first stop: what the last one takes besides its read
    give_way_ms: float | None  # the bound on that prediction (None: none)
    threads: int = READ_THREADS  # readers while the target runs (mark_threads_beside)
    read_bytes: int = 0
    read_s: float = 0.0
    pending: bytes = b""  # the rounds' words that the last stop decides on (remark)
    # Takes the write tracking down (in the background, write_tracking.py
    # end_in_background): called once the last stop is released.
    end_tracking: Callable[[], object] | None = None
    # The pages the probe listed (and protected again): the first mark may
    # not read them all (a block allocated since the first stop is not in
    # its registry), so the first round reads them with its own.
    probed: list[bytes] = field(default_factory=list)

    def predict_ms(self, walk_s: float, nbytes: int) -> float:
        """The last stop, were it taken now: the first stop's length, the
        written-page walk, and the pages written meanwhile (about what the
        last round read) at the rate the rounds read them."""
        rate = self.read_bytes / self.read_s if self.read_s > 0 else 0.0
        read_ms = nbytes / rate * 1000 if rate > 0 else 0.0
        return self.pause1_ms + walk_s * 1000 + read_ms

    def _listed(self) -> tuple[bytes, float] | None:
        """The pages written since the last call, protected again, and how
        long the walk took; None when marks cannot be cleared."""
        t0 = time.monotonic()
        maps = read_maps(self.pid)
        self.rearm.arm(maps, self.reg_maps)
        try:
            runs = _native.written_pages(self.pid, _tracked(maps, self.reg_maps), True)
        except OSError:
            return None
        return runs, time.monotonic() - t0

    def probe(self) -> None:
        """Before the first mark (seconds of work on a big heap): what the
        target writes in PROBE_S. Rounds cannot shrink below what it writes
        in the time they take to read it: once a round reads W(t) bytes,
        written in t, taking longer than t, the next reads at least as
        much. So if W(PROBE_S) takes longer than PROBE_S to read, and that
        read would make the last stop pass the bound, the mark gives way
        now. The pages it lists (written since the arming, protected
        again) are kept for the first round: the first mark reads only the
        blocks of the first stop's registry, and a block allocated since
        may hold the only pointer to one of them."""
        first = self._listed()
        if first is None:
            return
        self.probed.append(first[0])
        t0 = time.monotonic()
        time.sleep(PROBE_S)
        got = self._listed()
        if got is None:
            return
        runs, walk_s = got
        self.probed.append(runs)
        spans = _native.abi_decode_array("ur_range", runs)
        written = sum(r["end"] - r["begin"] for r in spans)
        if written <= SMALL_ROUND:
            return
        sample, n = [], 0
        for r in spans:
            if n >= PROBE_READ:
                break
            sample.append((r["begin"], min(r["end"], r["begin"] + PROBE_READ - n)))
            n += sample[-1][1] - sample[-1][0]
        interval = time.monotonic() - t0
        t1 = time.monotonic()
        _read_runs(self.pid, _pack(sample), self.threads)
        self.read_bytes += n
        self.read_s += time.monotonic() - t1
        predicted = self.predict_ms(walk_s, written)
        assert self.give_way_ms is not None
        if predicted - self.pause1_ms > interval * 1000 and predicted > self.give_way_ms:
            raise GaveWay([written], predicted, self.give_way_ms, interval * 1000)

    def run(self, cands: bytes, state: bytearray, store: bytearray) -> tuple[list[int], int]:
        """Re-mark from the pages written meanwhile, the target running,
        until a round reads little: the bytes each round read, and the
        candidates rescued. Raises GaveWay when they do not converge and
        the last stop would pass the bound."""
        rounds: list[int] = []
        rescued = 0
        for i in range(MAX_ROUNDS):
            got = self._listed()
            if got is None and not self.probed:
                # Marks cannot be cleared: the stop reads all written since the start.
                break
            runs, walk_s = got if got is not None else (b"", 0.0)
            if self.probed:
                runs = _merged_runs([*self.probed, runs])
                self.probed.clear()
            t1 = time.monotonic()
            page_bytes = _read_runs(self.pid, runs, self.threads)
            t2 = time.monotonic()
            n = len(page_bytes)
            rounds.append(n)
            self.read_bytes += n
            self.read_s += t2 - t1
            found, self.pending = _native.remark(
                cands, state, store, runs, page_bytes, b"", True, self.pending
            )
            rescued += found
            if n <= SMALL_ROUND:
                break
            if self.give_way_ms is None:
                continue
            predicted = self.predict_ms(walk_s, n)
            shrunk = i == 0 or n <= rounds[-2] * SHRINK
            if predicted > self.give_way_ms and (not shrunk or i == MAX_ROUNDS - 1):
                raise GaveWay(rounds, predicted, self.give_way_ms)
        return rounds, rescued


_SecondStop = tuple[
    list[CapturedThread],
    KernelHeld,
    list[Mapping],
    bytes,
    bytearray,
    bytes,
    float,
    dict[str, float],
]


def _second_stop(
    target: Target,
    pid: int,
    addr: int,
    copy: _native.MemoryCopy,
    second: Callable[..., list[Span3]],
    pending: bytes,
    released: list[float],
) -> _SecondStop:
    """Second stop: the pages written since the last round, the registers,
    the registry (with the shim's table of signal stacks); and how long
    each step held it. The registry copy learns, besides the candidates,
    every block over the words the re-mark leaves pending: those of the
    rounds and those of the pages read now (_resolve)."""
    stop2: dict[str, float] = {}
    ahead = _MapsAhead(pid, addr)
    words_at = _pack([(a, a + 8) for a in _pending_addresses(pending)])
    session, threads2, held2 = _stop(pid, stop2)
    try:
        t = [time.monotonic()]
        maps2, reg_maps = ahead.in_pause()
        t.append(time.monotonic())
        runs = _native.written_pages(pid, _tracked(maps2, reg_maps), False, READ_THREADS)
        t.append(time.monotonic())
        page_bytes = _read_runs(pid, runs)
        t.append(time.monotonic())
        entries = _pairs(size_map_pages_around(pid, addr, runs + words_at))
        spans = _sync_ranges(second(reg_maps, whole=entries))
        copy.sync(spans, refresh=True, threads=READ_THREADS)
        copy.finish()
        t.append(time.monotonic())
        released.append(time.monotonic())
        session.release()
        steps = ("maps", "written", "read", "registry")
        stop2 |= {k: (b - a) * 1000 for k, a, b in zip(steps, t, t[1:], strict=False)}
        stop2 |= {f"@{k}": v for k, v in session.timings.items()}
        pause2 = session.pause_ns / 1e6
    finally:
        session.close()
    # The shim's table of signal stacks lies in its regions: the registry
    # copy holds it as at the stop.
    altstacks = sources.signal_stacks(copy, _altstacks(target), threads2).words
    return threads2, held2, maps2, runs, page_bytes, altstacks, pause2, stop2


def _pending_addresses(pending: bytes) -> list[int]:
    """The addresses of the re-mark's pending words ((address, candidate) pairs)."""
    return list(array("Q", pending)[::2])


def _drop_changed(cands: bytes, state: bytearray, final: Registry) -> int:
    """Candidates the registry no longer holds as they were, or that a
    thread is inside malloc/free for, are no leaks (state 3): how many of
    them the mark had not rescued."""
    same = _native.pairs_in(cands, final.allocs.cast("B"))
    inflight2 = _inflight(final)
    gone = 0
    begins = [b["begin"] for b in _native.abi_decode_array("ur_block", cands)]
    for i in range(len(state)):
        if not same[i] or begins[i] in inflight2:
            if state[i] == 0:
                gone += 1
            state[i] = 3
    return gone


def _fold_left(
    pid: int,
    raw: _native.SweepResult,
    cands: bytes,
    cand_ids: list[int],
    state: bytearray,
    maps2: list[Mapping],
) -> _native.SweepResult:
    """The first mark's fold stands when no candidate changed; otherwise
    fold again what is left (blocks no one can reach: the target no longer
    writes them, so reading them live is sound)."""
    keep = [i for i in range(len(state)) if state[i] == 0]
    if len(keep) == len(state):
        return raw
    return _native.sweep(
        pid,
        b"".join(cands[16 * i : 16 * i + 16] for i in keep),
        b"",
        b"",
        stack_ids=array("I", [cand_ids[i] for i in keep]).tobytes(),
        threads=1,
        layout=layout(maps2),
    )


def _finish(
    target: Target,
    pid: int,
    addr: int,
    roots: Roots,
    spans: list[tuple[int, int]],
    raw: _native.SweepResult,
    values1: dict[str, bytes],
    cands: bytes,
    cand_ids: list[int],
    state: bytearray,
    store: bytearray,
    copy: _native.MemoryCopy,
    second: Callable[..., list[Span3]],
    pause1: float,
    stop1: dict[str, float],
    released: list[float],
    plan: _Rounds,
) -> ConcurrentSweep:
    rounds, rescued = plan.run(cands, state, store)
    after = _second_stop(target, pid, addr, copy, second, plan.pending, released)
    # Nothing after the last stop reads a written page (its pages were read
    # in it): the tracking's teardown, a walk of the target's page tables,
    # runs beside the decoding, the re-mark and the fold rather than after
    # the report, where the process's exit waited for it.
    if plan.end_tracking is not None:
        plan.end_tracking()
    threads2, held2, maps2, runs, page_bytes, altstacks, pause2, stop2 = after
    final = _read_registry(copy, addr, threads2)
    rounds.append(len(page_bytes))
    values2 = _values(threads2, held2, maps2, final)
    values2["signal stacks"] = altstacks
    # Words found in memory the rounds do not read (code pages that are not
    # writable at the stop, exited threads' control blocks): those of the
    # first stop and those read now, after the release, both count.
    now = sources.jit_code(pid, maps2, spans, KeptOut()).words
    values2["code immediates"] = values1["code immediates"] + now
    values2["exited threads' control blocks"] = values1["exited threads' control blocks"]
    gone = _drop_changed(cands, state, final)
    # The target runs again: its shared memory walked and read by the team
    # (the cores its busy threads leave), as every read while it runs.
    shared = _native.written_pages(pid, _shared(maps2), False, plan.threads)
    runs += shared
    page_bytes += _read_runs(pid, shared, plan.threads)
    got, pending = _native.remark(
        cands, state, store, runs, page_bytes, b"".join(values2.values()), True, plan.pending
    )
    rescued += got
    rescued += _resolve(target, pid, final, maps2, threads2, cands, state, store, pending)
    fold = _fold_left(pid, raw, cands, cand_ids, state, maps2)
    result = from_native(raw, fold, sum(rounds))
    counts = {k: len(v) for k, v in values1.items() if v and k != "registers"}
    return ConcurrentSweep(
        result,
        maps2,
        roots,
        threads2,
        (pause1, pause2),
        counts,
        rounds,
        rescued,
        plan.rearm.registered,
        gone,
        stop1,
        stop2,
        released,
        held2.in_flight.note,
    )
