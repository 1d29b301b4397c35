"""leak_track: every block live at exit, with its backtrace."""

from __future__ import annotations

import pytest

from tests.malloc_debug.support import exe, md_lines, run, split_backtrace, values


@pytest.mark.parametrize("options", ["leak_track", "leak_track backtrace", "leak_track guard"])
def test_leaks_listed_at_exit(shim, options):
    result = run("leak_track.c", shim=shim, options=options)
    assert result.returncode == 0, result.stderr
    v = values(result.stdout)
    prog = exe("leak_track.c")
    lines = md_lines(result.stderr)
    leaks = [line for line in lines if line.startswith("+++ ")]
    assert leaks == [
        f"+++ {prog} leaked block of size 100 at {v['big']} (leak 1 of 2)",
        f"+++ {prog} leaked block of size 24 at {v['small']} (leak 2 of 2)",
    ]
    if "backtrace" in options:
        for i in (0, 1):
            at = lines.index(leaks[i])
            assert lines[at + 1] == "Backtrace at time of allocation:"
            _, frames = split_backtrace(lines[at + 1 :], "Backtrace at time of allocation:")
            assert frames[0].group(3) == str(prog)
    else:
        assert len(lines) == 2


def test_leak_track_does_not_abort(shim):
    result = run("leak_track.c", shim=shim, options="leak_track abort_on_error")
    assert result.returncode == 0
    assert sum("leaked block" in line for line in md_lines(result.stderr)) == 2
