"""Frames of a C++ program compiled with -g: function, offset, file and line, frame by frame."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.symbolize import program
from unreachable.process.maps import parse_maps
from unreachable.symbolize import demangle, dwarf_lines, objects
from unreachable.symbolize.frames import Frame, Symbolizer

SRC = os.path.basename(program.SOURCE)


def _symbolize(run: program.Run, **kwargs) -> list[list[Frame]]:
    stacks = {i: pcs for i, (_, pcs) in enumerate(run.all)}
    out = Symbolizer(None, parse_maps(run.maps_text), **kwargs).symbolize(stacks)
    return [out[i] for i in range(len(stacks))]


@pytest.fixture(scope="module")
def run() -> program.Run:
    return program.run()


def _where(f: Frame) -> tuple[str, str, int]:
    return f.function, os.path.basename(f.file), f.line


def test_template_and_operator_frames(run):
    (stack,) = [s for s, (size, _) in zip(_symbolize(run), run.all, strict=True) if size == 24]
    L = program.lines()
    assert [_where(f) for f in stack[:5]] == [
        ("tracked_alloc", SRC, L["tracked_alloc"]),
        ("demo::Box<int>::operator+(demo::Box<int> const&) const", SRC, L["operator_plus"]),
        ("int demo::twice<int>(int)", SRC, L["twice"]),
        ("demo::Widget::Bar(int)", SRC, L["widget_bar"]),
        ("main", SRC, L["main_bar"]),
    ]
    exe = str(program.program())
    assert all(f.map == exe for f in stack[:5])
    # Then glibc's start code, and _start in the program.
    assert os.path.basename(stack[5].map).startswith("libc.so")
    assert stack[5].function.startswith("__libc_start")
    assert stack[-1].map == exe and stack[-1].function == "_start"


def test_frames_through_libc_and_libstdcxx(run):
    stacks = dict(zip([size for size, _ in run.all], _symbolize(run), strict=False))
    L = program.lines()
    qsort = stacks[40]
    assert _where(qsort[1]) == ("compare_ints", SRC, L["compare_ints"])
    libc = [f for f in qsort if os.path.basename(f.map).startswith("libc.so")]
    assert libc and all(f.function for f in libc)  # msort_with_tmp, qsort_r, ...
    assert any(_where(f) == ("main", SRC, L["main_qsort"]) for f in qsort)

    thread = stacks[8]
    assert _where(thread[1]) == ("main::{lambda()#1}::operator()() const", SRC, L["lambda"])
    assert any("libstdc++" in f.map for f in thread)
    assert any(f.function == "start_thread" for f in thread)


def test_rel_pc_and_offset_agree_with_binutils(run):
    exe = str(program.program())
    nm = subprocess.run(["nm", "--defined-only", exe], capture_output=True, text=True, check=True)
    starts = {}
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            starts.setdefault(parts[2], int(parts[0], 16))
    mine = [f for stack in _symbolize(run) for f in stack if f.map == exe and f.line]
    assert len(mine) > 10
    demangled = dict(
        zip(
            starts,
            subprocess.run(
                ["c++filt"], input="\n".join(starts) + "\n", capture_output=True, text=True
            ).stdout.splitlines(),
            strict=True,
        )
    )
    by_name = {demangled[n]: a for n, a in starts.items()}
    a2l = subprocess.run(
        ["addr2line", "-e", exe, *[f"{f.rel_pc - 1:x}" for f in mine]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for f, where in zip(mine, a2l, strict=True):
        assert by_name[f.function] + f.offset == f.rel_pc, f
        file, _, line = where.rpartition(":")
        assert (file, int(line.split()[0])) == (f.file, f.line), f


def test_second_run_pays_nothing(run, tmp_path, monkeypatch):
    first = _symbolize(run, cache_dir=str(tmp_path))
    objects.clear_memory_cache()

    def boom(*args, **kwargs):
        raise AssertionError("a warm run must not parse symbols, DWARF or demangle")

    monkeypatch.setattr(objects, "symbols_from_images", boom)
    monkeypatch.setattr(dwarf_lines.LineTable, "_decode_unit", boom)
    monkeypatch.setattr(dwarf_lines.LineTable, "_build_index", boom)
    monkeypatch.setattr(demangle, "demangle_all", boom)
    assert _symbolize(run, cache_dir=str(tmp_path)) == first
    assert list((tmp_path / "symbols" / "v2").glob("*/*/resolved.json"))


def test_new_addresses_use_cached_units(run, tmp_path, monkeypatch):
    """A warm cache without the exact pcs still skips symbol and aranges parsing."""
    _symbolize(run, cache_dir=str(tmp_path))
    objects.clear_memory_cache()
    for path in (tmp_path / "symbols" / "v2").glob("*/*/resolved.json"):
        path.unlink()

    def boom(*args, **kwargs):
        raise AssertionError("cached")

    monkeypatch.setattr(objects, "symbols_from_images", boom)
    monkeypatch.setattr(dwarf_lines.LineTable, "_decode_unit", boom)
    monkeypatch.setattr(dwarf_lines.LineTable, "_build_index", boom)
    again = _symbolize(run, cache_dir=str(tmp_path))
    assert again[0][0].function == "tracked_alloc" and again[0][0].line


def test_without_cache_dir(run, tmp_path, monkeypatch):
    monkeypatch.setenv("UNREACHABLE_CACHE_DIR", "off")
    stacks = _symbolize(run)
    assert stacks[0][0].function == "tracked_alloc"
    assert _symbolize(run, cache_dir=False)[0] == stacks[0]


def test_units_without_aranges(run, tmp_path):
    """Clang omits .debug_aranges: units are then found by their DIE address ranges."""
    exe = tmp_path / "noaranges"
    subprocess.run(
        ["objcopy", "--remove-section=.debug_aranges", str(program.program()), str(exe)],
        check=True,
    )
    maps = run.maps_text.replace(str(program.program()), str(exe))
    stacks = _symbolize(program.Run(run.before, run.after, maps), cache_dir=False)
    L = program.lines()
    assert _where(stacks[0][2]) == ("int demo::twice<int>(int)", SRC, L["twice"])


def test_files_opened_under_a_root(run, tmp_path):
    """Mapped paths are resolved inside the target's root (/proc/PID/root for containers)."""
    inside = tmp_path / "ctr"
    exe = str(program.program())
    program.copy_program(inside / exe.lstrip("/"))
    # A root holding the binary resolves; an empty one cannot.
    good = _symbolize(run, root=str(inside), cache_dir=False)[0]
    objects.clear_memory_cache()
    bad = _symbolize(run, root=str(tmp_path / "empty"), cache_dir=False)[0]
    assert good[0].function == "tracked_alloc" and good[0].map == exe
    assert bad[0].function == "" and bad[0].map == exe


def test_live_pid_uses_proc_root():
    s = Symbolizer(os.getpid(), [])
    assert s._root == ""  # same root as ours: plain paths
    s = Symbolizer(2**22 + 12345, [])  # no such process
    assert s._pid is None and s._root == ""


def test_unmapped_and_anonymous_pcs():
    maps = parse_maps(
        "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 \n"
        "7f0000002000-7f0000003000 r-xp 00000000 00:00 0 [vdso]\n"
        "7f0000004000-7f0000005000 r-xp 00001000 08:01 99 /nonexistent/libgone.so\n"
    )
    out = Symbolizer(None, maps, cache_dir=False).symbolize_pcs(
        [0x1234, 0x7F0000000010, 0x7F0000002010, 0x7F0000004010]
    )
    assert out[0] == Frame(0x1234, "", 0x1234, "", 0)
    assert out[1].map == "" and out[1].rel_pc == 0x10
    assert out[2].map == "[vdso]" and out[2].rel_pc == 0x10
    assert out[3].map == "/nonexistent/libgone.so" and out[3].rel_pc == 0x1010


def test_deleted_file_is_read_through_map_files(tmp_path):
    """A mapped file deleted since (an upgrade) is still read from /proc/PID/map_files."""
    exe = program.copy_program(tmp_path / "victim")
    proc = subprocess.Popen(
        [str(exe), "1", "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        text = ""
        while not text.endswith("END\n"):
            line = proc.stdout.readline()
            assert line, "program ended early"
            text += line
        if not os.access(f"/proc/{proc.pid}/map_files", os.R_OK):
            pytest.skip("no access to /proc/PID/map_files")
        os.unlink(exe)
        run = program.Run([], [], text.partition("MAPS\n")[2].split("END\n")[0])
        for line in text.splitlines():
            if line.startswith("rec 24 "):
                run.before.append((24, tuple(int(x, 16) for x in line.split()[2:])))
        stack = Symbolizer(proc.pid, parse_maps(run.maps_text), cache_dir=False).symbolize(
            {1: run.before[0][1]}
        )[1]
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert stack[0].map == str(exe) and stack[0].line
    assert stack[1].function == "demo::Box<int>::operator+(demo::Box<int> const&) const"
