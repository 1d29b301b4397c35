"""Shim internals compiled straight into sanitized test programs (ASan and
UBSan replace malloc, so these pieces are tested without preloading)."""

from __future__ import annotations

from tests.shim.support import run_ok, unit


def test_registry_and_stack_table_under_sanitizers() -> None:
    exe = unit("registry_unit.c", "registry.c", "size_map.c", "region.c", "stacks.c", "modules.c")
    assert run_ok(exe, shim=None) == "OK\n"
