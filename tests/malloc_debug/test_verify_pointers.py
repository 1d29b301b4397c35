"""verify_pointers: bad pointers given to free, realloc, malloc_usable_size."""

from __future__ import annotations

import pytest

from tests.malloc_debug.support import reports, run, split_backtrace, values


@pytest.mark.parametrize(
    ("mode", "fn"), [("free", "free"), ("realloc", "realloc"), ("usable", "malloc_usable_size")]
)
@pytest.mark.parametrize("extra", ["", " guard", " free_track backtrace"])
def test_unknown_pointer(shim, mode, fn, extra):
    result = run("verify_pointers.c", mode, shim=shim, options="verify_pointers" + extra)
    assert result.returncode == 0, result.stderr
    v = values(result.stdout)
    [report] = reports(result.stderr)
    head, frames = split_backtrace(report, "Backtrace at time of failure:")
    assert head == [f"+++ ALLOCATION {v['bogus']} UNKNOWN POINTER ({fn})"]
    assert "done" in v  # the call was a no-op and the program went on
    if mode == "realloc":
        assert v["realloc"] == "(nil)"
    if mode == "usable":
        assert v["usable"] == "0"


def test_double_free_unknown_without_free_track(shim):
    result = run("verify_pointers.c", "double", shim=shim, options="verify_pointers")
    v = values(result.stdout)
    [report] = reports(result.stderr)
    assert report[0] == f"+++ ALLOCATION {v['block']} UNKNOWN POINTER (free)"


def test_double_free_used_after_free_with_free_track(shim):
    result = run("verify_pointers.c", "double", shim=shim, options="verify_pointers free_track")
    v = values(result.stdout)
    [report] = reports(result.stderr)
    assert report[0] == f"+++ ALLOCATION {v['block']} USED AFTER FREE (free)"
    split_backtrace(report, "Backtrace of original free:")
    split_backtrace(report, "Backtrace at time of failure:")


def test_abort_on_error(shim):
    result = run("verify_pointers.c", "free", shim=shim, options="verify_pointers abort_on_error")
    assert result.returncode < 0
    assert "done" not in result.stdout
    assert reports(result.stderr)[0][0].endswith("UNKNOWN POINTER (free)")
