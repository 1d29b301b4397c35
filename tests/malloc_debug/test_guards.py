"""front_guard, rear_guard, guard, abort_on_error: bionic's reports, aligned pointers."""

from __future__ import annotations

import signal

import pytest

from tests.malloc_debug.support import exe, reports, run, split_backtrace, values


def test_front_guard_report(shim):
    result = run("guard.c", "front", shim=shim, options="guard")
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)
    head, frames = split_backtrace(report, "Backtrace at time of failure:")
    assert head == [
        f"+++ ALLOCATION {ptr} SIZE 100 HAS A CORRUPTED FRONT GUARD",
        "  allocation[-32] = 0x00 (expected 0xaa)",
        "  allocation[-15] = 0x02 (expected 0xaa)",
    ]
    assert any(m.group(3) == str(exe("guard.c")) for m in frames), frames
    assert any(m.group(4) == "__libc_start_main" for m in frames)


@pytest.mark.parametrize("options", ["rear_guard", "guard=64", "rear_guard=2 backtrace"])
def test_rear_guard_report(shim, options):
    result = run("guard.c", "rear", shim=shim, options=options)
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)
    head, _ = split_backtrace(report, "Backtrace at time of failure:")
    assert head == [
        f"+++ ALLOCATION {ptr} SIZE 100 HAS A CORRUPTED REAR GUARD",
        "  allocation[100] = 0xbf (expected 0xbb)",
        "  allocation[101] = 0x00 (expected 0xbb)",
    ]
    if "backtrace" in options:  # the allocation site comes too
        _, frames = split_backtrace(report, "Backtrace at time of allocation:")
        assert frames[0].group(3) == str(exe("guard.c"))
    else:
        assert "Backtrace at time of allocation:" not in report


def test_rear_guard_checked_at_realloc(shim):
    result = run("guard.c", "realloc", shim=shim, options="guard=16")
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)  # once, although the old block is then freed
    assert report[:2] == [
        f"+++ ALLOCATION {ptr} SIZE 100 HAS A CORRUPTED REAR GUARD",
        "  allocation[103] = 0x01 (expected 0xbb)",
    ]


def test_front_guard_alone_has_no_rear(shim):
    result = run("guard.c", "rear", shim=shim, options="front_guard")
    assert result.returncode == 0 and reports(result.stderr) == []


def test_header_tag_damage_is_invalid_tag(shim):
    # rear_guard alone: the 32-byte header sits right before the pointer, so
    # the program's write to p[-32] lands on its tag
    result = run("guard.c", "front", shim=shim, options="rear_guard")
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)
    assert report[0] == f"+++ ALLOCATION {ptr} HAS INVALID TAG 1ee7d000 (free)"
    split_backtrace(report, "Backtrace at time of failure:")


@pytest.mark.parametrize(
    "options",
    [
        "guard",
        "front_guard=1",
        "front_guard=16384",
        "rear_guard=3",
        "guard fill expand_alloc=7 free_track=3",
        "guard=17 backtrace verify_pointers",
    ],
)
def test_pointers_stay_aligned_and_intact(shim, options):
    result = run("guard.c", "align", shim=shim, options=options)
    assert result.returncode == 0, result.stdout + result.stderr
    assert values(result.stdout)["align"] == "0"
    assert reports(result.stderr) == []
    if "rear_guard" in options or options.startswith("guard"):
        # with a rear guard the usable size is exactly the requested size
        assert values(result.stdout)["usable"] == "100"


def test_clean_blocks_are_quiet(shim):
    result = run("guard.c", "clean", shim=shim, options="guard")
    assert result.returncode == 0 and result.stderr == ""


def test_abort_on_error(shim):
    result = run("guard.c", "front", shim=shim, options="guard abort_on_error")
    assert result.returncode == -signal.SIGABRT
    [report] = reports(result.stderr)  # the report is complete before the abort
    assert report[0].endswith("HAS A CORRUPTED FRONT GUARD")
    assert "done" not in result.stdout
