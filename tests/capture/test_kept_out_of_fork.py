"""A target that keeps memory out of forks (MADV_DONTFORK): its snapshot
child lacks that memory and the pointers in it, so the scan reads it from
the target while it is stopped for the snapshot and counts its words as
roots. Past KEPT_OUT_PREFER_COPY_BYTES auto, told so by smaps before the
stop, takes a copy snapshot; where none can be made it still forks and
reads it all (stopped would read it too, and the heap besides). Only more
than the scanner may hold is not read: auto then takes no child and says
why, and an explicit `--snapshot fork` is refused in one line. node's V8
heap is such memory (over 400 blocks were reported leaked in a fork
snapshot, none when stopped), and so are io_uring's rings (MariaDB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_scan_cli import assert_one_line_error
from tests.support.cgroups import memory_cgroup
from tests.support.tracking import copy_unsupported, wait_untracked
from unreachable import _native
from unreachable.capture.kept_out_of_fork import (
    KEPT_OUT_PREFER_COPY_BYTES,
    ForkFlags,
    fork_flags,
    kept_out_of_fork,
    read_kept_out,
    shim_regions,
)
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import tracked_writes
from unreachable.process.maps import Mapping, read_maps_text
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
MIB = 1 << 20
# MiB of kept-out memory past which auto prefers a copy snapshot.
PAST_COPY = str((KEPT_OUT_PREFER_COPY_BYTES >> 20) + 1)


def _exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    ), [(hex(e.address), e.size) for e in report.leaks]


def _untouched(target) -> None:
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_a_fork_snapshot_reads_it_in_the_pause(targets):
    target = targets.start(PROGRAMS / "dontfork_page.c")
    for sweep in ("auto", "scanner"):
        report = scan(target.pid, ScanOptions(sweep=sweep))
        _exact(target, report)
        assert report.snapshot == "fork" and report.snapshot_note == ""
        # One page's words, read from the target before its release.
        assert report.roots["kept out of fork"] == 4096
    _untouched(target)


def test_an_explicit_fork_reads_it_too(targets):
    target = targets.start(PROGRAMS / "dontfork_page.c")
    report = scan(target.pid, ScanOptions(snapshot="fork"))
    _exact(target, report)
    assert report.snapshot == "fork"


def test_jit_code_kept_out_is_read_at_every_offset(targets):
    """V8 keeps its code space out of forks: the pointers compiled into
    instructions there (roots/jit_code.py) count in a fork snapshot too."""
    target = targets.start(PROGRAMS / "jit_code.c", "dontfork")
    for snapshot in ("fork", "stopped"):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        _exact(target, report)
        assert report.roots["code immediates"] >= 8
    assert report.snapshot == "stopped"


def _cli(pid: int, *args: str, preexec=None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "unreachable.cli.main", "scan", str(pid), *args]
    return subprocess.run(cmd, preexec_fn=preexec, capture_output=True, text=True, timeout=120)


def _read_whole(target, report) -> None:
    """A fork snapshot that read every kept-out page in its pause."""
    _exact(target, report)
    assert report.snapshot == "fork"
    assert report.roots["kept out of fork"] > int(PAST_COPY) * MIB


def test_more_of_it_takes_a_copy_or_still_a_fork(targets):
    """smaps, read before the stop, says a fork's pause would read much:
    auto takes a copy snapshot whatever the heap's size (one pause, no
    kept-out read), or, where copies cannot be made, still forks."""
    target = targets.start(PROGRAMS / "dontfork_page.c", PAST_COPY)
    report = scan(target.pid, ScanOptions())
    if copy_unsupported():
        _read_whole(target, report)
    else:
        _exact(target, report)
        assert report.snapshot == "copy" and report.snapshot_note == ""
        assert "kept out of fork" not in report.roots
    _untouched(target)


def test_without_a_copy_auto_forks_and_reads_it_all(targets):
    """No copy to be had (another scan holds the target's tracker): stopped
    would read the kept-out memory in its pause and the heap besides, so
    auto forks and reads it all in the pause."""
    target = targets.start(PROGRAMS / "dontfork_page.c", PAST_COPY)
    if copy_unsupported():
        pytest.skip("no copy snapshots on this kernel: the test above forks already")
    with tracked_writes(open_target(target.pid)):
        report = scan(target.pid, ScanOptions())
    _read_whole(target, report)
    assert "another scan is copying" in report.snapshot_note
    wait_untracked(target.pid)
    _untouched(target)


def test_a_child_sweep_and_an_explicit_fork_read_it_all(targets):
    """--sweep child never copies, and --snapshot fork was asked for: both
    fork and read it all in the pause."""
    target = targets.start(PROGRAMS / "dontfork_page.c", PAST_COPY)
    for options in (ScanOptions(sweep="child"), ScanOptions(snapshot="fork")):
        report = scan(target.pid, options)
        _read_whole(target, report)
    assert report.sweep == "child"
    _untouched(target)


def test_more_than_the_scanner_may_hold_is_not_read(targets):
    """dontfork_page.c keeps 200 MiB out of forks; the scanner runs in a
    memory cgroup of 160 MiB, whose room holds no such read: an explicit fork is
    refused in one line. auto, and a scan swept from here, take no child
    but a copy-on-write snapshot, which holds only the pages written during
    the scan. The target is left as it was."""
    target = targets.start(PROGRAMS / "dontfork_page.c", "200")
    with memory_cgroup("ur-kept-out") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.limit(160 * MIB)
        for args in (("--snapshot", "fork"), ("--sweep", "child")):
            res = _cli(target.pid, *args, preexec=cg.enter)
            assert_one_line_error(res, r"out of forks \(MADV_DONTFORK.*may hold")
            _untouched(target)
        for args, snapshot in (((), "copy"), (("--sweep", "scanner"), "copy")):
            res = _cli(target.pid, "--json", *args, preexec=cg.enter)
            assert res.returncode == 1, res.stderr
            doc = json.loads(res.stdout)
            assert (doc["leak_count"], doc["leak_bytes"]) == (
                target.int("leak_count"),
                target.int("leak_bytes"),
            )
            assert doc["snapshot"] == snapshot, doc["snapshot_note"]
            _untouched(target)
        assert cg.oom_kills() == 0
    _untouched(target)


def test_stopped_needs_no_fork(targets):
    target = targets.start(PROGRAMS / "dontfork_page.c")
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    _exact(target, report)
    assert report.snapshot_note == "" and "kept out of fork" not in report.roots


def test_only_the_targets_own_mappings_count():
    def m(start: int, end: int, perms: str = "rw-p", path: str = "") -> Mapping:
        return Mapping(start, end, perms, 0, 0, path)

    target = [
        m(0x1000, 0x2000),
        m(0x3000, 0x4000),
        m(0x5000, 0x6000, "---p"),
        m(0x7000, 0x8000, "r--p", "[vvar]"),
    ]
    child = [m(0x1000, 0x2000), m(0x9000, 0xA000)]  # the child's own stack: not the target's
    assert kept_out_of_fork(target, child) == [target[1]]


def test_memory_wiped_in_forks_is_read_in_the_pause(targets):
    """MADV_WIPEONFORK: the child has the page, zeroed; its maps look the
    same as the target's, so smaps's VmFlags, read before the stop, say
    which pages to read from the target."""
    target = targets.start(PROGRAMS / "wipeonfork_page.c")
    for sweep in ("auto", "scanner"):
        report = scan(target.pid, ScanOptions(snapshot="fork", sweep=sweep))
        _exact(target, report)
        assert report.snapshot == "fork"
        assert report.roots["kept out of fork"] == 4096
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    _exact(target, report)
    _untouched(target)


def flags_of(pid: int) -> ForkFlags:
    """fork_flags as a scan reads them: the shim's own memory left out."""
    return fork_flags(pid, shim_regions(pid, open_target(pid).shim.descriptor_addr))


def test_smaps_sizes_the_room_before_the_stop(targets):
    """The pause reads kept-out memory into room made (and its pages
    touched) before the stop, as big as smaps says is resident there."""
    plain = targets.start(PROGRAMS / "queued_signal.c")
    assert flags_of(plain.pid) == ForkFlags()
    # The shim's own fork words are wiped in every child, and left out.
    assert fork_flags(plain.pid).wiped
    kept = flags_of(targets.start(PROGRAMS / "dontfork_page.c").pid)
    assert kept.room is None  # made only once a fork is chosen
    kept.make_room()
    assert kept.wiped == [] and kept.room is not None and len(kept.room) >= 4096
    wiped_target = targets.start(PROGRAMS / "wipeonfork_page.c")
    wiped = flags_of(wiped_target.pid)
    page = wiped_target.int("page")
    assert [(b, e) for b, e in wiped.wiped if b <= page < e]
    wiped.make_room()
    assert wiped.room is not None and len(wiped.room) >= 4096
    assert not kept.prefers_copy and not kept.too_big
    big = flags_of(targets.start(PROGRAMS / "dontfork_page.c", PAST_COPY).pid)
    assert big.prefers_copy and not big.too_big
    big.make_room()
    assert big.room is not None and len(big.room) > int(PAST_COPY) * MIB
    # Past what the scanner may hold (its budget, as under a memory cgroup): no room.
    _native.set_cache_budget(MIB)
    try:
        held = flags_of(targets.start(PROGRAMS / "dontfork_page.c", PAST_COPY).pid)
        assert held.too_big
        held.make_room()
        assert held.room is None
    finally:
        _native.set_cache_budget(0)


def test_the_words_are_the_same_whatever_room_was_made(targets):
    """Room too small (the memory grew since smaps was read), none, or to
    spare: the same words, the page's pointer among them."""
    target = targets.start(PROGRAMS / "dontfork_page.c")
    page = target.int("page")
    maps = read_maps_text(target.pid)
    # What a child would have: everything but the kept-out page.
    child = "\n".join(line for line in maps.splitlines() if not line.startswith(f"{page:x}-"))
    assert child != maps
    seen = set()
    for room in (None, bytearray(0), bytearray(100), bytearray(1 << 20)):
        out = read_kept_out(target.pid, maps, child, ForkFlags(room=room))
        assert [m.start for m in out.mappings] == [page]
        assert len(out.words) == 4096 and out.code == b""
        seen.add(bytes(out.words))
    assert len(seen) == 1
    words = seen.pop()
    assert int.from_bytes(words[24:32], "little") != 0  # page[3] = malloc(64)
