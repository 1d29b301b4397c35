"""A core file as a scan's snapshot (docs/design.md "Core files").

The core is read once into a MemoryCopy made without a process
(MemoryCopy(0).load): every native reader then takes it as it takes a copy
snapshot, and the mark, roots, registry and glibc walk read it unchanged.
Threads come from NT_PRSTATUS (their registers, fs_base included: TLS and
tcache) and NT_X86_XSTATE, mappings from the PT_LOAD headers and NT_FILE,
the vDSO and the main stack from NT_AUXV.

Parts a core leaves out (gcore omits read-only file mappings; the kernel's
coredump_filter omits more, writing PT_LOADs with no file bytes) are read
from the file NT_FILE names, under --sysroot, when that file is the one
mapped: its first page equals the core's copy of it, or, with no such copy,
it is older than the core. What stays missing reads as unreadable and is
named in the report.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from unreachable import _native
from unreachable.capture.stop_world import CapturedThread
from unreachable.errors import ScanError, ScannerOutOfMemory
from unreachable.process.maps import Mapping

PAGE = 4096
NT_PRSTATUS = 1
NT_PRPSINFO = 3
NT_AUXV = 6
NT_FILE = 0x46494C45
NT_X86_XSTATE = 0x202
PR_PID = 32  # elf_prstatus: pr_pid
PR_REG = 112  # elf_prstatus: pr_reg, a user_regs_struct
USER_REGS = _native.abi_sizeof("user_regs_struct")
RSP = 19
AT_SYSINFO_EHDR = 33
AT_EXECFN = 31
VSYSCALL = 0xFFFFFFFFFF600000
PF_X, PF_W, PF_R = 1, 2, 4


class CoreUnreadable(ScanError):
    """Not a core file, or one cut short: nothing is scanned from it."""

    grpc_status = "INVALID_ARGUMENT"


@dataclass(slots=True)
class CoreFile:
    path: str
    pid: int
    command: str
    threads: list[CapturedThread]
    mappings: list[Mapping]
    memory: _native.MemoryCopy
    root: str  # prefixes the paths NT_FILE names ("" or --sysroot)
    exe: str  # the executable as the core names it
    exe_file: str  # the file read for it (--exe, or root + exe)
    notes: list[str] = field(default_factory=list)  # what the core lacks, for the report
    # PROT_NONE mappings (thread stacks' guards) are listed: the kernel's
    # cores list every mapping, gdb's leave those out.
    guards_listed: bool = True
    changed: set[str] = field(default_factory=set)  # files found not to be the ones mapped
    held: list[tuple[int, int]] = field(default_factory=list)  # the ranges loaded

    def holds(self, addr: int, n: int) -> bool:
        """Whether [addr, addr + n) was in the core or read from its file."""
        return any(b <= addr and addr + n <= e for b, e in self.held)

    def lacks(self, addr: int, what: str) -> None:
        """Refuse a core that lacks the memory of what the scan starts from."""
        if not self.holds(addr, 8):
            raise CoreUnreadable(
                f"{self.path} lacks {what} (its memory at {addr:#x} was left out of the core:"
                " the process's /proc/PID/coredump_filter excluded it; the default, 0x33,"
                " keeps it)"
            )

    def file_for(self, path: str) -> str:
        """Where to read a file the core names."""
        return self.exe_file if path == self.exe else f"{self.root}{path}"

    def close(self) -> None:
        self.memory.close()


@dataclass(frozen=True, slots=True)
class _Load:
    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int


def _perms(flags: int) -> str:
    return (
        ("r" if flags & PF_R else "-")
        + ("w" if flags & PF_W else "-")
        + ("x" if flags & PF_X else "-")
        + "p"
    )


def _file_perms(path: str, offset: int) -> str:
    """The permissions of the segment of an ELF file that holds offset (a
    core that omits a mapping does not say them); r--p if not an ELF."""
    # Here, not at the top: live scans import this module and read no core.
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            for seg in ELFFile(f).iter_segments():
                begin = seg["p_offset"] & ~(PAGE - 1)
                if (
                    seg["p_type"] == "PT_LOAD"
                    and begin <= offset < seg["p_offset"] + seg["p_filesz"]
                ):
                    return _perms(seg["p_flags"])
    except (OSError, ELFError, ValueError, struct.error):
        pass
    return "r--p"


def _parse_file_note(desc: bytes) -> list[tuple[int, int, int, str]]:
    count, page = struct.unpack_from("<QQ", desc)
    names = desc[16 + 24 * count :].split(b"\0")
    out = []
    for i in range(count):
        start, end, pgoff = struct.unpack_from("<QQQ", desc, 16 + 24 * i)
        out.append((start, end, pgoff * page, names[i].decode(errors="replace")))
    return out


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode(errors="replace")


def open_core(path: str, exe: str | None = None, sysroot: str | None = None) -> CoreFile:
    """Read the core at path; raises CoreUnreadable with one line when it is
    not an x86-64 ELF core or is cut short."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.segments import NoteSegment

    root = (sysroot or "").rstrip("/")
    try:
        f = open(path, "rb")  # noqa: SIM115 - the notes and loads are read before it closes
    except OSError as e:
        raise CoreUnreadable(f"cannot open core file {path}: {e.strerror or e}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            elf = ELFFile(f)
            if elf["e_type"] != "ET_CORE" or elf["e_machine"] != "EM_X86_64":
                raise CoreUnreadable(
                    f"{path} is an ELF file but not an x86-64 core ({elf['e_type']},"
                    f" {elf['e_machine']})"
                )
            sections_end = elf["e_shoff"] + elf["e_shnum"] * elf["e_shentsize"]
            if elf["e_shoff"] and sections_end > size:
                raise CoreUnreadable(
                    f"{path} is truncated: it ends at byte {size}, its section headers at"
                    f" {sections_end}"
                )
            loads, notes = [], []
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD":
                    load = _Load(
                        seg["p_vaddr"],
                        seg["p_memsz"],
                        seg["p_offset"],
                        seg["p_filesz"],
                        seg["p_flags"],
                    )
                    if load.offset + load.filesz > size:
                        raise CoreUnreadable(
                            f"{path} is truncated: it ends at byte {size}, its memory at"
                            f" {load.vaddr:#x} needs {load.offset + load.filesz}"
                        )
                    loads.append(load)
                elif isinstance(seg, NoteSegment):
                    if seg["p_offset"] + seg["p_filesz"] > size:
                        raise CoreUnreadable(f"{path} is truncated: its notes are cut short")
                    notes += [(n["n_type"], n["n_descdata"]) for n in seg.iter_notes()]
        except (ELFError, struct.error, ValueError, UnicodeDecodeError) as e:
            f.seek(0)
            if f.read(4) == b"\x7fELF":
                raise CoreUnreadable(f"{path} is a truncated or damaged ELF file: {e}") from None
            raise CoreUnreadable(f"{path} is not an ELF core file: {e}") from None
        return _build(path, f, loads, notes, exe, root)


def _note_bytes(desc: object) -> bytes:
    return desc if isinstance(desc, bytes) else str(desc).encode("latin-1")


def _build(
    path: str,
    f: BinaryIO,
    loads: list[_Load],
    notes: Sequence[tuple[object, object]],
    exe: str | None,
    root: str,
) -> CoreFile:
    threads: list[CapturedThread] = []
    files: list[tuple[int, int, int, str]] = []
    auxv: dict[int, int] = {}
    command, pid = "", 0
    for kind, raw in notes:
        desc = _note_bytes(raw)
        if kind in ("NT_PRSTATUS", NT_PRSTATUS) and len(desc) >= PR_REG + USER_REGS:
            tid = struct.unpack_from("<i", desc, PR_PID)[0]
            regs = desc[PR_REG : PR_REG + USER_REGS]
            sp = struct.unpack_from("<Q", regs, 8 * RSP)[0]
            threads.append(CapturedThread(tid, sp, regs, b""))
        elif kind in ("NT_X86_XSTATE", NT_X86_XSTATE) and threads:
            threads[-1] = replace(threads[-1], xstate=desc)
        elif kind in ("NT_PRPSINFO", NT_PRPSINFO) and len(desc) >= 136:
            pid = struct.unpack_from("<i", desc, 24)[0]
            command = _cstr(desc[56:136]).strip() or _cstr(desc[40:56])
        elif kind in ("NT_AUXV", NT_AUXV):
            for i in range(0, len(desc) - 15, 16):
                key, value = struct.unpack_from("<QQ", desc, i)
                auxv[key] = value
        elif kind in ("NT_FILE", NT_FILE):
            files = _parse_file_note(desc)
    if not threads:
        raise CoreUnreadable(f"{path} has no thread (no NT_PRSTATUS note): not a process core")
    pid = pid or threads[0].tid
    exe_path = files[0][3] if files else ""
    core = CoreFile(
        path=path,
        pid=pid,
        command=command,
        threads=threads,
        mappings=[],
        memory=_native.MemoryCopy(0),
        root=root,
        exe=exe_path,
        exe_file=exe or f"{root}{exe_path}",
    )
    try:
        _fill(core, f, loads, files, auxv)
    except BaseException:
        core.close()
        raise
    return core


def _fill(
    core: CoreFile,
    f: BinaryIO,
    loads: list[_Load],
    files: list[tuple[int, int, int, str]],
    auxv: dict[int, int],
) -> None:
    fd = f.fileno()
    named = {(s, e): (off, name) for s, e, off, name in files}
    by_start = {load.vaddr: load for load in loads if load.memsz}
    stack_addr = auxv.get(AT_EXECFN, 0)
    mappings: list[Mapping] = []
    # (start, end, file offset, path, writable) of the parts the core lacks
    lacking: list[tuple[int, int, int, str, bool]] = []
    try:
        for load in by_start.values():
            end = load.vaddr + load.memsz
            off, name = named.get((load.vaddr, end), (0, ""))
            if not name:
                name = _special(load.vaddr, end, auxv, stack_addr)
            mappings.append(Mapping(load.vaddr, end, _perms(load.flags), off, 0, name))
            held = min(load.filesz, load.memsz) & ~(PAGE - 1)
            if held:
                core.memory.load(fd, load.offset, load.vaddr, held)
                core.held.append((load.vaddr, load.vaddr + held))
            if held < load.memsz and load.flags & PF_R:
                lacking.append((load.vaddr + held, end, off + held, name, bool(load.flags & PF_W)))
        for start, end, off, name in files:
            if start not in by_start:
                perms = _file_perms(core.file_for(name), off)
                mappings.append(Mapping(start, end, perms, off, 0, name))
                lacking.append((start, end, off, name, "w" in perms))
        first_pages = {
            m.path: by_start[m.start].offset
            for m in mappings
            if m.offset == 0
            and m.path.startswith("/")
            and m.start in by_start
            and by_start[m.start].filesz >= PAGE
        }
        # A core that holds the main stack kept the pages the process wrote
        # (the kernel's and gdb's filters put written pages of private file
        # mappings with anonymous memory): only pages never written are left
        # out, and the file holds them. Without it, a file's pages may not be
        # what the process had.
        sp = core.threads[0].sp
        written_kept = any(b <= sp < e for b, e in core.held)
        core.notes += _from_files(core, fd, lacking, first_pages, written_kept)
    except MemoryError:
        raise ScannerOutOfMemory(
            f"the memory in {core.path} does not fit in what the scanner may take (half of"
            " what is available, or of the room left in its own memory cgroup)"
        ) from None
    except OSError as e:
        raise CoreUnreadable(f"cannot read {core.path}: {e.strerror or e}") from None
    mappings.sort(key=lambda m: m.start)
    core.guards_listed = any(not load.flags & (PF_R | PF_W | PF_X) for load in loads)
    core.mappings = mappings
    core.memory.finish()


def _special(start: int, end: int, auxv: dict[int, int], stack_addr: int) -> str:
    """The names /proc/PID/maps gives mappings no file backs, where a core
    tells them: the vDSO (AT_SYSINFO_EHDR), the main stack (it holds the
    string AT_EXECFN points at), vsyscall."""
    if start == auxv.get(AT_SYSINFO_EHDR):
        return "[vdso]"
    if start <= stack_addr < end:
        return "[stack]"
    if start == VSYSCALL:
        return "[vsyscall]"
    return ""


def _same_file(fd: int, first_pages: dict[str, int], name: str, real: str) -> bool:
    """Whether the file at real is the one the process mapped as name: its
    first page equals the core's copy of that page, or, where the core holds
    none, it was last changed before the core was written."""
    try:
        with open(real, "rb") as fh:
            if name in first_pages:
                return fh.read(PAGE) == os.pread(fd, PAGE, first_pages[name])
            return os.fstat(fh.fileno()).st_mtime <= os.fstat(fd).st_mtime
    except OSError:
        return False


def _from_files(
    core: CoreFile,
    fd: int,
    lacking: list[tuple[int, int, int, str, bool]],
    first_pages: dict[str, int],
    written_kept: bool,
) -> list[str]:
    """Read the parts the core lacks from their files where those are the
    files mapped; one note on what was read so and one on what stays
    missing."""
    read, missing = 0, []
    for start, end, off, name, writable in lacking:
        # A writable mapping's pages left out may have been written.
        fillable = name.startswith("/") and written_kept and not writable
        real = core.file_for(name) if fillable else ""
        same = bool(real) and _same_file(fd, first_pages, name, real)
        if real and not same:
            core.changed.add(name)
        if same:
            try:
                with open(real, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    n = max(0, min(end - start, size - off)) & ~(PAGE - 1)
                    if n:
                        core.memory.load(fh.fileno(), off, start, n)
                        core.held.append((start, start + n))
                        read += n
                    if n == end - start:
                        continue
                    start += n
            except OSError:
                pass
        missing.append((start, end, name))
    notes = []
    if read:
        notes.append(f"{read >> 10} KiB the core left out read from the mapped files")
    if missing:
        total = sum(e - b for b, e, _ in missing)
        named = sorted({n or f"{b:#x}-{e:#x}" for b, e, n in missing})
        shown = ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
        notes.append(
            f"missing from the core and unreadable: {len(missing)} mappings,"
            f" {total >> 10} KiB ({shown})"
        )
    return notes
