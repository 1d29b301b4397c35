"""code_words on a real process with generated code
(tests/scan/programs/jit_code.c): the pointer an instruction carries at an
unaligned offset is found; the same bytes outside code are not read."""

from __future__ import annotations

import struct
from pathlib import Path

from unreachable.allocations.registry import read_registry
from unreachable.capture.target import open_target
from unreachable.process.maps import read_maps
from unreachable.roots.glibc_heaps import heap_parts, registry_blocks_in
from unreachable.roots.heap_words import heap_spans
from unreachable.roots.jit_code import code_words

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"


def test_immediates_in_code_and_not_elsewhere(targets):
    target = targets.start(PROGRAMS / "jit_code.c")
    maps = read_maps(target.pid)
    registry = read_registry(target.pid, open_target(target.pid).shim.descriptor_addr)
    spans = heap_spans(maps, heap_parts(target.pid, maps, registry_blocks_in(registry)))
    blocks = {registry.size(i): registry.begin(i) for i in range(registry.count)}
    words = code_words(target.pid, maps, spans)
    values = set(struct.unpack(f"<{len(words) // 8}Q", words))
    assert blocks[48] in values  # movabs in the code page
    assert blocks[40] not in values  # the same instruction's bytes in a data page
    # Code read before (what a fork snapshot's child lacks) counts the same.
    code = int(target.info["code"], 16)
    with open(f"/proc/{target.pid}/mem", "rb") as f:
        f.seek(code)
        page = f.read(4096)
    extra = code_words(target.pid, [m for m in maps if m.start != code], spans, page)
    assert blocks[48] in struct.unpack(f"<{len(extra) // 8}Q", extra)
    # A process that went away: no error, only what was read before.
    target.stop()
    assert code_words(target.pid, maps, spans) == b""
    assert code_words(target.pid, maps, spans, page) == extra
