"""Root pins a heap dump's files with the dump owner's rights
(symbolize/as_user.py): the user's uid, gid and groups decide, every
directory of the path included; the calling thread takes root's rights back
after each open, and the process is left as it was (ids, groups,
capabilities, dumpable)."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from unreachable.symbolize.as_user import UserPinner
from unreachable.symbolize.files import UnsafeFile

NOBODY = 65534
NOGROUP = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="takes another user's rights")


@pytest.fixture
def tree() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="ur-as-user-"))
    os.chmod(top, 0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top)


def _file(path: Path, mode: int, gid: int = 0) -> Path:
    path.write_bytes(b"\x7fELF")
    os.chown(path, 0, gid)
    os.chmod(path, mode)
    return path


def _credentials() -> dict[str, str]:
    status = Path("/proc/self/status").read_text()
    keys = ("Uid", "Gid", "Groups", "CapEff", "CapPrm")
    found = {k: re.search(rf"^{k}:\t(.*)$", status, re.M) for k in keys}
    out = {k: m.group(1) if m else "" for k, m in found.items()}
    out["dumpable"] = str(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    return out


def test_what_the_user_may_read_is_pinned(tree):
    public = _file(tree / "public", 0o644)
    fd = UserPinner(NOBODY).pin(str(public))
    try:
        assert os.fstat(fd).st_ino == public.stat().st_ino
    finally:
        os.close(fd)


def test_a_root_only_file_is_refused(tree):
    secret = _file(tree / "secret", 0o700)
    with pytest.raises(UnsafeFile, match="not readable by uid 65534"):
        UserPinner(NOBODY).pin(str(secret))


def test_a_readable_file_in_a_directory_the_user_cannot_search_is_refused(tree):
    closed = tree / "closed"
    closed.mkdir(mode=0o700)
    inside = _file(closed / "inside", 0o644)
    with pytest.raises(UnsafeFile):
        UserPinner(NOBODY).pin(str(inside))


def test_the_users_groups_count(tree):
    shared = _file(tree / "shared", 0o640, NOGROUP)
    os.close(UserPinner(NOBODY).pin(str(shared)))
    other = _file(tree / "other", 0o640, 0)
    with pytest.raises(UnsafeFile):
        UserPinner(NOBODY).pin(str(other))


def test_root_is_itself_again_after_each_pin(tree):
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as a process starts
    before = _credentials()
    assert before["dumpable"] == "1"
    pinner = UserPinner(NOBODY)
    for path in (tree / "missing", _file(tree / "secret", 0o700), _file(tree / "pub", 0o644)):
        try:
            os.close(pinner.pin(str(path)))
        except OSError:
            pass
        assert _credentials() == before
    assert os.access("/proc/self/mem", os.R_OK)
