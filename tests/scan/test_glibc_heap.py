"""Scans of processes that run without the shim: glibc's heap walked from a
copy of their memory (unreachable/scan/glibc.py, docs/glibc-heap.md).

Each scenario program gives the shim's leak count, with sizes between the
bytes requested and the chunks' usable bytes; threads churning malloc,
realloc and free never make a leak up; a process whose malloc is not
glibc's gets one line and exit status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.scan.test_real_services import (
    _free_port,
    _talk,
    _wait_port,
    exercise_memcached,
    exercise_nginx,
)
from tests.scan.test_scenarios import SCENARIOS
from tests.support.cbuild import build
from tests.support.targets import wait_untraced
from unreachable.allocations import glibc_libc
from unreachable.errors import TargetUnscannable
from unreachable.process.status import read_status
from unreachable.report.json_report import report_to_dict
from unreachable.rpc.convert import report_from_dict, report_to_model
from unreachable.scan import ScanOptions, scan
from unreachable.scan.glibc import RUN_OUT_ROUNDS

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
# A chunk's usable bytes exceed the request by at most 23 (16-byte rounding
# of request + 8); a chunk mmap'ed alone by less than a page and its header.
HEAP_SLACK = 24
MMAP_SLACK = 4096 + 16

# Programs whose answer differs without the shim, and why (docs/glibc-heap.md).
EXPECTED: dict[str, int] = {}
# Chunks mmap'ed alone: up to a page more; by memalign, up to the alignment more.
MMAPPED = {
    "big_block.c": MMAP_SLACK,
    "registry_homes.c": MMAP_SLACK,
    "aligned_big.c": 65536 + MMAP_SLACK,
    "split_mapping.c": MMAP_SLACK,
    "mapping_end.c": MMAP_SLACK,
}


@pytest.mark.parametrize(
    "program",
    [*SCENARIOS, "arena_heap.c", "graph.c", "aligned_big.c", "split_mapping.c", "mapping_end.c"],
)
# auto: a copy-on-write child made by an injected clone
# (tests/capture/test_injected_fork.py); stopped: the whole copy, made in
# the stopper's one stop.
@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_scenario_without_shim(targets, program, snapshot, made):
    target = targets.start(PROGRAMS / program, preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions(snapshot=snapshot))
    assert report.allocations == "glibc heap" and report.snapshot == made, report.snapshot_note
    count = EXPECTED.get(program, target.int("leak_count"))
    assert report.leak_count == count, [(hex(e.address), e.size) for e in report.leaks]
    if program not in EXPECTED:
        requested = target.int("leak_bytes")
        slack = MMAPPED.get(program, HEAP_SLACK)
        assert requested <= report.leak_bytes <= requested + count * slack
    assert target.alive() and target.tracer() == 0


def test_churning_threads_invent_no_leak(targets):
    """Four threads in malloc, realloc and free without pause: every scan
    gives exactly the 5 dropped blocks (a thread stopped inside malloc is
    stepped out of it first, by the stopper in both snapshots), or says the
    heap stayed mid-update."""
    target = targets.start(PROGRAMS / "churn.c", preload=False, wait_helper=False)
    exact = 0
    for snapshot in ("auto", "stopped") * 25:
        try:
            report = scan(target.pid, ScanOptions(snapshot=snapshot))
        except TargetUnscannable as e:
            assert "mid-update" in str(e), e
            continue
        assert (report.leak_count, report.allocations) == (5, "glibc heap"), [
            (hex(e.address), e.size) for e in report.leaks
        ]
        assert 5010 <= report.leak_bytes <= 5010 + 5 * HEAP_SLACK
        exact += 1
    assert exact > 0
    assert target.alive() and target.tracer() == 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_a_tcache_in_a_wider_chunk(targets):
    """glibc gives a thread's tcache a whole free chunk when the rest would
    be too small to split off (0x2a0 where 0x290 is asked): it is that
    thread's tcache all the same (syslog-ng's workers had such; every scan
    without the shim failed while one ran)."""
    target = targets.start(PROGRAMS / "wide_tcache.c", preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert report.allocations == "glibc heap"
    assert (report.leak_count, report.leak_bytes) == (1, 504)  # the chunk's usable size


def test_cli_reports_glibc_heap(targets):
    target = targets.start(PROGRAMS / "globals.c", preload=False, wait_helper=False)
    res = _cli("scan", str(target.pid), "--json")
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert report["allocations"] == "glibc heap" and report["leak_count"] == 1
    res = _cli("scan", str(target.pid))
    assert res.returncode == 1, res.stderr
    assert "allocations: glibc heap (chunk usable sizes" in res.stdout


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="libjemalloc2 is not installed")
def test_jemalloc_preloaded_gets_one_line(targets):
    target = targets.start(
        PROGRAMS / "globals.c", preload=False, wait_helper=False, env={"LD_PRELOAD": JEMALLOC}
    )
    res = _cli("scan", str(target.pid))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "jemalloc" in lines[0] and "under the shim" in lines[0], lines
    assert target.alive() and target.tracer() == 0


def test_static_binary_gets_one_line(targets):
    target = targets.start(
        PROGRAMS / "globals.c", preload=False, wait_helper=False, ldflags=["-static"]
    )
    res = _cli("scan", str(target.pid))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no glibc libc.so.6 is mapped" in lines[0], lines


@pytest.fixture
def plain_service() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a distribution's service as it is, without the shim."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        if shutil.which(argv[0]) is None:
            pytest.skip(f"{argv[0]} is not installed")
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(os.environ, **(env or {})),
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()


def _clean(pid: int) -> None:
    report = scan(pid, ScanOptions())
    assert report.allocations == "glibc heap" and report.allocation_count > 100
    assert (report.leak_count, report.leak_bytes) == (0, 0), [
        (hex(e.address), e.size) for e in report.leaks[:5]
    ]
    status = read_status(pid)
    assert status.tracer_pid == 0 and status.state != "t"


def test_memcached_without_shim(plain_service):
    exercise_memcached(plain_service, _clean)


def test_nginx_without_shim(plain_service, tmp_path: Path):
    exercise_nginx(plain_service, tmp_path, _clean)


@pytest.mark.parametrize("pymalloc", ["malloc", "default"])
def test_cpython_without_shim(plain_service, pymalloc):
    """CPython holding lists, dicts and strings, its object arenas (or, with
    PYTHONMALLOC=malloc, every object) in glibc's heap: nothing leaked."""
    code = (
        "import sys\n"
        "data = [{'k%d' % i: ('v' * (i % 50), [i] * (i % 7))} for i in range(20000)]\n"
        "big = {i: str(i) * 3 for i in range(5000)}\n"
        "print('READY', flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {"PYTHONMALLOC": pymalloc} if pymalloc == "malloc" else {}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, **env),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"READY"
        _clean(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_scanner_killed_mid_scan_leaves_target_running(targets):
    """SIGKILL the scanner at moments spread over its scans (while it runs
    threads out of malloc, copies, walks): the kernel detaches every thread,
    none is left stopped or with a trap pending, and the next scan is
    exact."""
    target = targets.start(PROGRAMS / "churn.c", preload=False, wait_helper=False)
    for delay_ms in range(0, 400, 25):
        scanner = subprocess.Popen(
            [*CLI, "scan", str(target.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            scanner.wait(timeout=delay_ms / 1000)
        except subprocess.TimeoutExpired:
            scanner.kill()
            scanner.wait()
        wait_untraced(target)
        assert target.alive() and target.state() != "t"
    report = scan(target.pid, ScanOptions())
    assert report.leak_count == 5
    assert target.alive() and target.tracer() == 0


def test_scanner_killed_while_the_stopper_runs_threads_out_of_malloc(targets):
    """The scanner dies while the stopper lets threads run alone out of
    malloc (here every address counts as inside, so every round runs): the
    stopper ends its rounds, finds the scanner gone and lets the threads go
    on as they were. Single-stepping them instead left the trap flag set
    and the target died of SIGTRAP with its tracer."""
    target = targets.start(PROGRAMS / "churn.c", preload=False, wait_helper=False)
    code = (
        "from unreachable.capture.stopper import Stopper\n"
        f"Stopper({target.pid}, 0).stop((0, 1 << 63), {RUN_OUT_ROUNDS}, 0, False)\n"
    )
    scanner = subprocess.Popen([sys.executable, "-c", code])
    try:
        while target.tracer() == 0 and scanner.poll() is None:
            time.sleep(0.001)
        assert target.tracer() != 0, "the stopper never stopped the target"
    finally:
        scanner.kill()
        scanner.wait()
    wait_untraced(target)
    report = scan(target.pid, ScanOptions())
    assert report.leak_count == 5
    assert target.alive() and target.tracer() == 0


def test_planted_leak_in_memcached_found_exactly(plain_service):
    """A preloaded library drops 25 blocks of 100-124 bytes as memcached
    starts: exactly those are found, among the service's own memory."""
    planted = build(PROGRAMS / "planted_leak.c", shared=True)
    port = _free_port()
    proc = plain_service(
        "memcached",
        "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-t", "4",
        env={"LD_PRELOAD": str(planted)},
    )  # fmt: skip
    _wait_port(port, proc)
    _talk(port, b"".join(b"set k%d 0 0 5\r\nhello\r\n" % i for i in range(500)), b"STORED", 500)
    report = scan(proc.pid, ScanOptions(limit=100))
    assert report.allocations == "glibc heap"
    assert report.leak_count == 25, [(hex(e.address), e.size) for e in report.leaks]
    requested = sum(range(100, 125))
    assert requested <= report.leak_bytes <= requested + 25 * HEAP_SLACK
    assert b"VALUE k1 " in _talk(port, b"get k1\r\n", b"END")


@pytest.mark.parametrize("program", ["thread_stack.c", "tls.c", "alloc_funcs.c", "arena_heap.c"])
def test_scenario_without_debug_symbols(targets, monkeypatch, program):
    """The same answers with libc's structures found by the heuristics
    alone (no debug directory)."""
    monkeypatch.setenv("UNREACHABLE_DEBUG_DIRS", "/nonexistent")
    glibc_libc._facts.cache_clear()
    try:
        target = targets.start(PROGRAMS / program, preload=False, wait_helper=False)
        report = scan(target.pid, ScanOptions())
        assert report.leak_count == target.int("leak_count")
    finally:
        glibc_libc._facts.cache_clear()


def test_program_with_its_own_malloc_gets_one_line(targets):
    target = targets.start(PROGRAMS / "own_malloc.c", preload=False, wait_helper=False)
    res = _cli("scan", str(target.pid))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "malloc holds nothing" in lines[0], lines
    assert target.alive() and target.tracer() == 0


def test_another_allocator_is_named_whatever_was_asked(targets):
    """A process that maps another allocator gets the line that names it,
    not a line about the snapshot or sweep it asked for, whose advice
    (drop the option) only led to that line."""
    lib = build(PROGRAMS / "libc_names_lib.c", shared=True, name="libtcmalloc_stand_in")
    target = targets.start(
        PROGRAMS / "libc_names.c", ldflags=[str(lib)], preload=False, wait_helper=False
    )
    for asked in ([], ["--snapshot", "fork"], ["--snapshot", "concurrent"], ["--sweep", "child"]):
        res = _cli("scan", str(target.pid), *asked)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, (asked, res.stdout, lines)
        assert "it allocates with tcmalloc (libtcmalloc_stand_in-" in lines[0], (asked, lines)
    assert target.alive() and target.tracer() == 0


def test_a_program_whose_malloc_comes_before_the_shims_gets_one_line(targets):
    """Its calls never reach the shim, whose empty registry would report
    nothing leaked: the shim stays inert, and the scan says why."""
    target = targets.start(PROGRAMS / "own_malloc.c", wait_helper=False)
    res = _cli("scan", str(target.pid))
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "its malloc is another object's" in lines[0], lines
    assert target.alive() and target.tracer() == 0


def test_a_pause_budget_the_whole_copy_passes_is_said_in_the_report(targets):
    target = targets.start(PROGRAMS / "globals.c", preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions(max_pause_ms=0.001))
    assert report.allocations == "glibc heap" and report.leak_count == 1
    assert "more than --max-pause 0.001 ms" in report.snapshot_note, report.snapshot_note


def test_memaligned_chunks_are_named_by_their_moved_header(targets):
    """A block memalign placed inside a chunk it mapped alone is reported at
    its own (aligned) address, not at the stale header left at the
    mapping's start."""
    target = targets.start(PROGRAMS / "aligned_big.c", preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions())
    assert sorted(e.address % 256 for e in report.leaks) == [0, 0]
    assert any(e.address % 65536 == 0 for e in report.leaks)


def test_allocations_and_symbol_note_cross_the_rpc(targets):
    """--remote prints where the allocations came from and what symbolization
    left out, as a local scan does."""
    target = targets.start(PROGRAMS / "globals.c", preload=False, wait_helper=False)
    report = replace(scan(target.pid, ScanOptions()), symbol_note="files not read: /x (FIFO)")
    back = report_to_model(report_from_dict(report_to_dict(report)))
    assert (back.allocations, back.symbol_note) == ("glibc heap", "files not read: /x (FIFO)")
