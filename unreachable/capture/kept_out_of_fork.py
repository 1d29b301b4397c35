"""Memory a fork snapshot does not have.

A mapping marked MADV_DONTFORK is left out of every child, the snapshot
child included: node's V8 heap, io_uring's rings (MariaDB's among them),
RDMA and DPDK buffers. The pointers it holds would be missing from the
roots and the blocks they keep alive reported leaked: node under the shim
had over 400 such "leaks" in a fork snapshot, none when stopped.

A mapping marked MADV_WIPEONFORK is in the child, but zeroed (LibreSSL's
and BoringSSL's random number state live in such pages). Its line in maps
is the same in both; only smaps's VmFlags ("wf") tell, and smaps walks
every page table (~25 ms for a 1 GB heap), so it is read before the stop,
not in the pause. A mapping marked in between is missed.

So while the target is still stopped for the snapshot, its maps are
compared with the frozen child's, and what the child lacks or has wiped is
read from the target then and there: its words become roots as register
values are. That costs the pause what reading them costs; past
KEPT_OUT_MAX_BYTES a scan takes no snapshot child instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from unreachable.process.maps import Mapping, parse_maps
from unreachable.process.memory import memory_reader, present_ranges

# What the fork pause may spend reading (~2-4 ms here).
KEPT_OUT_MAX_BYTES = 16 << 20

# The kernel gives every process its own of these.
_PER_PROCESS = ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]")


@dataclass(slots=True)
class KeptOut:
    mappings: list[Mapping] = field(default_factory=list)  # the target's, missing in the child
    words: bytes = b""  # their contents at the snapshot, present pages only
    code: bytes = b""  # the part of words that is JIT code (roots/jit_code.py)
    too_big: str = ""  # why they were not read ("" when read, or when there are none)


def kept_out_of_fork(target: list[Mapping], child: list[Mapping]) -> list[Mapping]:
    """The target's readable mappings that the child does not have."""
    have = {(m.start, m.end) for m in child}
    return [
        m
        for m in target
        if m.readable and m.path not in _PER_PROCESS and (m.start, m.end) not in have
    ]


def wiped_in_forks(pid: int) -> list[tuple[int, int]]:
    """The target's mappings marked MADV_WIPEONFORK, from smaps (read while
    it runs). Unreadable smaps: none known."""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            text = f.read()
    except OSError:
        return []
    if " wf" not in text:  # the usual case: no need to parse
        return []
    wiped, current = [], (0, 0)
    for line in text.splitlines():
        first, _, rest = line.partition(" ")
        if first == "VmFlags:":
            if "wf" in rest.split():
                wiped.append(current)
        elif not first.endswith(":") and "-" in first:
            start, _, end = first.partition("-")
            current = (int(start, 16), int(end, 16))
    return wiped


def read_kept_out(
    pid: int, target_maps: str, child_maps: str, wiped: list[tuple[int, int]] | None = None
) -> KeptOut:
    """What the child lacks or has wiped (wiped_in_forks), read from the
    stopped target (maps unparsed, as read in the pause: only the lines that
    differ are parsed, and all of them only when something is wiped)."""
    child_lines = set(child_maps.splitlines())
    differ = "\n".join(line for line in target_maps.splitlines() if line not in child_lines)
    missing = kept_out_of_fork(parse_maps(differ), parse_maps(child_maps)) if differ else []
    if wiped:
        # Still the target's (it may have unmapped them since smaps) and readable.
        known = set(wiped)
        missing += [m for m in parse_maps(target_maps) if m.readable and (m.start, m.end) in known]
    if not missing:
        return KeptOut()
    spans = present_ranges(pid, sorted((m.start, m.end) for m in missing))
    size = sum(e - b for b, e in spans)
    if size > KEPT_OUT_MAX_BYTES:
        return KeptOut(missing, too_big=f"{describe(missing)} ({size >> 20} MiB in use)")
    code = [(m.start, m.end) for m in missing if m.anonymous and m.executable]
    parts, code_parts = [], []
    with memory_reader(pid) as read:
        for b, e in spans:
            try:
                data = read(b, e - b)
            except OSError:
                continue  # unreadable pages hold no roots
            parts.append(data)
            if any(cb <= b < ce for cb, ce in code):
                code_parts.append(data)
    return KeptOut(missing, b"".join(parts), b"".join(code_parts))


def describe(missing: list[Mapping]) -> str:
    """One line for the report's snapshot_note."""
    size = sum(m.end - m.start for m in missing)
    first = missing[0]
    return (
        f"the target keeps {len(missing)} mapping(s), {size >> 20} MiB, out of forks"
        f" (MADV_DONTFORK or MADV_WIPEONFORK, first {first.start:#x}-{first.end:#x}"
        f" {first.path or 'anonymous'})"
    )
