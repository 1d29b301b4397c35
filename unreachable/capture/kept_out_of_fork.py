"""Memory a fork snapshot does not have.

A mapping the target marked MADV_DONTFORK (V8's heap in node does; so do
RDMA and DPDK buffers) is left out of every child, the snapshot child
included. The pointers it holds would then be missing from the roots and
the blocks they keep alive reported leaked: node under the shim had over 400
such "leaks" in a fork snapshot, none when stopped. So the target's maps as
they were at the snapshot are compared with the child's, and a scan whose
child lacks any readable mapping is taken again without a child.
"""

from __future__ import annotations

from unreachable.process.maps import Mapping

# The kernel gives every process its own of these.
_PER_PROCESS = ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]")


def kept_out_of_fork(target: list[Mapping], child: list[Mapping]) -> list[Mapping]:
    """The target's readable mappings that the child does not have."""
    have = {(m.start, m.end) for m in child}
    return [
        m
        for m in target
        if m.readable and m.path not in _PER_PROCESS and (m.start, m.end) not in have
    ]


def describe(missing: list[Mapping]) -> str:
    """One line for the report's snapshot_note."""
    size = sum(m.end - m.start for m in missing)
    first = missing[0]
    return (
        f"the target keeps {len(missing)} mapping(s), {size >> 20} MiB, out of forks"
        f" (MADV_DONTFORK, first {first.start:#x}-{first.end:#x}), so a snapshot child"
        " cannot see the pointers in them"
    )
