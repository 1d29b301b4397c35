"""Frames in a library the target dlclose'd after it allocated: symbolized from
the shim's record of loaded objects, with the file still on disk."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.targets import TargetFactory
from unreachable.scan import scan

PROGRAMS = Path(__file__).parent / "programs"
SCENARIO = Path(__file__).parent.parent / "scan" / "programs"
NOBODY = 65534


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


def test_a_file_the_target_could_not_read_is_not_used(targets, tmp_path_factory):
    """The record lives in the target's memory: a target may name any file
    there. A file its user cannot read gives no symbols."""
    if os.getuid() != 0:
        pytest.skip("running the target as another user takes root")
    shared = Path(tempfile.mkdtemp(prefix="unreachable-plugin-"))
    cleanups: list[Callable[[], None]] = []
    try:
        shared.chmod(0o755)
        plugin = shared / "plugin.so"
        shutil.copy(build(PROGRAMS / "plugin.c", shared=True), plugin)
        plugin.chmod(0o644)

        def as_nobody() -> None:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

        # The installed shim may sit where nobody cannot read it (/root/.pyenv).
        shim = shared / targets.shim.name
        shutil.copy(targets.shim, shim)
        shim.chmod(0o644)
        as_nobody_targets = TargetFactory(shim)
        cleanups.append(as_nobody_targets.cleanup)
        target = as_nobody_targets.start(
            PROGRAMS / "plugin_host.c",
            str(plugin),
            "absolute",
            options="backtrace=16",
            cflags=[f"-I{SCENARIO}"],
            preexec=as_nobody,
        )
        plugin.chmod(0o600)  # root's alone now
        [leak] = scan(target.pid).leaks
        assert not any(f.function.startswith("plugin_") for f in leak.backtrace)
        plugin.chmod(0o644)
        [leak] = scan(target.pid).leaks
        assert any(f.function == "plugin_alloc" for f in leak.backtrace)
    finally:
        for cleanup in cleanups:
            cleanup()
        shutil.rmtree(shared)
