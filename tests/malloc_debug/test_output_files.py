"""The dump files in a shared directory such as /tmp: another user's file,
FIFO or link is never written into; new files are the process's alone (0600);
the process's own file is rewritten, as bionic rewrites the record file."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.malloc_debug.support import wait_file
from tests.support.users import User, temp_user

DUMP = signal.SIGRTMAX - 17
RECORD = signal.SIGRTMAX - 18
BAIT = "planted by another user\n"


@pytest.fixture
def attacker() -> Iterator[User]:
    with temp_user("urmd") as user:
        yield user


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A world-writable sticky directory, as /tmp is (tmp_path's parents are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="ur-shared-", dir="/tmp"))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def plant(user: User, path: Path, kind: str = "file") -> None:
    """`user` creates `path` (a 0666 file holding BAIT, or a FIFO) as that user."""
    script = (
        f'umask 0; printf "%s\\n" "{BAIT.strip()}" > "{path}"; chmod 666 "{path}"'
        if kind == "file"
        else f'umask 0; mkfifo -m 666 "{path}"'
    )
    subprocess.run(["sh", "-c", script], preexec_fn=user.demote(), check=True)
    assert path.lstat().st_uid == user.uid


def until_ready(p) -> None:
    while not p.read_line().startswith("READY"):
        pass


def test_record_file_of_another_user_is_not_written(procs, attacker, shared_dir):
    out = shared_dir / "record_allocs.txt"
    plant(attacker, out)
    p = procs.start("record_allocs.c", options=f"record_allocs record_allocs_file={out}")
    until_ready(p)
    os.kill(p.pid, RECORD)
    p.wait_stderr(
        rf"^malloc_debug: Cannot create record alloc file {out}: "
        "it exists and belongs to another user$"
    )
    assert out.read_text() == BAIT
    assert stat.S_IMODE(out.stat().st_mode) == 0o666


def test_heap_dump_file_of_another_user_is_not_written(procs, attacker, shared_dir):
    prefix = shared_dir / "backtrace_heap"
    p = procs.start("idle.c", "idle", options=f"backtrace backtrace_dump_prefix={prefix}")
    assert p.read_line().startswith("READY")
    path = shared_dir / f"backtrace_heap.{p.pid}.txt"
    plant(attacker, path)
    os.kill(p.pid, DUMP)
    p.wait_stderr(
        rf"^malloc_debug: Unable to create file: {path}: it exists and belongs to another user$"
    )
    assert path.read_text() == BAIT


def test_fifo_neither_blocks_nor_is_written(procs, attacker, shared_dir):
    """A FIFO with no reader would block a plain open for writing forever:
    the helper thread would never dump again."""
    prefix = shared_dir / "backtrace_heap"
    p = procs.start("idle.c", "idle", options=f"backtrace backtrace_dump_prefix={prefix}")
    assert p.read_line().startswith("READY")
    path = shared_dir / f"backtrace_heap.{p.pid}.txt"
    plant(attacker, path, "fifo")
    os.kill(p.pid, DUMP)
    p.wait_stderr(rf"^malloc_debug: Unable to create file: {path}: ")
    path.unlink()
    os.kill(p.pid, DUMP)  # the helper is free: the next request is served
    assert wait_file(path, lambda t: t.endswith("END\n"))
    assert p.alive()


def test_new_files_are_private(procs, tmp_path):
    rec = tmp_path / "rec.txt"
    prefix = tmp_path / "heap"
    p = procs.start(
        "record_allocs.c",
        options=f"record_allocs record_allocs_file={rec} backtrace backtrace_dump_prefix={prefix}",
    )
    until_ready(p)
    os.kill(p.pid, RECORD)
    wait_file(rec, lambda t: "thread_done" in t)
    os.kill(p.pid, DUMP)
    heap = tmp_path / f"heap.{p.pid}.txt"
    wait_file(heap, lambda t: t.endswith("END\n"))
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    assert stat.S_IMODE(heap.stat().st_mode) == 0o600


def test_own_file_is_rewritten(procs, tmp_path):
    rec = tmp_path / "rec.txt"
    rec.write_text("old contents that are longer than nothing\n" * 1000)
    p = procs.start("record_allocs.c", options=f"record_allocs record_allocs_file={rec}")
    until_ready(p)
    os.kill(p.pid, RECORD)
    text = wait_file(rec, lambda t: "thread_done" in t and "old contents" not in t)
    assert text.endswith("thread_done 0x0\n")


def test_link_to_a_file_is_refused(procs, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    rec = tmp_path / "rec.txt"
    rec.symlink_to(victim)
    p = procs.start("record_allocs.c", options=f"record_allocs record_allocs_file={rec}")
    until_ready(p)
    os.kill(p.pid, RECORD)
    p.wait_stderr(rf"^malloc_debug: Cannot create record alloc file {rec}: ")
    assert victim.read_text() == "precious\n"
