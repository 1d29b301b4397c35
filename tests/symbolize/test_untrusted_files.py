"""A target's user cannot stall or steer root's symbolization with its files:
huge sparse debug files, FIFOs, devices and a third user's files are not
read, and one symbolization stops at its time budget."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.users import User, temp_user
from unreachable.process.maps import Mapping, read_maps
from unreachable.symbolize import objects
from unreachable.symbolize.frames import Frame, Symbolizer

WAITER = Path(__file__).resolve().parent / "programs" / "waiter.c"
LEAKER = Path(__file__).resolve().parent / "programs" / "leaker.c"
FUNCTION = "waiter_marker_function"


@pytest.fixture
def target_user() -> Iterator[User]:
    with temp_user("urtg") as user:
        yield user


@pytest.fixture
def other_user() -> Iterator[User]:
    with temp_user("urot") as user:
        yield user


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A directory every user can reach (tmp_path's parents are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="ur-sym-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _objcopy(*args: str) -> None:
    subprocess.run(["objcopy", *args], check=True, capture_output=True)


def linked_program(directory: Path, source: Path = WAITER) -> tuple[Path, Path]:
    """(program, debug file): the program keeps its .symtab, loses its DWARF
    to the debug file and names it in .gnu_debuglink."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / source.stem
    shutil.copy(build(source), exe)
    debug = directory / f"{source.stem}.debug"
    _objcopy("--only-keep-debug", str(exe), str(debug))
    _objcopy("--strip-debug", str(exe))
    _objcopy(f"--add-gnu-debuglink={debug}", str(exe))
    return exe, debug


def as_user(user: User, script: str) -> None:
    subprocess.run(["sh", "-c", script], preexec_fn=user.demote(), check=True)


class Waiter:
    def __init__(self, exe: Path, user: User | None = None) -> None:
        self.proc = subprocess.Popen(
            [str(exe)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=user.demote() if user else None,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("fn "), line
        self.pc = int(line.split()[1], 16) + 1  # a return address just inside the function

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def waiters() -> Iterator[list[Waiter]]:
    started: list[Waiter] = []
    yield started
    for w in started:
        w.stop()


def bytes_read() -> int:
    """This process's bytes read by read(2) and the like, page cache included."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def symbolize(pid: int | None, maps: list[Mapping], pc: int, **kwargs) -> tuple[Frame, str]:
    sym = Symbolizer(pid, maps, cache_dir=False, debug_dirs=[], **kwargs)
    frame = sym.symbolize_pcs([pc])[0]
    return frame, sym.note


def in_thread(fn, timeout: float = 60.0):
    """fn() in a thread: a call that blocks for good fails the test instead of hanging it."""
    result: list = []
    t = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "symbolization blocked"
    return result[0]


def test_huge_sparse_debug_file_of_the_targets_user_is_not_read(target_user, work_dir, waiters):
    """The user's program names a debug file the user made 16 GiB (sparse):
    root's symbolization neither reads it for the CRC nor stalls, and the
    frame comes from the program's own symbols."""
    exe, debug = linked_program(work_dir / "app")
    os.chown(work_dir / "app", target_user.uid, target_user.gid)
    os.chown(exe, target_user.uid, target_user.gid)
    as_user(target_user, f'rm -f "{debug}" && truncate -s 16G "{debug}"')
    w = Waiter(exe, target_user)
    waiters.append(w)
    before = bytes_read()
    frame, note = symbolize(w.proc.pid, read_maps(w.proc.pid), w.pc)
    assert bytes_read() - before < 1 << 30
    assert frame.function == FUNCTION and frame.offset == 1 and frame.file == ""
    assert f"{debug}: 17179869184 bytes, over the" in note


def test_debug_file_of_a_third_user_is_not_read(target_user, other_user, work_dir, waiters):
    """A debug file that matches, but belongs to neither root nor the target's
    user, is not used; the same file of the target's user is."""
    exe, debug = linked_program(work_dir / "app")
    os.chown(exe, target_user.uid, target_user.gid)
    os.chown(debug, other_user.uid, other_user.gid)
    w = Waiter(exe, target_user)
    waiters.append(w)
    maps = read_maps(w.proc.pid)
    frame, note = symbolize(w.proc.pid, maps, w.pc)
    assert frame.function == FUNCTION and frame.file == ""
    assert f"{debug}: owned by uid {other_user.uid}" in note

    os.chown(debug, target_user.uid, target_user.gid)
    objects.clear_memory_cache()  # objects are remembered by their own file's identity
    frame, note = symbolize(w.proc.pid, maps, w.pc)
    assert frame.function == FUNCTION and frame.file.endswith("waiter.c") and frame.line
    assert note == ""


def test_build_id_debug_file_of_a_third_user_is_not_read(
    target_user, other_user, work_dir, waiters
):
    exe, debug = linked_program(work_dir / "app")
    _objcopy("--remove-section=.gnu_debuglink", str(exe))
    bid = (
        subprocess.run(["readelf", "-n", str(exe)], capture_output=True, text=True, check=True)
        .stdout.split("Build ID:")[1]
        .split()[0]
    )
    dest = work_dir / "debug" / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    dest.parent.mkdir(parents=True)
    debug.rename(dest)
    os.chown(dest, other_user.uid, other_user.gid)
    os.chown(exe, target_user.uid, target_user.gid)
    w = Waiter(exe, target_user)
    waiters.append(w)
    sym = Symbolizer(
        w.proc.pid, read_maps(w.proc.pid), cache_dir=False, debug_dirs=[str(work_dir / "debug")]
    )
    frame = sym.symbolize_pcs([w.pc])[0]
    assert frame.function == FUNCTION and frame.file == ""
    assert f"{dest}: owned by uid {other_user.uid}" in sym.note


@pytest.mark.parametrize("kind", ["fifo", "fifo-link", "device-link"])
def test_fifo_or_device_as_debug_file(work_dir, waiters, kind):
    """Named as the debug file (directly or through a link): skipped, never opened."""
    exe, debug = linked_program(work_dir / "app")
    debug.unlink()
    if kind == "fifo":
        os.mkfifo(debug)
    elif kind == "fifo-link":
        os.mkfifo(work_dir / "fifo")
        debug.symlink_to(work_dir / "fifo")
    else:
        debug.symlink_to("/dev/zero")
    w = Waiter(exe)
    waiters.append(w)
    maps = read_maps(w.proc.pid)
    frame, note = in_thread(lambda: symbolize(w.proc.pid, maps, w.pc))
    assert frame.function == FUNCTION
    assert f"{debug}: not a regular file" in note


def test_fifo_as_mapped_file_does_not_block(work_dir):
    """A heap dump's MAPS may name any path, a FIFO included."""
    fifo = work_dir / "libfifo.so"
    os.mkfifo(fifo)
    maps = [Mapping(0x10000, 0x20000, "r-xp", 0, 0, str(fifo))]
    frame, note = in_thread(lambda: symbolize(None, maps, 0x10010))
    assert frame.map == str(fifo) and frame.function == ""
    assert f"{fifo}: not a regular file" in note


def test_budget_leaves_frames_raw_with_a_note(work_dir, waiters):
    """A big debug file within the size limit: its CRC stops at the budget."""
    exe, debug = linked_program(work_dir / "app")
    debug.unlink()
    with open(debug, "wb") as f:
        f.truncate(3 << 30)
    w = Waiter(exe)
    waiters.append(w)
    maps = read_maps(w.proc.pid)
    before = bytes_read()
    frame, note = symbolize(w.proc.pid, maps, w.pc, budget=0.2)
    assert bytes_read() - before < 3 << 30
    assert frame.function == "" and frame.map == str(exe)
    assert "1 of 1 frames left unsymbolized" in note and "budget (0.2 s" in note


def test_scan_finishes_with_a_huge_debug_file(shim, work_dir):
    """A whole scan of a program whose debuglink names a 16 GiB sparse file:
    it finishes, its frames named from the program's own symbols, and says
    which file it did not read."""
    exe, debug = linked_program(work_dir / "app", LEAKER)
    debug.unlink()
    with open(debug, "wb") as f:
        f.truncate(16 << 30)
    env = os.environ | {"LD_PRELOAD": str(shim), "UNREACHABLE_MALLOC_OPTIONS": "backtrace"}
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"READY")
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(proc.pid), "--json"],
            capture_output=True,
            text=True,
            timeout=600,
            env=os.environ | {"UNREACHABLE_CACHE_DIR": "off"},
        )
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    functions = [f["function"] for leak in report["leaks"] for f in leak["backtrace"]]
    assert "leaker_lost_block" in functions
    assert f"{debug}: 17179869184 bytes, over the" in report["symbol_note"]
    assert f"note: files not read: {debug}" in res.stderr


def test_link_inside_a_root_that_escapes_to_a_device(work_dir, waiters):
    """Files looked up under a root prefix (/proc/PID/root for a container, or
    a sysroot) may be absolute links, which resolve on the host: a link to a
    device is refused like the device."""
    exe, debug = linked_program(work_dir / "root" / "app")
    debug.unlink()
    debug.symlink_to("/dev/zero")
    w = Waiter(exe)
    waiters.append(w)
    inside = [
        Mapping(m.start, m.end, m.perms, m.offset, 0, m.path.removeprefix(str(work_dir / "root")))
        for m in read_maps(w.proc.pid)
    ]
    sym = Symbolizer(None, inside, root=str(work_dir / "root"), cache_dir=False, debug_dirs=[])
    frame = in_thread(lambda: sym.symbolize_pcs([w.pc])[0])
    assert frame.function == FUNCTION
    assert f"{debug}: not a regular file" in sym.note


def test_a_file_swapped_after_its_headers_were_read_gives_no_sections(work_dir):
    """The sections are read by path after the headers: a target's user
    who puts another file there meanwhile (a rename over it) must not have
    that file's symbols read as this one's."""
    from unreachable.symbolize.elf_file import read_elf
    from unreachable.symbolize.files import UnsafeFile

    path = work_dir / "libswapped.so"
    shutil.copy(build(WAITER), path)
    image = read_elf(str(path))
    names = [name for *_, name in image.function_symbols(".symtab")]
    assert FUNCTION in names
    other = work_dir / "other"
    shutil.copy(build(LEAKER), other)
    os.rename(other, path)
    with pytest.raises(UnsafeFile, match="replaced or changed"):
        image.function_symbols(".symtab")
