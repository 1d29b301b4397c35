"""The glibc heap walk on other glibc releases than this machine's: Debian's
2.31 (bullseye) and 2.41 (trixie), Ubuntu's 2.35 (jammy), 2.39 (noble),
2.42 (questing) and 2.43 (resolute), fetched by scripts/fetch-test-glibcs.sh
(tests/support/glibcs.py). Each scenario program, built against that glibc
and run on it without the shim, gets the shim's verdict; from 2.35, which
the shim runs on too, the same executable is also scanned under the shim. The
heuristics that find main_arena, mp_ and the tcache slot give what that
release's debug symbols give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scan.test_glibc_heap import EXPECTED, HEAP_SLACK, MMAPPED
from tests.scan.test_scenarios import SCENARIOS
from tests.support.glibcs import SUITES, Glibc, glibc
from tests.support.targets import Target, TargetFactory
from unreachable.allocations import glibc_libc
from unreachable.errors import TargetUnscannable
from unreachable.process.maps import read_maps
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
WITHOUT_SHIM = [
    *SCENARIOS,
    "arena_heap.c",
    "graph.c",
    "aligned_big.c",
    "mapping_end.c",
]
# The shim needs glibc 2.34's symbols: before that, the programs' READY
# lines (the shim's verdicts on this machine) are the reference. On 2.42 and
# 2.43 thread stacks merge into one mapping (guard regions, not guard
# mappings): arena_heap.c and merged_stacks.c scanned under the shim there
# prove the cached stacks are still told apart.
SHIM_RUNS = {"jammy", "noble", "trixie", "questing", "resolute"}


@pytest.fixture(scope="module", params=list(SUITES))
def release(request: pytest.FixtureRequest) -> Glibc:
    return glibc(request.param)


def start(targets: TargetFactory, release: Glibc, program: str, shim: bool = False) -> Target:
    cflags, ldflags = release.flags()
    return targets.start(
        PROGRAMS / program,
        preload=shim,
        wait_helper=shim,
        cflags=cflags,
        ldflags=ldflags,
    )


def libc_of(pid: int) -> str:
    """The libc.so.6 file the process maps (read through any of its threads:
    the main one may have exited)."""
    for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
        for line in (task / "maps").read_text().splitlines():
            path = line.split(maxsplit=5)[-1]
            if "/libc.so.6" in path or "/libc-2." in path:
                return path
    return ""


@pytest.mark.parametrize("program", WITHOUT_SHIM)
def test_scenario_on_another_glibc(targets, release, program):
    target = start(targets, release, program)
    assert libc_of(target.pid) == str(release.libc)
    report = scan(target.pid, ScanOptions())
    assert report.allocations == "glibc heap"
    count = EXPECTED.get(program, target.int("leak_count"))
    assert report.leak_count == count, [(hex(e.address), e.size) for e in report.leaks]
    if program not in EXPECTED:
        requested = target.int("leak_bytes")
        slack = MMAPPED.get(program, HEAP_SLACK)
        assert requested <= report.leak_bytes <= requested + count * slack
    assert target.alive() and target.tracer() == 0
    whole = scan(target.pid, ScanOptions(snapshot="stopped"))  # the copy, in the stopper's stop
    assert (whole.snapshot, whole.leak_count) == ("stopped", report.leak_count)
    assert whole.leak_bytes == report.leak_bytes
    assert target.alive() and target.tracer() == 0
    if release.suite in SHIM_RUNS:
        shimmed = start(targets, release, program, shim=True)
        assert libc_of(shimmed.pid) == str(release.libc)
        under = scan(shimmed.pid, ScanOptions())
        assert under.allocations == "shim registry"
        assert under.leak_count == target.int("leak_count")
        if program not in EXPECTED:
            assert under.leak_bytes == target.int("leak_bytes")


def test_churning_threads_on_another_glibc(targets, release):
    """Threads in malloc, realloc and free without pause (tcaches, fastbins,
    arenas of their own): every scan exact, or the heap mid-update."""
    target = start(targets, release, "churn.c")
    exact = 0
    for snapshot in ("auto", "stopped") * 5:
        try:
            report = scan(target.pid, ScanOptions(snapshot=snapshot))
        except TargetUnscannable as e:
            assert "mid-update" in str(e), e
            continue
        assert report.leak_count == 5, [(hex(e.address), e.size) for e in report.leaks]
        exact += 1
    assert exact > 0
    assert target.alive() and target.tracer() == 0


def test_churning_threads_under_the_shim_on_another_glibc(targets, release):
    """The same threads under the shim, whose registry tracks the blocks a
    thread is inside an operation for: every scan exact, in each snapshot
    mode that runs the target on (the shim over that release's malloc)."""
    if release.suite not in SHIM_RUNS:
        pytest.skip(f"the shim does not run on glibc {release.suite}'s {SUITES[release.suite]}")
    target = start(targets, release, "churn.c", shim=True)
    for snapshot in ("auto", "concurrent") * 3:
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert report.allocations == "shim registry"
        assert (report.leak_count, report.leak_bytes) == (
            target.int("leak_count"),
            target.int("leak_bytes"),
        ), [(hex(e.address), e.size) for e in report.leaks]
    assert target.alive()


@pytest.mark.parametrize("program", ["arena_heap.c", "exited_thread.c"])
def test_scan_with_the_releases_debug_symbols(targets, monkeypatch, release, program):
    """main_arena, mp_ and the tcache slot taken from libc6-dbg's symbols (by
    build-id) rather than recognised: the same verdict."""
    monkeypatch.setenv("UNREACHABLE_DEBUG_DIRS", str(release.debug_dir))
    glibc_libc._facts.cache_clear()
    try:
        assert glibc_libc.libc_facts(str(release.libc)).how == "debug symbols"
        target = start(targets, release, program)
        report = scan(target.pid, ScanOptions())
    finally:
        glibc_libc._facts.cache_clear()
    assert report.leak_count == target.int("leak_count")
    assert target.alive() and target.tracer() == 0


def test_heuristics_agree_with_debug_symbols(monkeypatch, release):
    def facts(debug_dir: str) -> glibc_libc.LibcFacts:
        monkeypatch.setenv("UNREACHABLE_DEBUG_DIRS", debug_dir)
        glibc_libc._facts.cache_clear()
        return glibc_libc.libc_facts(str(release.libc))

    symbols = facts(str(release.debug_dir))
    guessed = facts("/nonexistent")
    glibc_libc._facts.cache_clear()
    assert (symbols.how, guessed.how) == ("debug symbols", "heuristics")
    assert symbols.version == guessed.version == SUITES[release.suite]
    assert (guessed.main_arena, guessed.mp) == (symbols.main_arena, symbols.mp)
    lo, hi = symbols.malloc_code
    assert guessed.malloc_code[0] <= lo < hi <= guessed.malloc_code[1]
    assert symbols.tcache_tls in {addend for _, addend in guessed.tpoff_slots}


def test_main_arena_found_by_its_bins(targets, release):
    """The roots stage's main_arena (found by its bins' fingerprint, for
    shim scans and shim cores) is the one libc's relocations name, in the
    release's layout, with the four threads' arenas in the list of them."""
    target = start(targets, release, "arena_heap.c")
    mappings = read_maps(target.pid)
    facts = glibc_libc.libc_facts(str(release.libc))
    bias = min(m.start for m in mappings if m.path == str(release.libc))
    arena = bias + facts.main_arena
    size = glibc_libc.arena_layout(facts.minor)[0]
    assert find_main_arena(target.pid, mappings) == (arena, arena + size)
