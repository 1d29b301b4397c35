"""Registry shards owned by one thread and taken over by others (registry.c)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shim.support import program, run_ok


@pytest.mark.parametrize("options", ["", "backtrace=8", "guard free_track=10"])
def test_blocks_freed_by_other_threads(shim: Path, options: str) -> None:
    out = run_ok(program("handoff.c"), shim=shim, options=options)
    assert out.startswith("OK ") and int(out.split()[1]) > 0
