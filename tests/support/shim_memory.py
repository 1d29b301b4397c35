"""The shim's own memory in a running process: the resident bytes of the
pieces of address space its descriptor lists (every byte it keeps lies in
them)."""

from __future__ import annotations

from unreachable import _native
from unreachable.capture.target import open_target


def shim_resident_bytes(pid: int) -> int:
    addr = open_target(pid).shim.descriptor_addr
    regions = _native.read_registry(pid, addr, False, False)["regions"]
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            word, *rest = line.split()
            if "-" in word and not word.endswith(":"):
                start = int(word.split("-")[0], 16)
                inside = any(lo <= start < hi for lo, hi in regions)
            elif inside and word == "Rss:":
                total += int(rest[0]) * 1024
    return total
