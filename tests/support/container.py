"""A target started as a container starts it: in mount and pid namespaces of
its own, its program's directory under an overlay mounted only there (the
directory itself the lower layer, a tmpfs the upper: layers on two file
systems), so the path names one file inside and, with the same inode but
another device, another outside."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.scanner.procs import children, state
from unreachable._paths import shim_path
from unreachable.process.status import read_status

# Run by sh inside the namespaces: $1 the program's directory, $2 an empty
# directory for the upper layer's tmpfs, $3 the program, $4 the shim.
INSIDE = """set -e
mount --make-rprivate /
mount -t tmpfs tmpfs "$2"
mkdir "$2/upper" "$2/work"
mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1"
mount -t proc proc /proc
exec env LD_PRELOAD="$4" UNREACHABLE_MALLOC_OPTIONS=backtrace=16 "$1/$3"
"""


@contextmanager
def in_container(program: Path, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(the target's pid as seen from here, its path inside) for `program`
    (built) run from tmp_path/bin; the target is left running, untraced."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mount and pid namespaces need root and unshare(1)")
    bindir, rw = tmp_path / "bin", tmp_path / "rw"
    bindir.mkdir()
    rw.mkdir()
    shutil.copy(program, bindir / program.name)
    cmd = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", INSIDE, "sh"]
    cmd += [str(bindir), str(rw), program.name, shim_path()]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        if not proc.stdout.readline().startswith(b"READY"):
            pytest.skip(f"cannot start a container here: {proc.stderr.read().decode().strip()}")
        (pid,) = children(proc.pid)
        yield pid, bindir / program.name
        assert state(pid) in "SR" and read_status(pid).tracer_pid == 0
    finally:
        proc.kill()
        proc.wait(timeout=10)
