"""Heap dumps (SIGRTMAX-17, backtrace_dump_on_exit, backtrace_full), allocator stats
(SIGRTMAX-15, log_allocator_stats_on_exit) and the per-realloc backtrace."""

from __future__ import annotations

import io
import os
import signal

import pytest

from tests.malloc_debug.support import exe, run, values, wait_file
from tests.scanner.procs import exists, read_u32, wait_until
from tests.support.targets import wait_for_helper
from unreachable import _native
from unreachable.capture.target import open_target
from unreachable.heapdump.dump_format import parse_dump, write_dump

DUMP = signal.SIGRTMAX - 17
STATS = signal.SIGRTMAX - 15


def complete(text: str) -> bool:
    return text.endswith("END\n")


def check_dump(text: str, *, full: bool) -> None:
    dump = parse_dump(text)
    assert dump.version == "1.2" and dump.fingerprint
    assert dump.backtrace_size == 16
    assert dump.total_memory == dump.computed_total
    assert dump.allocation_records == len(dump.records)
    sizes = [r.size for r in dump.records]
    assert sizes == sorted(sizes, reverse=True)
    prog = str(exe("idle.c"))
    count = {1000: 0, 2000: 0}
    for r in dump.records:
        if r.size in count:
            count[r.size] += r.num_allocations
    assert count == {1000: 10, 2000: 3}, dump.records[:6]
    by_size = {(r.size, r.num_allocations): r for r in dump.records}
    assert (1000, 10) in by_size  # one site (gcc may unroll the 3-iteration loop)
    assert by_size[(1000, 10)].pcs[0] not in {r.pcs[0] for r in dump.records if r.size == 2000}
    assert prog in dump.maps_text
    if full:
        for r in dump.records:
            assert r.bt_info is not None and len(r.bt_info) == len(r.pcs)
        assert by_size[(1000, 10)].bt_info[0].map == prog
    # Our Python writer, fed the parsed records, writes the very same text.
    infos = {r.pcs: r.bt_info for r in dump.records if r.bt_info}
    out = io.StringIO()
    records = [(r.size, r.num_allocations, r.pcs) for r in dump.records]
    write_dump(records, dump.maps_text, 16, dump.fingerprint, out, bt_info=infos or False)
    assert out.getvalue() == text


@pytest.mark.parametrize("mode", ["idle", "busy"])
@pytest.mark.parametrize("options", ["backtrace", "bt_en_on_sig bt", "backtrace bt_full guard"])
def test_dump_on_signal(procs, tmp_path, mode, options):
    prefix = tmp_path / "heap"
    p = procs.start("idle.c", mode, options=f"{options} backtrace_dump_prefix={prefix}")
    assert p.read_line().startswith("READY")
    os.kill(p.pid, DUMP)  # idle: no allocation will ever run; the helper writes it
    path = tmp_path / f"heap.{p.pid}.txt"
    check_dump(wait_file(path, complete), full="bt_full" in options)
    p.wait_stderr(rf"^malloc_debug: Dumping to file: {path}$")
    assert p.alive()


def test_dump_while_a_snapshot_child_lives(procs, tmp_path):
    """A scan's snapshot child may sweep for seconds; the helper that cloned
    it keeps serving signals meanwhile. Here the child is held frozen (traced,
    never resumed) for the whole dump, so the helper can only have written the
    dump while that child was alive."""
    prefix = tmp_path / "heap"
    p = procs.start("idle.c", "idle", options=f"backtrace backtrace_dump_prefix={prefix}")
    assert p.read_line().startswith("READY")
    wait_for_helper(p.pid)  # READY may come before the helper records its tid
    target = open_target(p.pid)
    cmd = target.header.helper_cmd
    with _native.Session(p.pid) as s:
        s.stop()
        child = s.snapshot(target.header.helper_tid, cmd)
        s.release()
        os.kill(p.pid, DUMP)
        check_dump(wait_file(tmp_path / f"heap.{p.pid}.txt", complete), full=False)
        assert exists(child)
        assert read_u32(p.pid, cmd) != 0  # still busy with the snapshot, as scanners expect
    # Once the scanner lets the child go, the helper reaps it and is idle again.
    wait_until(lambda: read_u32(p.pid, cmd) == 0, what="helper back to IDLE")
    assert not exists(child)
    assert p.alive()


def test_dump_on_exit(procs, tmp_path):
    prefix = tmp_path / "heap"
    p = procs.start("idle.c", options=f"bt bt_dmp_on_ex bt_dmp_pre={prefix}")
    assert p.read_line().startswith("READY")
    assert p.finish() == 0
    check_dump((tmp_path / f"heap.{p.pid}.exit.txt").read_text(), full=False)


def test_verbose_names_dump_signal(procs, tmp_path):
    p = procs.start("idle.c", options=f"backtrace verbose bt_dmp_pre={tmp_path}/h")
    assert p.read_line().startswith("READY")
    prog = p.proc.args[0]
    p.wait_stderr(rf"^malloc_debug: {prog}: Run: 'kill -{DUMP} {p.pid}' to dump the backtrace\.$")


@pytest.mark.parametrize("mode", ["idle", "busy"])
def test_allocator_stats_on_signal(procs, mode):
    p = procs.start("idle.c", mode, options="log_allocator_stats_on_signal verbose")
    assert p.read_line().startswith("READY")
    prog = p.proc.args[0]
    p.wait_stderr(rf"^malloc_debug: {prog}: Run: 'kill -{STATS} {p.pid}' to log allocator stats\.$")
    os.kill(p.pid, STATS)
    p.wait_stderr(r"^malloc_debug: Logging allocator stats\.\.\.$")
    p.wait_stderr(r"^Arena 0:$")  # glibc's malloc_stats()
    p.wait_stderr(r'^<malloc version="1">$')  # and malloc_info()
    p.wait_stderr(r"^</malloc>$")
    assert p.alive()


def test_allocator_stats_on_exit(shim):
    result = run("leak_track.c", shim=shim, options="log_allocator_stats_on_exit")
    assert result.returncode == 0
    lines = result.stderr.splitlines()
    assert lines[0] == "malloc_debug: Logging allocator stats..."
    assert "Arena 0:" in lines and "</malloc>" in lines


@pytest.mark.parametrize("options", ["backtrace", "backtrace guard fill", "backtrace free_track"])
def test_every_realloc_updates_the_backtrace(shim, options):
    result = run("realloc_bt.c", shim=shim, options=options)
    assert result.returncode == 0, result.stderr
    # in place (same pointer) and moved: both record realloc's call site
    assert values(result.stdout)["same"] == "1 n 5 5 5 changed 1 1"
