"""Shim internals compiled straight into sanitized test programs (ASan and
UBSan replace malloc, so these pieces are tested without preloading)."""

from __future__ import annotations

import os

import pytest

from tests.shim.support import PROGRAMS, SHIM_SRC, UNIT_TEST_INCLUDE, run, run_ok, unit
from tests.support.cbuild import build, native_sources
from tests.support.tracking import copy_unsupported
from unreachable.capture.copy_snapshot import cow_possible


def test_registry_and_stack_table_under_sanitizers() -> None:
    exe = unit(
        "registry_unit.c",
        "registry.c",
        "deferred_ops.c",
        "size_map.c",
        "region.c",
        "stacks.c",
        "modules.c",
    )
    assert run_ok(exe, shim=None) == "OK\n"


def test_the_stack_table_grows_as_stacks_come_under_sanitizers() -> None:
    """backtrace=16 reserved the whole table (266 MiB of address space) at
    start: a program that lowers RLIMIT_AS later (vsftpd) had no room left."""
    exe = unit("stack_growth_unit.c", "region.c", "stacks.c", "modules.c")
    assert run_ok(exe, shim=None) == "OK\n"


def test_the_stack_table_grows_under_threads_under_tsan() -> None:
    """Lookups without the lock while other threads add segments and
    replace the index."""
    srcs = [
        PROGRAMS / "stack_growth_unit.c",
        *native_sources("shim", "region.c", "stacks.c", "modules.c"),
    ]
    tsan = ["-fsanitize=thread"]
    exe = build(srcs, cflags=[f"-I{SHIM_SRC}", f"-I{UNIT_TEST_INCLUDE}", *tsan], ldflags=tsan)
    assert run_ok(exe, shim=None) == "OK\n"


def test_a_registry_out_of_room_counts_and_says_what_it_left_out() -> None:
    srcs = [
        PROGRAMS / "region_full.c",
        *native_sources("shim", "region.c", "registry.c", "deferred_ops.c", "size_map.c"),
    ]
    exe = build(srcs, cflags=[f"-I{SHIM_SRC}"])
    result = run(exe, shim=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("limit\nOK "), result.stdout
    said = [line for line in result.stderr.splitlines() if line.startswith("unreachable: ")]
    assert len(said) == 1 and "no memory left for the registry" in said[0], result.stderr


def test_a_snapshot_the_helper_ends_leaves_no_writer_waiting() -> None:
    if copy_unsupported() or not cow_possible(os.getpid()):
        pytest.skip("no synchronous userfaultfd write protection here")
    srcs = [
        PROGRAMS / "cow_untrack.c",
        *native_sources("shim", "write_tracking.c", "self_maps.c", "kept_file.c"),
    ]
    exe = build(srcs, cflags=[f"-I{SHIM_SRC}"])
    assert run_ok(exe, shim=None) == "OK\n"
