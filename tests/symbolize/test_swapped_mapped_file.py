"""A mapped file's path is the target's: its user can rename another file
over it after the scanner checked the path's inode and before it opens it
(a real race, made certain here by renaming right after file_for returns).
A root scan must then read nothing of the file put there, which may be one
only root can read: every reader opens the inode only if it is the
(device, inode) /proc/PID/maps gives."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cbuild import build
from unreachable.allocations.glibc_libc import libc_facts
from unreachable.process import mapped_file
from unreachable.process.mapped_file import MappedFile
from unreachable.process.maps import Mapping, find_mapping, read_maps
from unreachable.retention.loads import object_loads
from unreachable.retention.unwind import _load_cfi
from unreachable.symbolize import frames
from unreachable.symbolize.data_symbols import load_data_symbols
from unreachable.symbolize.elf_file import read_elf
from unreachable.symbolize.files import UnsafeFile, stat_checked
from unreachable.symbolize.frames import Symbolizer

WAITER = Path(__file__).resolve().parent / "programs" / "waiter.c"
FUNCTION = "waiter_marker_function"
SECRET = "root_only_secret_function"


class Target:
    """The waiter run from a copy in `directory`, and beside it a root-only
    (mode 0700) twin whose function at the same address has another name."""

    def __init__(self, directory: Path) -> None:
        self.exe = directory / "waiter"
        shutil.copy(build(WAITER), self.exe)
        self.secret = directory / "secret"
        subprocess.run(
            ["objcopy", f"--redefine-sym={FUNCTION}={SECRET}", str(self.exe), str(self.secret)],
            check=True,
        )
        os.chmod(self.secret, 0o700)
        self.proc = subprocess.Popen([str(self.exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        self.pc = int(line.split()[1], 16) + 1
        self.maps = read_maps(self.proc.pid)

    def swap(self) -> None:
        """What the target's user does: the root-only file takes the path."""
        os.rename(self.secret, self.exe)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    t = Target(tmp_path)
    yield t
    t.stop()


def swapping_after(target: Target) -> Callable[[int | None, Mapping, str], MappedFile]:
    """file_for, then the swap, once: the race lost by the scanner."""
    real = mapped_file.file_for

    def file_for(pid: int | None, m: Mapping, root: str) -> MappedFile:
        found = real(pid, m, root)
        if target.secret.exists():
            target.swap()
        return found

    return file_for


def test_the_symbolizer_names_nothing_from_a_file_swapped_in(target, monkeypatch):
    monkeypatch.setattr(frames, "file_for", swapping_after(target))
    sym = Symbolizer(target.proc.pid, target.maps, cache_dir=False, debug_dirs=[])
    frame = sym.symbolize_pcs([target.pc])[0]
    assert frame.function != SECRET
    assert frame.function == "" and frame.map == str(target.exe)
    assert f"{target.exe}: not the file the process maps" in sym.note


def test_unswapped_the_same_stages_name_the_function(target):
    sym = Symbolizer(target.proc.pid, target.maps, cache_dir=False, debug_dirs=[])
    assert sym.symbolize_pcs([target.pc])[0].function == FUNCTION


def _mapped(target: Target) -> MappedFile:
    m = find_mapping(target.maps, target.pc)
    assert m is not None
    return mapped_file.file_for(target.proc.pid, m, "")


READERS: dict[str, Callable[[MappedFile], object]] = {
    "elf headers": lambda f: read_elf(f.path, mapped=f.mapped),
    "data symbols": lambda f: load_data_symbols(f.path, f.mapped),
    "glibc facts": lambda f: libc_facts(f.path, "", f.mapped),
    # keyed by the (device, inode) the walk stat'ed and checked
    "unwind tables": lambda f: _load_cfi(f.path, *(f.mapped or (0, 0)), 0),
    "stat for the unwinder": lambda f: stat_checked(f.path, mapped=f.mapped),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_each_reader_refuses_a_file_swapped_in(target, reader):
    found = _mapped(target)
    assert found.exact and found.mapped is not None
    target.swap()
    try:
        result = READERS[reader](found)
    except UnsafeFile as e:
        assert "not the file the process maps" in str(e)
    else:
        assert result is None, result


def test_the_loads_of_globals_read_nothing_swapped_in(target, monkeypatch):
    assert str(target.exe) in object_loads(target.maps, target.proc.pid, "")
    monkeypatch.setattr("unreachable.retention.loads.file_for", swapping_after(target))
    assert str(target.exe) not in object_loads(target.maps, target.proc.pid, "")
