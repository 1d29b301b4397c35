"""Find the shim's registry descriptor in a target's address space.

The shim exports one dynamic symbol, `unreachable_descriptor`; its address in
the target is the symbol's value plus the load bias of the shim's mapping.
Files named libunreachable_shim*.so are opened first: parsing every mapped
library's ELF to look for the symbol would cost a scan tens of milliseconds.
Only when none of them is the shim are the other files the target preloads
checked for the symbol: those LD_PRELOAD named when it started
(/proc/PID/environ) and those /etc/ld.so.preload names (in the target's
root), matched to its mappings by name or inode; and, where a program has
written over its environment (setproctitle) but one of its threads bears
the shim's helper's name, every other file it maps. So a shim a packager
installed as libunreachable.so, or a copy under any other name, is found
too, for one read of the environment and of the threads' names more in a
process that has no shim.
Whatever asks whether a process runs under the shim (the daemon's
discovery, the test for a process without it: shim_mapped) asks here, so
a renamed shim is one everywhere.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import lru_cache

from unreachable import _native
from unreachable.errors import TargetNotFound, TargetNotShimmed, TargetPermissionDenied
from unreachable.process.access import why_denied
from unreachable.process.mapped_file import file_for, mapped_path
from unreachable.process.maps import Mapping
from unreachable.process.secure_exec import runs_secure, why_secure
from unreachable.symbolize.elf_file import SHN_UNDEF, SHT_DYNSYM, ElfImage, read_elf
from unreachable.symbolize.files import Mapped, stat_checked

DESCRIPTOR_SYMBOL = _native.DESCRIPTOR_SYMBOL
SHIM_PREFIX = "libunreachable_shim"
# The name the shim gives its helper thread (helper.c), as /proc shows it.
HELPER_COMM = b"ur-helper\n"
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(slots=True, eq=False, repr=False)
class ShimLocation:
    """Where the shim is mapped in the target, and its descriptor there."""

    path: str  # as /proc/PID/maps names it (" (deleted)" included), to match mappings
    load_bias: int
    descriptor_addr: int
    # Its .bss past the file's data: the kernel maps that part anonymous, so
    # the path does not name it, and the shim's statics there are no roots.
    bss: tuple[int, int] | None = None


@dataclass(slots=True, eq=False, repr=False)
class ShimImage:
    """What a scan reads of the shim's file: the descriptor symbol's value
    (-1: none), the vaddr of the PT_LOAD at file offset 0, and the .bss
    (vaddrs, to the end of its last page; (0, 0): none)."""

    descriptor: int
    first_vaddr: int
    bss: tuple[int, int]

    def located(self, path: str, start: int) -> ShimLocation:
        """Where this image lies when its first mapping starts at start."""
        bias = start - self.first_vaddr
        lo, hi = self.bss
        bss = (bias + lo, bias + hi) if hi > lo else None
        return ShimLocation(path, bias, bias + self.descriptor, bss)


@lru_cache(maxsize=64)
def shim_image(path: str, st_dev: int, st_ino: int, mtime: int) -> ShimImage:
    """The shim file's ShimImage.

    With the struct-based reader, not pyelftools: every scan does this, and
    the leak check at exit runs a scan in every process that exits, where
    importing pyelftools alone cost more than the rest of the lookup."""
    del mtime  # cache key only
    # The inode stat'ed for the key (and checked as the one mapped) is read.
    elf = read_elf(path, mapped=(st_dev, st_ino))  # NotElf is a ValueError
    first_vaddr = next((seg.vaddr for seg in elf.loads if seg.offset == 0), 0)
    bss = next(
        (
            (seg.vaddr + seg.filesz, -(-(seg.vaddr + seg.memsz) // PAGE) * PAGE)
            for seg in elf.loads
            if seg.memsz > seg.filesz
        ),
        (0, 0),
    )
    return ShimImage(_descriptor_value(elf), first_vaddr, bss)


def _descriptor_value(elf: ElfImage) -> int:
    dynsym = elf.section(".dynsym")
    if dynsym is None or dynsym.type != SHT_DYNSYM or dynsym.link >= len(elf.sections):
        return -1
    data = elf.read_section(dynsym)
    names = elf.read_section(elf.sections[dynsym.link])
    wanted = DESCRIPTOR_SYMBOL.encode() + b"\0"
    for name_off, _info, _other, shndx, value, _size in struct.iter_unpack(
        "<IBBHQQ", data[: len(data) - len(data) % 24]
    ):
        if shndx != SHN_UNDEF and names.startswith(wanted, name_off):
            return int(value)
    return -1


def shim_named(m: Mapping) -> bool:
    """Whether the mapping's file has the shim's own name (libunreachable_shim*)."""
    return os.path.basename(mapped_path(m)).startswith(SHIM_PREFIX)


def shim_exported(real: str, m: Mapping, mapped: Mapped = None) -> ShimLocation | None:
    """Where the shim lies if the file real, mapped by m (its first mapping),
    exports the descriptor; None if it does not or cannot be read, or is not
    the file mapped, if given (files.check_mapped)."""
    try:
        st = stat_checked(real, mapped=mapped)
        image = shim_image(real, st.st_dev, st.st_ino, int(st.st_mtime))
    except (OSError, ValueError):
        return None
    return image.located(m.path, m.start) if image.descriptor >= 0 else None


def _preloaded(pid: int) -> tuple[set[str], set[int]]:
    """The base names and inodes of the files the target preloads: LD_PRELOAD
    as it started (spaces or colons between names, as ld.so reads it), and
    /etc/ld.so.preload in its root. Empty where unreadable."""
    words: list[str] = []
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"LD_PRELOAD="):
                    words += var[11:].decode(errors="surrogateescape").replace(":", " ").split()
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/root/etc/ld.so.preload", errors="surrogateescape") as f:
            words += f.read().replace(":", " ").split()
    except OSError:
        pass
    inodes: set[int] = set()
    for word in words:
        if "/" not in word:
            continue  # found on the library path: its name is the mapping's
        base = f"/proc/{pid}/root" if word.startswith("/") else f"/proc/{pid}/cwd/"
        try:
            inodes.add(os.stat(base + word).st_ino)
        except OSError:
            pass
    return {os.path.basename(w) for w in words}, inodes


def _located(pid: int, found: list[Mapping]) -> tuple[ShimLocation | None, str]:
    """The first of these mappings whose file exports the descriptor, and the
    path of one whose file was replaced on disk ("" if none)."""
    stale = ""
    for m in found:
        # Through the target's root, so processes in other mount namespaces work.
        real, exact, mapped = file_for(pid, m, f"/proc/{pid}/root")
        if not exact:
            # Its symbol table may not be the one mapped: never guess.
            stale = mapped_path(m)
            continue
        shim = shim_exported(real, m, mapped)
        if shim is not None:
            return shim, stale
    return None, stale


def _candidates(mappings: list[Mapping]) -> list[Mapping]:
    """Each mapped file's first mapping."""
    candidates: dict[str, Mapping] = {}
    for m in mappings:
        if m.path.startswith("/") and m.offset == 0 and m.path not in candidates:
            candidates[m.path] = m
    return list(candidates.values())


def runs_helper(pid: int) -> bool:
    """Whether one of pid's threads bears the shim's helper's name (which
    the helper gives itself when it first runs, a moment after the
    program's first allocation started it)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", "rb") as f:
                if f.read() == HELPER_COMM:
                    return True
        except OSError:
            continue
    return False


def _preloaded_shim(pid: int, candidates: list[Mapping]) -> ShimLocation | None:
    """The shim among the files pid preloads under another name. A program
    that retitles itself (nginx, postgres: setproctitle) writes over the
    environment /proc/PID/environ shows; where one of its threads bears the
    helper's name, every other mapped file is looked at instead."""
    names, inodes = _preloaded(pid)
    others = [
        m
        for m in candidates
        if not shim_named(m) and (os.path.basename(mapped_path(m)) in names or m.inode in inodes)
    ]
    # A stale one among them is not known to be a shim: not said.
    found = _located(pid, others)[0] if others else None
    if found is None and runs_helper(pid):
        found = _located(pid, [m for m in candidates if not shim_named(m) and m not in others])[0]
    return found


def shim_mapped(pid: int, mappings: list[Mapping]) -> bool:
    """Whether pid maps the shim as locate_shim finds it (one named
    libunreachable_shim*.so, taken on its name alone; else a preloaded file
    that exports the descriptor), without saying why not: the daemon's
    discovery and a scan's test for a process without the shim."""
    candidates = _candidates(mappings)
    return any(shim_named(m) for m in candidates) or _preloaded_shim(pid, candidates) is not None


def locate_shim(pid: int, mappings: list[Mapping]) -> ShimLocation:
    candidates = _candidates(mappings)
    found, stale = _located(pid, [m for m in candidates if shim_named(m)])
    if found is None:
        found = _preloaded_shim(pid, candidates)
    if found is not None:
        return found
    if stale:
        raise TargetNotShimmed(
            f"pid {pid} runs a shim ({stale}) that was replaced or deleted on disk after it"
            f" started, and its mapped copy (/proc/{pid}/map_files) needs CAP_SYS_ADMIN to read:"
            " restart the process, or scan with that capability"
        )
    if runs_secure(pid):
        raise TargetNotShimmed(
            f"pid {pid} is not running under the unreachable shim: it runs in secure-execution"
            " mode, where the dynamic loader ignores LD_PRELOAD paths (ld.so(8)):"
            f" {why_secure(pid)}"
        )
    raise TargetNotShimmed(
        f"pid {pid} is not running under the unreachable shim; start it with "
        "'unreachable-cli run -- CMD ...' or LD_PRELOAD=$(unreachable-cli shim-path)"
    )


DESCRIPTOR_SIZE = _native.abi_sizeof("ur_descriptor")


@dataclass(slots=True, eq=False, repr=False)
class DescriptorHeader:
    """The shim's descriptor, as read from the target (abi.h struct ur_descriptor)."""

    enabled: bool
    helper_tid: int  # as the shim recorded it (open_target: as the scanner names it)
    helper_cmd: int
    pid: int
    child_box: int = 0  # address of the in-child sweep's mailbox; 0: not supported
    write_tracker: int = 0  # address of the copy snapshot's write tracker; 0: not supported
    altstacks: int = 0  # address of the threads' sigaltstack records; 0: none kept
    num_altstacks: int = 0
    disabled: int = 0  # abi.h enum ur_disabled: why enabled is false
    disabled_errno: int = 0
    unregistered: int = 0  # blocks the shim had no memory to register
    options: int = 0  # address of the option string in effect
    modules: int = 0  # address of the loaded-object table; 0: none kept
    no_helper: int = 0  # abi.h enum ur_no_helper: why no helper thread will run


def no_helper_why(header: DescriptorHeader) -> str:
    """Why the shim starts no helper thread in the process, as a clause to
    follow "... is not running" ("" when it does not say)."""
    if header.no_helper == _native.NO_HELPER_RAW_CLONE:
        return (
            " (the process was made by a raw clone(), past glibc's fork(): glibc still"
            " lists its parent's threads, so the shim starts no thread in it)"
        )
    if header.no_helper == _native.NO_HELPER_OWN_FILTER:
        return (
            " (the process put itself under a seccomp filter, whose allowlist would kill"
            " a thread's start, so the shim starts no thread in it)"
        )
    return ""


def disabled_reason(disabled: int, err: int) -> str:
    """Why a shim is inert, in the words its own stderr line uses."""
    if disabled == _native.DISABLED_NO_MEMORY:
        cause = os.strerror(err) if err else "out of room"
        return (
            f"it had no memory for its registry at start ({cause}): the address-space "
            "limit (ulimit -v) or strict overcommit (vm.overcommit_memory=2) left it no room"
        )
    if disabled == _native.DISABLED_OTHER_MALLOC:
        return (
            "its malloc is another object's, found before the shim's (an allocator "
            "preloaded ahead of it, or a malloc in the executable; the process's stderr "
            "names it), so the shim saw none of its allocations: put the shim first in "
            "LD_PRELOAD (unreachable-cli run does)"
        )
    return "its UNREACHABLE_MALLOC_OPTIONS were rejected at start (see the process's stderr)"


def read_descriptor_header(pid: int, addr: int) -> DescriptorHeader:
    """The few descriptor fields needed before the target is stopped."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except FileNotFoundError:
        raise TargetNotFound(f"no process with pid {pid}") from None
    except PermissionError:
        raise TargetPermissionDenied(
            f"no permission to read the memory of pid {pid}: {why_denied(pid)}"
        ) from None
    try:
        raw = os.pread(fd, DESCRIPTOR_SIZE, addr)
    except OSError as e:
        raise TargetNotShimmed(f"cannot read the shim's descriptor in pid {pid}: {e}") from None
    finally:
        os.close(fd)
    return parse_descriptor_header(raw, f"pid {pid}")


def parse_descriptor_header(raw: bytes, where: str) -> DescriptorHeader:
    """The header's fields from its bytes; where names the process (or core)."""
    if len(raw) != DESCRIPTOR_SIZE:
        raise TargetNotShimmed(f"cannot read the shim's descriptor in {where}")
    d = _native.abi_decode("ur_descriptor", raw)
    if d["magic"] != _native.ABI_MAGIC:
        # Its version is then no more to be believed than the rest.
        raise TargetNotShimmed(
            f"{where}: the shim's registry descriptor is not one (magic {d['magic']:#x},"
            f" not {_native.ABI_MAGIC:#x}): the process overwrote it, so nothing in it"
            " can be read"
        )
    if d["version"] != _native.ABI_VERSION:
        raise TargetNotShimmed(
            f"{where} runs a shim with registry ABI {d['version']}, this scanner reads "
            f"ABI {_native.ABI_VERSION}: scan it with the unreachable version it was started with"
        )
    return DescriptorHeader(
        enabled=bool(d["enabled"]),
        helper_tid=d["helper_tid"],
        helper_cmd=d["helper_cmd"],
        pid=d["pid"],
        child_box=d["child_box"],
        write_tracker=d["write_tracker"],
        altstacks=d["altstacks"],
        num_altstacks=d["num_altstacks"],
        disabled=d["disabled"],
        disabled_errno=d["disabled_errno"],
        unregistered=d["unregistered"],
        options=d["options"],
        modules=d["modules"],
        no_helper=d["no_helper"],
    )
