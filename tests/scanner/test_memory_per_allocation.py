"""What the scanner holds (docs/pause.md, "The scanner's memory"), checked by
structure, not by timing: the chunk cache's resident size against a sparse
root range."""

from __future__ import annotations

from array import array

import pytest

from tests.support.holder import python_holder
from unreachable import _native
from unreachable.process.maps import read_maps
from unreachable.sweep.mark import layout

# Maps 512 MiB and touches one page of it: a sparse reservation, such as a
# big array a program reserves and fills as it grows.
SPARSE = """
import ctypes, mmap, sys
m = mmap.mmap(-1, 512 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m[0:8] = b"\\1" * 8
print(ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)
sys.stdin.read()
"""


def _status_mb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    raise AssertionError(field)


def test_absent_pages_of_a_root_take_no_memory() -> None:
    """A root range the stopped sweep copies before it lets the target go:
    the pages the target does not have are zero in the copy without being
    written, so they take no memory (writing zeros into fresh cache memory
    took the whole 512 MiB)."""
    with python_holder(SPARSE) as (pid, addr):
        roots = array("Q", [addr, addr + (512 << 20)]).tobytes()
        present = array("Q", _native.present_ranges(pid, roots))
        if sum(present[1::2]) - sum(present[0::2]) >= 512 << 20:
            pytest.skip("no PAGEMAP_SCAN here (Linux 6.7): absent pages cannot be told")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM from here on
        before = _status_mb("VmRSS")
        r = _native.sweep(pid, b"", roots, b"", frozen=True, layout=layout(read_maps(pid)))
        grew = _status_mb("VmHWM") - before
    assert r["bytes_read"] >= 512 << 20  # every chunk of the range was copied
    assert grew < 128, f"the scanner grew by {grew} MB over a 512 MiB root of one page"
