"""A heap dump names its files in its MAPS section, and whoever wrote the
dump chose those names: no process maps them now, so nothing (no device and
inode of a live mapping) says its writer could ever read them. Root running
`unreachable-cli heapdump --file` or `diff` on a user's dump reads each file
with the rights of the dump's owner: a root-only (0700) ELF named in a
forged dump had its function names printed; a file that user can read is
symbolized as before, and root's own dump names anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cbuild import build
from unreachable.heapdump.dump_format import write_dump
from unreachable.process.maps import read_maps

WAITER = Path(__file__).resolve().parent.parent / "symbolize" / "programs" / "waiter.c"
FUNCTION = "waiter_marker_function"
SECRET = "root_only_secret_function"
NOBODY = 65534
CLI = [sys.executable, "-m", "unreachable.cli.main"]


class Files:
    """In a directory anyone may search: the waiter (0755) and its root-only
    twin (0700), whose function at the same address has another name; the
    waiter's MAPS lines and a pc in that function, read from it running."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.public = directory / "waiter"
        shutil.copy(build(WAITER), self.public)
        os.chmod(self.public, 0o755)
        self.secret = directory / "secret"
        rename = f"--redefine-sym={FUNCTION}={SECRET}"
        subprocess.run(["objcopy", rename, str(self.public), str(self.secret)], check=True)
        os.chmod(self.secret, 0o700)
        proc = subprocess.Popen([str(self.public)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdin is not None
        self.pc = int(proc.stdout.readline().split()[1], 16) + 1
        mine = [m for m in read_maps(proc.pid) if m.path == str(self.public)]
        with open(f"/proc/{proc.pid}/maps") as f:
            self.maps = [line for line in f if line.rstrip("\n").endswith(str(self.public))]
        proc.stdin.close()
        proc.wait(timeout=30)
        assert mine and self.maps

    def dump(self, name: str, names: Path, owner: int) -> Path:
        """A dump of one record allocated from the function, its MAPS naming
        `names`, the file owned by `owner`."""
        path = self.dir / name
        maps = "".join(line.replace(str(self.public), str(names)) for line in self.maps)
        with open(path, "w") as f:
            write_dump([(64, 1, (self.pc,))], maps, 4, "test", f)
        os.chown(path, owner, owner)
        return path


@pytest.fixture
def files() -> Iterator[Files]:
    directory = Path(tempfile.mkdtemp(prefix="ur-dump-files-"))
    os.chmod(directory, 0o755)
    try:
        yield Files(directory)
    finally:
        shutil.rmtree(directory)


def cli(files: Files, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UNREACHABLE_CACHE_DIR": str(files.dir / "cache")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="reads a dump as root")


@needs_root
def test_a_users_dump_naming_a_root_only_file_gets_none_of_its_names(files):
    dump = files.dump("forged.txt", files.secret, NOBODY)
    res = cli(files, "heapdump", "--file", str(dump))
    assert res.returncode == 0, res.stderr
    assert SECRET not in res.stdout + res.stderr
    assert f"{files.secret}: " in res.stdout  # the Note: names the file refused
    assert "Traceback" not in res.stderr


@needs_root
def test_a_users_dumps_diffed_get_none_of_a_root_only_files_names(files):
    old = files.dump("old.txt", files.secret, NOBODY)
    new = files.dump("new.txt", files.secret, NOBODY)
    res = cli(files, "diff", str(old), str(new), "--all")
    assert res.returncode in (0, 1), res.stderr
    assert SECRET not in res.stdout + res.stderr


@needs_root
def test_a_users_dump_naming_a_file_it_can_read_is_symbolized(files):
    dump = files.dump("public.txt", files.public, NOBODY)
    res = cli(files, "heapdump", "--file", str(dump))
    assert res.returncode == 0, res.stderr
    assert FUNCTION in res.stdout


@needs_root
def test_roots_own_dump_names_a_root_only_file(files):
    dump = files.dump("root.txt", files.secret, 0)
    res = cli(files, "heapdump", "--file", str(dump))
    assert res.returncode == 0, res.stderr
    assert SECRET in res.stdout
