"""The copy snapshot, copy-on-write: the target's memory write-protected
while it runs, protected again where it wrote by the stop, and let go; the
scan reads the live memory, and each page the target writes afterwards is
saved first (native/scanner/cow.c). Only those pages are copied.

Where no synchronous userfaultfd can be had, the classic copy: the memory
copied while the target runs, the helper tracking its writes
(write_tracking.py), then stopped, the pages written since read again
(native/scanner/page_sync.c), let go. docs/pause.md, "The copy snapshot",
has how each works, what it costs and what it was measured at.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from unreachable import _native
from unreachable.capture.stop_world import Capture, CaptureRequest, stop_world
from unreachable.capture.target import Target
from unreachable.capture.write_tracking import (
    MODE_COW,
    ON,
    TrackingUnavailable,
    end_in_background,
    helper_uffd,
    tracked_writes,
)
from unreachable.errors import TargetUnscannable
from unreachable.process.maps import SPECIAL, Mapping, read_maps

SYNC_ANON = 1  # page_sync.h UR_SYNC_ANON
SYNC_HELD = 2  # page_sync.h UR_SYNC_HELD
MAX_THREADS = 4
# From here on a fork snapshot's page-table copy (~30 ms per GB on 4 KiB
# pages) pauses longer than a copy snapshot's stop (docs/pause.md).
COPY_FROM_BYTES = 256 << 20
# Beyond this many live allocations the scanner's own work on a classic
# copy (the registry, the index, ~0.4 us each, where a snapshot child does
# it beside the scanner) makes the whole scan 2x slower and more: auto forks.
COPY_MAX_ALLOCATIONS = 2_000_000
# A copy-on-write copy pauses for the stop's own work (1-2 ms from 0.1 to
# 2 GB), holds only the pages written during the scan and takes a fork's
# whole time: auto takes it first from the size where a fork's page-table
# copy passes that (about 2 ms at 30 ms per GiB), whatever the allocations.
COW_FROM_BYTES = 64 << 20
# The kernel's initial user namespace (PROC_USER_INIT_INO): userfaultfd()
# checks CAP_SYS_PTRACE there.
_INIT_USER_NS = 0xEFFFFFFD
_CAP_SYS_PTRACE = 19


def _copied(m: Mapping) -> bool:
    # Whatever the sweep may read: allocations and roots lie in writable or
    # anonymous memory; read-only file mappings are never either.
    return m.readable and m.path not in SPECIAL and (m.writable or m.inode == 0)


def sync_ranges(mappings: Sequence[Mapping], shared: bool | None = None) -> bytes:
    """The ranges a copy holds; shared: only shared memory (True), none of it
    (False), or all (None)."""
    return _native.abi_encode_array(
        "ur_sync_range",
        [
            (m.start, m.end, SYNC_ANON if m.demand_zero else 0)
            for m in mappings
            if _copied(m) and (shared is None or shared != m.private)
        ],
    )


def copy_pays_off(
    anonymous_bytes: int,
    allocations: int | None,
    copy_from: int = COPY_FROM_BYTES,
    cow: bool = False,
) -> bool:
    """Whether "auto" should try a copy snapshot: a heap big enough for the
    fork's pause to pass the copy's, with few enough allocations for the
    scan not to take much longer (docs/pause.md). allocations None: the
    registry could not be read (stopping the target reports why). cow: the
    copy will be copy-on-write (cow_possible), from COW_FROM_BYTES and
    whatever the allocations."""
    if cow:
        return anonymous_bytes >= min(copy_from, COW_FROM_BYTES)
    if anonymous_bytes < copy_from or allocations is None:
        return False
    return allocations <= COPY_MAX_ALLOCATIONS


def cow_possible(pid: int) -> bool:
    """Whether a copy of pid will be copy-on-write: its helper can open a
    synchronous userfaultfd only with vm.unprivileged_userfaultfd set or
    CAP_SYS_PTRACE in the initial user namespace (the kernel's check);
    elsewhere the copy is the classic one, which holds the heap. What
    cannot be read counts as no."""
    if pid in _classic_next:
        return False
    try:
        with open("/proc/sys/vm/unprivileged_userfaultfd") as f:
            if f.read().strip() == "1":
                return True
        if os.stat(f"/proc/{pid}/ns/user").st_ino != _INIT_USER_NS:
            return False
        with open(f"/proc/{pid}/status") as f:
            caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
        return bool(int(caps, 16) >> _CAP_SYS_PTRACE & 1)
    except (OSError, ValueError):
        return False


def _threads() -> int:
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


@contextmanager
def copy_while_running(target: Target) -> Iterator[_native.MemoryCopy]:
    """Writes tracked and the memory copied, the target running; tracking
    ends with the block. Raises TrackingUnavailable when it cannot be done."""
    with tracked_writes(target):
        mappings = read_maps(target.pid)
        # Bounded, not sized: what the copy takes depends on the pages used,
        # not on the mappings (a sparse reservation takes nothing).
        copy = _native.MemoryCopy(target.pid)
        try:
            # Shared memory too, read again after the stop (read_shared):
            # the copy's bound is met, or not, before the target stops.
            copy.sync(sync_ranges(mappings), threads=_threads())
        except MemoryError:
            copy.close()
            raise TrackingUnavailable(
                "the copy would take more memory than the scanner may (half of what is"
                " available, or of the room left in its own memory cgroup)"
            ) from None
        except OSError as e:
            copy.close()
            raise TrackingUnavailable(f"copying the target's memory failed: {e}") from None
        try:
            yield copy
        except BaseException:
            copy.close()
            raise


def refresh(copy: _native.MemoryCopy, pid: int) -> list[Mapping]:
    """The target stopped: bring the copy of its private memory to this
    moment. Returns the maps it was brought up to; read_shared finishes the
    copy. Raises OSError or MemoryError."""
    mappings = read_maps(pid)
    copy.reset_stats()
    copy.sync(sync_ranges(mappings, shared=False), refresh=True, threads=_threads())
    return mappings


def read_shared(copy: _native.MemoryCopy, mappings: Sequence[Mapping]) -> None:
    """Read the shared memory of mappings again and finish the copy. Its
    writes are not tracked (another process writes it through its own page
    tables), so a refresh in the stop would read it whole (PostgreSQL's 128
    MiB of shared buffers paused the postmaster 26-43 ms): it is read once
    the target runs, as a fork or a copy-on-write snapshot reads it."""
    copy.sync(sync_ranges(mappings, shared=True), threads=_threads())
    copy.finish()


def _helper_stack(target: Target) -> list[int]:
    """Addresses in the helper's stack: the frame it publishes in the
    descriptor (0 while it runs a request) and its blocked call's sp."""
    pid, found = target.pid, []
    addr = target.shim.descriptor_addr
    at, size = _native.abi_field("ur_descriptor", "helper_frames")
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
            f.seek(addr + at)
            found.append(int.from_bytes(f.read(size), "little"))
        with open(f"/proc/{pid}/task/{target.header.helper_tid}/syscall") as f:
            fields = f.read().split()
        if len(fields) >= 3:
            found.append(int(fields[-2], 16))
    except (OSError, ValueError):
        pass
    return [a for a in found if a]


def _cow_ranges(
    target: Target, mappings: Sequence[Mapping], helper: Sequence[int]
) -> tuple[bytes, bytes]:
    """What the snapshot protects: every private writable mapping but the
    shim's own (its data and the tail of its .bss, which the helper writes)
    and the helper's stack: the helper must never wait on the scanner.
    Those (small) are saved whole in the pause instead: (protected, saved)."""
    shim = [m for m in mappings if m.path == target.shim.path]
    shim_end = max((m.end for m in shim), default=0)
    tracker = target.header.write_tracker
    pairs, saved = [], []
    for m in mappings:
        if not (m.readable and m.writable and m.private) or m.path in SPECIAL:
            continue
        if (
            m.path == target.shim.path
            or (m.start == shim_end and not m.path)
            or m.start <= tracker < m.end
            or any(m.start <= a < m.end for a in helper)
        ):
            saved.append((m.start, m.end))
            continue
        pairs.append((m.start, m.end))
    return (
        b"".join(struct.pack("<QQ", b, e) for b, e in pairs),
        b"".join(struct.pack("<QQ", b, e) for b, e in saved),
    )


# Pids whose next copy is made the classic way: their last copy-on-write
# snapshot lost memory the target released during the scan.
_classic_next: set[int] = set()
# A sealed copy-on-write snapshot's tracker (pid, address), by id(copy): the
# helper ends the snapshot by itself when its faults go unserved.
_trackers: dict[int, tuple[int, int]] = {}


def _tracker_cmd(pid: int, addr: int) -> int:
    at, size = _native.abi_field("ur_write_tracker", "cmd")
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
            f.seek(addr + at)
            return int.from_bytes(f.read(size), "little")
    except OSError:
        return -1


def cow_wanted(pid: int) -> bool:
    if pid in _classic_next:
        _classic_next.discard(pid)
        return False
    return True


def _lost_read(memory: _native.MemoryCopy, read: Sequence[tuple[int, int]] | None) -> int:
    """Bytes of the memory lost to the snapshot that the scan read: the
    pages released unsaved that held memory at the seal, within read (the
    roots, the heap, the shim's own memory). None: all of them."""
    stats = memory.stats
    lost = stats.get("bytes_lost", 0)
    if not lost or read is None or stats.get("lost_unrecorded", 0):
        return lost
    runs = sorted(struct.iter_unpack("<QQ", memory.cow_lost()))
    spans = sorted(read)
    total, k = 0, 0
    for begin, end in runs:
        while k < len(spans) and spans[k][1] <= begin:
            k += 1
        j = k
        while j < len(spans) and spans[j][0] < end:
            total += min(end, spans[j][1]) - max(begin, spans[j][0])
            j += 1
    return total


def cow_broken(memory: object, pid: int, read: Sequence[tuple[int, int]] | None = None) -> str:
    """Why a finished scan over a copy-on-write snapshot may be wrong ("":
    it is not): memory the target released before its pages were saved
    (munmap, MADV_DONTNEED, mremap; the kernel reports it only after the
    fact) that held pages at the seal and lies where the scan read (read:
    sorted ranges, None for anywhere), or pages the scanner had no room to
    save. The scan is then made again over a classic copy. An exited
    thread's stack glibc unmaps is none of these: it is not a root."""
    if not isinstance(memory, _native.MemoryCopy):
        return ""
    why = ""
    if (tracker := _trackers.get(id(memory))) and _tracker_cmd(*tracker) != ON:
        why = "the target's helper ended the copy-on-write snapshot, its faults unserved"
    elif memory.cow_failed():
        why = "the copy-on-write snapshot had no room for the pages the target wrote"
    elif lost := _lost_read(memory, read):
        why = f"the target released {lost >> 10} KiB the copy-on-write snapshot had not saved"
    if why:
        _classic_next.add(pid)
    return why


@contextmanager
def cow_capture(target: Target, request: CaptureRequest) -> Iterator[Capture]:
    """The copy-on-write snapshot (cow.h): protected in the pause, read live
    after it, each page the target writes meanwhile saved first."""
    with ExitStack() as cleanup:
        # The snapshot's end (the copy's unregistering, a walk of the
        # target's page tables, then the tracking's) runs last, beside the
        # rest of the scan: whatever ends the block, the process's exit
        # waits for it (end_in_background).
        ending = ExitStack()
        cleanup.callback(end_in_background, target.pid, ending.close, request.teardown_beside)
        ending.enter_context(tracked_writes(target, mode=MODE_COW))
        uffd = helper_uffd(target.pid, asynchronous=False)
        if uffd < 0:
            raise TrackingUnavailable("no synchronous userfaultfd in the target")
        copy = _native.MemoryCopy(target.pid, cache_bytes=64 << 20)
        try:
            copy.cow_start(uffd)
        except OSError as e:
            copy.close()
            raise TrackingUnavailable(f"cannot serve the snapshot: {e}") from None
        ending.callback(copy.close)
        helper = _helper_stack(target)
        if not helper:
            raise TrackingUnavailable("cannot find the shim's helper's stack")
        mappings = read_maps(target.pid)
        # Protected while the target runs: the pause protects again only
        # the pages written since (cow.h, ur_cow_seal).
        copy.cow_register(_cow_ranges(target, mappings, helper)[0])
        try:
            copy.cow_protect()
        except OSError as e:
            raise TrackingUnavailable(f"cannot write-protect the target: {e}") from None
        capture = stop_world(target, request.roots, cleanup, urgent=True)
        try:
            now = read_maps(target.pid)
            seen = {(m.start, m.end) for m in mappings}
            new = [m for m in now if (m.start, m.end) not in seen]
            if new:
                copy.cow_register(_cow_ranges(target, new, helper)[0])
                copy.cow_protect()
            copy.cow_save(_cow_ranges(target, now, helper)[1])
            copy.cow_seal()
            _trackers[id(copy)] = (target.pid, target.header.write_tracker)
            cleanup.callback(_trackers.pop, id(copy), None)
            capture.mappings = now
            capture.tracer.release()
            capture.snapshot, capture.copy = "copy", copy
        except (OSError, MemoryError) as e:
            capture.snapshot_error = f"the copy-on-write snapshot could not be taken: {e}"
        yield capture


@contextmanager
def capture(target: Target, request: CaptureRequest) -> Iterator[Capture]:
    """The copy, made while the target runs, then brought up to date in the
    pause. A copy that cannot be made is refused (request.must) or raises
    TrackingUnavailable; one that cannot be brought up to date leaves the
    target stopped, swept so (it is stopped already)."""
    if cow_wanted(target.pid):
        with ExitStack() as outer:
            try:
                got = outer.enter_context(cow_capture(target, request))
            except TrackingUnavailable:
                got = None
            if got is not None:
                yield got
                return
    with ExitStack() as cleanup:
        tracking = cleanup.enter_context(ExitStack())
        try:
            copy = tracking.enter_context(copy_while_running(target))
        except TrackingUnavailable as e:
            if request.must:
                raise TargetUnscannable(f"{request.must}{e}") from None
            raise
        # Freeing the copy (the size of the heap) beside the rest of the scan.
        cleanup.callback(end_in_background, target.pid, copy.close, request.teardown_beside)
        capture = stop_world(target, request.roots, cleanup, urgent=True)
        try:
            capture.mappings = refresh(copy, target.pid)
        except (OSError, MemoryError) as e:
            capture.snapshot_error = f"the copy could not be brought up to date: {e}"
        else:
            capture.tracer.release()
            try:
                read_shared(copy, capture.mappings)
            except (OSError, MemoryError) as e:
                # Released: it cannot be swept stopped.
                raise TargetUnscannable(f"reading the target's shared memory failed: {e}") from None
            capture.snapshot, capture.copy = "copy", copy
        tracking.close()  # writes are not tracked a moment longer
        yield capture
