"""The shim's .bss past its file-backed pages is an anonymous mapping of its
own: the shim's values only (the helper's page-walk output, its region and
span tables), which are no roots. A word there that falls in a leaked block
(the helper's last page walk lists pages of the heap) must not hide it."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from elftools.elf.elffile import ELFFile

from tests.support.targets import wait_for_helper
from unreachable.capture.descriptor import locate_shim
from unreachable.process.maps import read_maps
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
MASK = 0xA5A5A5A5A5A5A5A5  # the program's (helper_residue.c)
# The helper's PAGEMAP_SCAN output (write_tracking.c protect_present): page
# ranges of the target's own heap once a scan has tracked writes.
WALK_OUTPUT = "vec.0"


def _symbol(path: str, name: str) -> int:
    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".symtab")
        assert table is not None, f"{path} has no .symtab"
        found = table.get_symbol_by_name(name)
        assert found, f"{name} not in {path}"
        return int(found[0]["st_value"])


def test_a_word_in_the_shims_bss_keeps_nothing(targets, shim):
    target = targets.start(PROGRAMS / "helper_residue.c")
    wait_for_helper(target.pid)
    leaked = target.int("masked") ^ MASK
    location = locate_shim(target.pid, read_maps(target.pid))
    at = location.load_bias + _symbol(str(shim), WALK_OUTPUT)
    tail = [m for m in read_maps(target.pid) if m.start <= at < m.end]
    assert tail and tail[0].anonymous, "the walk's output lies in the .bss past the file"
    fd = os.open(f"/proc/{target.pid}/mem", os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<Q", leaked + 16), at)
    finally:
        os.close(fd)
    for snapshot in ("stopped", "concurrent"):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert (report.leak_count, report.leak_bytes) == (1, 4000), snapshot
    assert target.alive() and target.tracer() == 0
