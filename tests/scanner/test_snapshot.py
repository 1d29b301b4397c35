"""Session.snapshot() through a target implementing the helper protocol, and
sweep()/read_registry() against real processes."""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scanner.procs import (
    children,
    exists,
    fields,
    program,
    read_u32,
    read_u64,
    spawn,
    state,
    wait_until,
)
from unreachable import _native
from unreachable.allocations.registry import read_registry
from unreachable.errors import TargetNotShimmed

# struct ur_descriptor (abi.h): uint64_t unregistered


@pytest.fixture
def target() -> Iterator[tuple[int, dict[str, int]]]:
    with spawn([str(program("helper"))]) as (proc, line):
        yield proc.pid, fields(line)


def _snapshot(pid: int, f: dict[str, int]) -> tuple[_native.Session, int, int]:
    s = _native.Session(pid)
    s.stop()
    v0 = read_u64(pid, f["value"])
    child = s.snapshot(f["helper"], f["cmd"])
    return s, v0, child


def test_snapshot_freezes_memory_while_the_target_runs(target) -> None:
    pid, f = target
    s, v0, child = _snapshot(pid, f)
    try:
        assert child > 0 and child != pid
        assert s.mem_pid == child
        assert s.snapshot_pid == child
        assert state(child) == "t"
        s.release()
        wait_until(lambda: read_u64(pid, f["value"]) != v0, what="target progress")
        assert read_u64(child, f["value"]) == v0
        time.sleep(0.05)
        assert read_u64(child, f["value"]) == v0
        assert read_u64(pid, f["value"]) != v0
        assert child in children(pid)
    finally:
        s.close()
    s.close()  # idempotent
    wait_until(lambda: not exists(child), what="child reaped")
    wait_until(lambda: children(pid) == [], what="no children left")
    wait_until(lambda: read_u32(pid, f["cmd"]) == 0, what="helper back to IDLE")
    v1 = read_u64(pid, f["value"])
    wait_until(lambda: read_u64(pid, f["value"]) != v1, what="target still running")


def test_snapshot_repeats(target) -> None:
    """Back to back: the next stop may catch the helper between reaping the
    previous child and storing IDLE; snapshot() lets it finish first."""
    pid, f = target
    for _ in range(20):
        with _native.Session(pid) as s:
            s.stop()
            child = s.snapshot(f["helper"], f["cmd"])
            s.release()
            assert read_u32(child, f["cmd"]) == 1  # the child's copy, frozen mid-command
    wait_until(lambda: read_u32(pid, f["cmd"]) == 0, what="helper back to IDLE")
    wait_until(lambda: children(pid) == [], what="no children left")


def test_snapshot_timeout_undoes_the_command(target) -> None:
    """A command word nobody watches: the helper never clones; the word is
    restored and the target is still stopped, ready for a direct scan."""
    pid, f = target
    with _native.Session(pid) as s:
        s.stop()
        with pytest.raises(TimeoutError):
            s.snapshot(f["helper"], f["unwatched"])
        assert read_u32(pid, f["unwatched"]) == 0
        assert s.mem_pid == pid
        v0 = read_u64(pid, f["value"])
        time.sleep(0.02)
        assert read_u64(pid, f["value"]) == v0
    wait_until(lambda: read_u64(pid, f["value"]) != v0, what="progress after release")
    # The helper still works afterwards.
    with _native.Session(pid) as s:
        s.stop()
        assert s.snapshot(f["helper"], f["cmd"]) > 0


def test_snapshot_bad_arguments(target) -> None:
    pid, f = target
    with _native.Session(pid) as s:
        s.stop()
        with pytest.raises(ValueError):
            s.snapshot(1, f["cmd"])  # not a thread of the target
        with pytest.raises(OSError):
            s.snapshot(f["helper"], 8)  # unreadable command word
        child = s.snapshot(f["helper"], f["cmd"])
        with pytest.raises(RuntimeError):
            s.snapshot(f["helper"], f["cmd"])
        assert child > 0


def _sweep_blocks(mem_pid: int, f: dict[str, int]) -> dict:
    allocs = _native.abi_encode_array("ur_block", [(f[f"b{i}"], f[f"s{i}"]) for i in range(7)])
    roots = _native.abi_encode_array("ur_range", [(f["g_root"], f["g_root"] + 8)])
    return _native.sweep(mem_pid, allocs, roots, b"")


def _indices(result: dict) -> set[int]:
    return set(array("I", result["unreachable"]))


def _check_blocks(result: dict, f: dict[str, int]) -> None:
    assert _indices(result) == {2, 3, 4, 5, 6}
    leaks = {
        r["begin"]: (r["referenced_count"], r["referenced_size"])
        for r in _native.abi_decode_array("ur_leak_record", result["leaks"])
    }
    # C alone; D <-> E (a cycle of leaks: each counts only itself, every
    # block is counted under one leak); F -> G.
    assert leaks == {f["b2"]: (0, 0), f["b3"]: (0, 0), f["b4"]: (0, 0), f["b5"]: (1, 8)}
    assert result["bytes_scanned"] > 0
    assert result["pages_skipped"] == 0
    assert result["mark_ns"] >= 0 and result["fold_ns"] >= 0


def test_sweep_stopped_target(target) -> None:
    pid, f = target
    with _native.Session(pid) as s:
        s.stop()
        _check_blocks(_sweep_blocks(s.mem_pid, f), f)


def test_sweep_snapshot_child(target) -> None:
    pid, f = target
    with _native.Session(pid) as s:
        s.stop()
        s.snapshot(f["helper"], f["cmd"])
        s.release()
        _check_blocks(_sweep_blocks(s.mem_pid, f), f)


def test_sweep_register_roots(target) -> None:
    pid, f = target
    with _native.Session(pid) as s:
        s.stop()
        allocs = _native.abi_encode_array("ur_block", [(f[f"b{i}"], f[f"s{i}"]) for i in range(7)])
        # A register holding an interior pointer into F keeps F and G alive.
        result = _native.sweep(s.mem_pid, allocs, b"", array("Q", [f["b5"] + 5]).tobytes())
        assert _indices(result) == {0, 1, 2, 3, 4}


def test_sweep_argument_errors() -> None:
    with pytest.raises(ValueError):
        _native.sweep(os.getpid(), b"x" * 15, b"", b"")
    with pytest.raises(ProcessLookupError):
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        _native.sweep(pid_max + 1, b"", b"", b"")
    empty = _native.sweep(os.getpid(), b"", b"", b"")
    assert empty["unreachable"] == b"" and empty["leaks"] == b""


def test_read_registry() -> None:
    with spawn([str(program("registry"))]) as (proc, line):
        f = fields(line)
        reg = _native.read_registry(proc.pid, f["descriptor"])
        allocs = [
            (b["begin"], b["size"]) for b in _native.abi_decode_array("ur_block", reg["allocs"])
        ]
        # Shards and size maps merged in address order, duplicates dropped
        # (0x3000 is in a shard with size 8 and in a map with 77).
        assert allocs == [
            (0x1000, 16),
            (0x2000, 0),
            (0x3000, 8),
            (0x4000, 0),
            (0x4010, 248),
            (0x8000, 249),
            (0x8010, 4089),
            (0x8020, 1),
            (0xFF100, (1 << 24) - 1),
            (0xFFF80, 4088),
            (0xFFFF0, 24),
            (0x40000020, 100),
        ]
        assert memoryview(reg["stack_ids"]).cast("I").tolist() == [1, 2] + [0] * 10
        # The count before the stop: the shards' counts and every map entry.
        assert reg["expected"] == 4 + 10
        assert _native.read_registry(proc.pid, f["descriptor"], False)["expected"] == 14
        # No count asked (the regions alone): not even the shards' tables are walked.
        assert _native.read_registry(proc.pid, f["descriptor"], False, False)["expected"] == 0
        assert reg["threads"] == [
            (111, 1, 1, 0, 0, 0x5000, 7, 0x100, 0x200),
            (222, 2, 0, 0, 0, 0, 0, 0x300, 0x400),
            (333, 1, 2, 0x6000, 9, 0, 0, 0, 0),
        ]
        assert reg["locked_shards"] == [(1, 4242)]
        assert reg["enabled"] == 1
        assert reg["helper_tid"] == 777
        assert reg["helper_cmd"] == f["cmd"]
        assert reg["regions"] == [(0x10000, 0x20000), (0x30000, 0x38000)]
        assert (reg["disabled"], reg["disabled_errno"], reg["unregistered"]) == (0, 0, 0)
        assert reg["options"] == "backtrace=4 helper=1"
        assert reg["max_frames"] == 4
        assert reg["stack_count"] == 3

        ids = array("I", [1, 2, 0, 3, 1]).tobytes()
        stacks = _native.read_stacks(proc.pid, f["descriptor"], ids)
        assert stacks == {1: (0xAAA, 0xBBB), 2: (1, 2, 3, 4), 0: (), 3: ()}

        with pytest.raises(ValueError, match="magic/version"):
            _native.read_registry(proc.pid, f["descriptor"] + 8)
        with pytest.raises(ValueError, match="magic/version"):
            _native.read_registry(proc.pid, 0x1000)


def test_a_registry_with_unregistered_blocks_is_not_scanned() -> None:
    """A shim that ran out of memory for its registry left blocks out of it
    (abi.h descriptor.unregistered): a scan would miss or invent leaks, so
    the registry is refused with one line that says why."""
    with spawn([str(program("registry"))]) as (proc, line):
        f = fields(line)
        assert read_registry(proc.pid, f["descriptor"]).count > 0
        fd = os.open(f"/proc/{proc.pid}/mem", os.O_RDWR)
        try:
            at, size = _native.abi_field("ur_descriptor", "unregistered")
            os.pwrite(fd, (3).to_bytes(size, "little"), f["descriptor"] + at)
        finally:
            os.close(fd)
        with pytest.raises(TargetNotShimmed, match=r"3 blocks are not registered"):
            read_registry(proc.pid, f["descriptor"])
