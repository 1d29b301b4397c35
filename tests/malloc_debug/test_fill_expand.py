"""fill_on_alloc, fill_on_free, fill (MAX_FILLED_BYTES) and expand_alloc."""

from __future__ import annotations

import pytest

from tests.malloc_debug.support import run, values


def fills(options, shim):
    result = run("fill.c", shim=shim, options=options)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return {k: v.split() for k, v in values(result.stdout).items()}


def test_fill_whole_allocation(shim):
    got = fills("fill", shim)
    alloc, _, usable = got["alloc"]
    assert alloc == usable  # every usable byte is 0xeb
    assert got["calloc"] == ["zero", "100"]  # calloc is not filled
    old, _, new, _, above = got["realloc"][1:]  # 'old N new M of K'
    assert int(old) >= 100 and new == above  # old bytes copied, the rest 0xeb
    freed, _, total = got["free"]
    assert freed == total  # 0xef over the whole block (past glibc's list words)


def test_fill_max_bytes(shim):
    got = fills("fill=10", shim)
    assert got["alloc"][0] == "10"
    assert got["realloc"][3] == "0"  # only the first 10 bytes are ever filled


@pytest.mark.parametrize(
    ("options", "alloc_filled", "free_filled"),
    [
        ("fill_on_alloc", True, False),
        ("fill_on_free", False, True),
        ("fill_on_alloc=200", True, False),
    ],
)
def test_fill_sides(shim, options, alloc_filled, free_filled):
    got = fills(options, shim)
    assert (got["alloc"][0] == got["alloc"][2]) is alloc_filled
    assert (got["free"][0] == got["free"][2]) is free_filled


@pytest.mark.parametrize(("options", "extra"), [("expand_alloc", 16), ("expand_alloc=1000", 1000)])
def test_expand_alloc(shim, options, extra):
    result = run("expand_alloc.c", shim=shim, options=options)
    assert result.returncode == 0, result.stderr
    assert int(values(result.stdout)["min"].split()[-1]) >= extra


def test_no_expand_by_default(shim):
    result = run("expand_alloc.c", shim=shim, options="")
    assert int(values(result.stdout)["min"].split()[-1]) < 16
