"""free and malloc_usable_size leave errno alone under every option, as
glibc's do: free_track's unwinding, fills and reports must not show."""

from __future__ import annotations

import pytest

from tests.malloc_debug.support import run

OPTIONS = [
    "",
    "free_track",
    "free_track=20 free_track_backtrace_num_frames=4",
    "free_track backtrace",
    "guard",
    "fill",
    "expand_alloc",
    "verify_pointers",
    "record_allocs",
    "guard fill free_track verify_pointers record_allocs backtrace leak_track expand_alloc",
]


@pytest.mark.parametrize("options", OPTIONS)
def test_errno_kept(shim, options):
    result = run("free_errno.c", shim=shim, options=options)
    assert (result.returncode, result.stdout) == (0, "errno kept\n"), result.stderr
