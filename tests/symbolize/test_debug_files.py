"""Separate debug files: found by build-id and by .gnu_debuglink (with its CRC checked)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.symbolize import program
from unreachable.process.maps import parse_maps
from unreachable.symbolize.debuginfo import (
    build_id_candidates,
    debuglink_candidates,
    find_debug_file,
)
from unreachable.symbolize.elf_file import read_elf
from unreachable.symbolize.frames import Symbolizer

SRC = os.path.basename(program.SOURCE)


def _objcopy(*args: str) -> None:
    subprocess.run(["objcopy", *args], check=True, capture_output=True)


def _stripped(tmp_path: Path, debuglink: bool) -> tuple[Path, Path]:
    """(stripped binary, its debug file) in tmp_path/bin/."""
    exe = program.copy_program(tmp_path / "bin" / "prog")
    debug = tmp_path / "bin" / "prog.debug"
    _objcopy("--only-keep-debug", str(exe), str(debug))
    _objcopy("--strip-all", str(exe))
    if debuglink:
        _objcopy(f"--add-gnu-debuglink={debug}", str(exe))
    return exe, debug


def _first_stack(exe: Path, **kwargs):
    run = program.run(exe)
    size, pcs = next(r for r in run.all if r[0] == 24)
    return Symbolizer(None, parse_maps(run.maps_text), cache_dir=False, **kwargs).symbolize_pcs(pcs)


def _expect_full(stack):
    L = program.lines()
    got = [(f.function, os.path.basename(f.file), f.line) for f in stack[:3]]
    assert got == [
        ("tracked_alloc", SRC, L["tracked_alloc"]),
        ("demo::Box<int>::operator+(demo::Box<int> const&) const", SRC, L["operator_plus"]),
        ("int demo::twice<int>(int)", SRC, L["twice"]),
    ]


def test_stripped_binary_has_nothing_without_debug_file(tmp_path):
    exe, debug = _stripped(tmp_path, debuglink=False)
    debug.unlink()
    image = read_elf(str(exe))
    assert image.build_id and not image.has_symtab and not image.has_dwarf_lines
    stack = _first_stack(exe, debug_dirs=[str(tmp_path / "nodebug")])
    assert stack[1].function == "" and stack[1].file == ""


def test_found_by_build_id(tmp_path):
    exe, debug = _stripped(tmp_path, debuglink=False)
    bid = read_elf(str(exe)).build_id
    root = tmp_path / "debugroot"
    dest = root / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    dest.parent.mkdir(parents=True)
    debug.rename(dest)
    found = find_debug_file(read_elf(str(exe)), str(exe), [str(root)])
    assert found is not None and found.how == "build-id" and found.path == str(dest)
    # Names come from the debug file's .symtab, lines from its DWARF.
    _expect_full(_first_stack(exe, debug_dirs=[str(tmp_path / "other"), str(root)]))


def test_build_id_mismatch_rejected(tmp_path):
    exe, _ = _stripped(tmp_path, debuglink=False)
    bid = read_elf(str(exe)).build_id
    root = tmp_path / "debugroot"
    dest = root / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    dest.parent.mkdir(parents=True)
    # Another program's debug file at this build-id's path.
    other = program.copy_program(tmp_path / "other")
    _objcopy("--remove-section=.note.gnu.build-id", str(other))
    _objcopy("--only-keep-debug", str(other), str(dest))
    assert find_debug_file(read_elf(str(exe)), str(exe), [str(root)]) is None


@pytest.mark.parametrize("where", ["objdir", "dotdebug", "global"])
def test_found_by_debuglink(tmp_path, where):
    exe, debug = _stripped(tmp_path, debuglink=True)
    empty = tmp_path / "globaldebug"
    if where == "dotdebug":
        (exe.parent / ".debug").mkdir()
        debug = debug.rename(exe.parent / ".debug" / debug.name)
    elif where == "global":
        dest = empty / str(exe.parent).lstrip("/") / debug.name
        dest.parent.mkdir(parents=True)
        debug = debug.rename(dest)
    found = find_debug_file(read_elf(str(exe)), str(exe), [str(empty)])
    assert found is not None and found.how == "debuglink" and found.path == str(debug)
    _expect_full(_first_stack(exe, debug_dirs=[str(empty)]))


def test_debuglink_crc_mismatch_rejected(tmp_path):
    exe, debug = _stripped(tmp_path, debuglink=True)
    with open(debug, "ab") as f:
        f.write(b"\0")  # still a valid ELF file, but not the one the link names
    assert find_debug_file(read_elf(str(exe)), str(exe), [str(tmp_path / "none")]) is None
    stack = _first_stack(exe, debug_dirs=[str(tmp_path / "none")])
    assert stack[1].file == "" and stack[1].function == ""


def test_search_order_is_gdbs():
    assert build_id_candidates("abcdef", ["/usr/lib/debug", "/d2"], "") == [
        "/usr/lib/debug/.build-id/ab/cdef.debug",
        "/d2/.build-id/ab/cdef.debug",
    ]
    assert debuglink_candidates("/usr/lib/libx.so.1", "libx.debug", ["/usr/lib/debug"], "") == [
        "/usr/lib/libx.debug",
        "/usr/lib/.debug/libx.debug",
        "/usr/lib/debug/usr/lib/libx.debug",
    ]
    # In a container: its own files first, then the host's global directories.
    assert build_id_candidates("abcdef", ["/usr/lib/debug"], "/proc/7/root") == [
        "/proc/7/root/usr/lib/debug/.build-id/ab/cdef.debug",
        "/usr/lib/debug/.build-id/ab/cdef.debug",
    ]
    assert debuglink_candidates("/lib/x.so", "../evil", ["/d"], "") == []


def test_system_libc_debug_by_build_id():
    """Debian's libc6-dbg installs /usr/lib/debug/.build-id files (when installed)."""
    candidates = ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6")
    libc = next((p for p in candidates if os.path.exists(p)), None)
    if libc is None:
        pytest.skip("no libc.so.6")
    image = read_elf(libc)
    found = find_debug_file(image, libc, ["/usr/lib/debug"])
    if found is None:
        pytest.skip("libc debug file not installed")
    assert found.how == "build-id" and found.image.has_dwarf_lines
