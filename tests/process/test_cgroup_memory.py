"""Reading a cgroup's room: both hierarchies' file layouts, every ancestor's
limit, page cache counted as room. Real files in a tree laid out as cgroupfs
lays them out; tests/scan/test_memory_limits.py runs it on a real cgroup."""

from __future__ import annotations

from pathlib import Path

from unreachable.process.cgroup_memory import (
    SCANNER_BYTES_PER_ALLOCATION,
    SCANNER_FIXED_BYTES,
    headroom_from,
    no_room_for_outside_sweep,
    outside_sweep_charge,
    scanner_cache_budget,
)

MIB = 1 << 20


def _files(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text + "\n")


def test_v2_the_tightest_ancestor_counts_and_cache_is_room(tmp_path):
    _files(
        tmp_path / "system.slice",
        memory_max=str(100 * MIB),
        memory_current=str(60 * MIB),
        memory_stat=f"anon {50 * MIB}\nactive_file {4 * MIB}\ninactive_file {6 * MIB}",
    )
    _files(
        tmp_path / "system.slice" / "app.service",
        memory_max="max",
        memory_current=str(55 * MIB),
        memory_stat="anon 1",
    )
    proc = "0::/system.slice/app.service\n"
    assert headroom_from(proc, str(tmp_path)) == 50 * MIB
    # A tighter limit on the service itself wins.
    _files(tmp_path / "system.slice" / "app.service", memory_max=str(70 * MIB))
    assert headroom_from(proc, str(tmp_path)) == 15 * MIB


def test_v1_memory_hierarchy_is_used_before_the_unified_one(tmp_path):
    unlimited = "9223372036854771712"
    _files(
        tmp_path / "memory" / "jobs",
        memory_limit_in_bytes=str(64 * MIB),
        memory_usage_in_bytes=str(40 * MIB),
        memory_stat=f"cache {9 * MIB}\nactive_file {3 * MIB}\ntotal_active_file {1 * MIB}",
    )
    _files(
        tmp_path / "memory" / "jobs" / "one",
        memory_limit_in_bytes=unlimited,
        memory_usage_in_bytes=str(30 * MIB),
    )
    _files(tmp_path / "memory", memory_limit_in_bytes=unlimited, memory_usage_in_bytes="1")
    proc = "12:pids:/jobs/one\n4:memory:/jobs/one\n0::/jobs/one\n"
    assert headroom_from(proc, str(tmp_path)) == 25 * MIB


def test_no_limit_and_unreadable_cgroups_hold_nothing_back(tmp_path):
    _files(tmp_path / "a", memory_max="max", memory_current=str(MIB))
    assert headroom_from("0::/a\n", str(tmp_path)) is None
    assert headroom_from("0::/missing/cgroup\n", str(tmp_path)) is None
    assert headroom_from("", str(tmp_path)) is None


def test_a_cgroup_over_its_limit_has_no_room(tmp_path):
    _files(tmp_path / "a", memory_max=str(10 * MIB), memory_current=str(12 * MIB))
    assert headroom_from("0::/a\n", str(tmp_path)) == 0


def test_the_outside_sweep_fits_or_says_both_numbers():
    need = outside_sweep_charge(1_000_000)
    assert need == SCANNER_FIXED_BYTES + 1_000_000 * SCANNER_BYTES_PER_ALLOCATION
    assert no_room_for_outside_sweep(None, 10**9) == ""
    assert no_room_for_outside_sweep(need, 1_000_000) == ""
    why = no_room_for_outside_sweep(need - 1, 1_000_000)
    assert "1000000 allocations" in why and f"{need / MIB:.0f} MiB" in why
    # Less than nothing left (the caches' share already gone) reads as 0.
    assert "leaves 0 MiB" in no_room_for_outside_sweep(-5 * MIB, 10)


def test_the_scanners_caches_take_half_its_room():
    assert scanner_cache_budget(None) == 0
    assert scanner_cache_budget(100 * MIB) == 50 * MIB
    assert scanner_cache_budget(0) == 1  # a limit with no room: the smallest budget, not none
