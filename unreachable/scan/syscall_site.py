"""Where a thread of a process without the shim is pointed to run an
injected system call: a syscall instruction of its own libc's code, or of
its vDSO (the injected fork's clone, each thread's sigaltstack query)."""

from __future__ import annotations

from unreachable.allocations.glibc_heap import GlibcLibc
from unreachable.process.maps import Mapping
from unreachable.process.memory import Read, memory_reader, present_ranges

SYSCALL = b"\x0f\x05"
SEARCHED = 4 << 20  # bytes of executable code looked through for a syscall instruction
PAGE = 4096


def syscall_instruction(pid: int, libc: GlibcLibc, mappings: list[Mapping]) -> int:
    """The address of a syscall instruction in the process's libc code, or
    its vDSO; 0 when none is found. Any two bytes 0f 05 decode as one from
    there, whatever instruction they belong to."""
    path = libc.mapping.path
    code = [m for m in mappings if m.executable and m.path == path]
    code += [m for m in mappings if m.executable and m.path == "[vdso]"]
    with memory_reader(pid) as read:
        for m in code:
            span = (m.start, min(m.end, m.start + SEARCHED))
            # A page at a time, those the process maps already first: a page
            # of code read through /proc is faulted into the target, and
            # reading all of libc's text at once grew a server's RSS by the
            # 744 KiB of it the server had never run.
            for begin, end in [*present_ranges(pid, [span]), span]:
                if (at := _find_syscall(read, begin, end)) is not None:
                    return at
    return 0


def _find_syscall(read: Read, begin: int, end: int) -> int | None:
    for page in range(begin, end, PAGE):
        try:
            text = read(page, min(PAGE, end - page))
        except OSError:
            return None
        if (at := text.find(SYSCALL)) >= 0:
            return page + at
    return None
