"""The environment `unreachable-cli run` gives a program."""

from __future__ import annotations

from unreachable.shim_env import HUGE_PAGE_TUNABLE, shim_environment, with_tunable


def test_tunable_added_to_nothing():
    assert with_tunable("", HUGE_PAGE_TUNABLE) == "glibc.malloc.hugetlb=1"


def test_tunable_appended_after_the_users():
    assert (
        with_tunable("glibc.malloc.arena_max=2", HUGE_PAGE_TUNABLE)
        == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    )


def test_users_own_value_wins():
    assert with_tunable("glibc.malloc.hugetlb=0", HUGE_PAGE_TUNABLE) == "glibc.malloc.hugetlb=0"


def test_shim_goes_first_and_other_preloads_stay():
    env = shim_environment({"LD_PRELOAD": "/lib/other.so", "KEEP": "1"}, "/x/shim.so", "bt")
    assert env["LD_PRELOAD"] == "/x/shim.so:/lib/other.so"
    assert env["UNREACHABLE_MALLOC_OPTIONS"] == "bt" and env["KEEP"] == "1"
    assert "GLIBC_TUNABLES" not in env


def test_huge_pages_only_when_asked():
    env = shim_environment({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}, "/s.so", None, True)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1"
    assert "UNREACHABLE_MALLOC_OPTIONS" not in env
