"""Frames in a library the target dlclose'd after it allocated: symbolized from
the shim's record of loaded objects, with the file still on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cbuild import build
from unreachable.scan import scan

PROGRAMS = Path(__file__).parent / "programs"
SCENARIO = Path(__file__).parent.parent / "scan" / "programs"


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_leak_from_an_unloaded_plugin_has_function_and_line(targets, how):
    plugin = build(PROGRAMS / "plugin.c", shared=True)
    target = targets.start(
        PROGRAMS / "plugin_host.c",
        str(plugin),
        how,
        options="backtrace=16",
        cflags=[f"-I{SCENARIO}"],
    )
    maps = Path(f"/proc/{target.pid}/maps").read_text()
    assert str(plugin) not in maps  # unloaded before the scan
    report = scan(target.pid)
    assert (report.leak_count, report.leak_bytes) == (1, 77)
    [leak] = report.leaks
    frames = {f.function: f for f in leak.backtrace}
    assert "plugin_alloc" in frames and "plugin_leak" in frames, leak.backtrace
    source = (PROGRAMS / "plugin.c").read_text().splitlines()
    alloc = frames["plugin_alloc"]
    assert alloc.map == str(plugin)
    assert alloc.file.endswith("plugin.c") and "malloc(77)" in source[alloc.line - 1], alloc
    assert "plugin_alloc();" in source[frames["plugin_leak"].line - 1]
