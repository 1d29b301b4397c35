"""Address-space limits (ulimit -v, RLIMIT_AS). The shim reserves its memory
in pieces as its registry grows, so a program that fits under a limit with
glibc alone fits under it with the shim too, and is scanned exactly; where
even the shim's first piece does not fit, the shim says so on the process's
stderr and a scan says the same in its one line (native/shim/region.c)."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cbuild import build
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
MIB = 1 << 20
NO_ROOM = "no memory for the registry"


def _limit(mib: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mib * MIB, mib * MIB))

    return apply


@pytest.mark.parametrize(("limit_mib", "heap_mib"), [(256, 96), (64, 16)])
def test_a_program_under_an_address_space_limit_is_scanned_exactly(targets, limit_mib, heap_mib):
    """dovecot's children run under a 256 MiB limit (default_vsz_limit); a
    shim that reserved 1 GiB or more up front was disabled there."""
    target = targets.start(
        PROGRAMS / "vsz_limit.c", str(heap_mib * 1024), preexec=_limit(limit_mib)
    )
    assert target.int("shim_kb") > 0
    assert target.int("vmsize_kb") <= limit_mib * 1024
    report = scan(target.pid, ScanOptions())
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    assert target.alive() and target.tracer() == 0


def test_the_shims_address_space_grows_with_the_heap(targets):
    """A few MiB reserved at start, not the tens of GiB it once took."""
    small = targets.start(PROGRAMS / "vsz_limit.c", "64")
    assert small.int("shim_kb") <= 8 * 1024, small.info
    big = targets.start(PROGRAMS / "vsz_limit.c", str(128 * 1024))
    assert big.int("shim_kb") > small.int("shim_kb")
    # The size maps (an eighth of the heap's span) and what the pieces'
    # doubling leaves unused: well under the heap itself.
    assert big.int("shim_kb") <= 64 * 1024, big.info


def _base_vmsize_kb(exe: Path, shim: Path) -> int:
    """VmSize of the program under the shim, minus the shim's own pieces
    (an inert shim starts no helper thread)."""
    env = {"LD_PRELOAD": str(shim), "UNREACHABLE_MALLOC_OPTIONS": "no_such_option"}
    proc = subprocess.run(
        [str(exe), "64"], input=b"", capture_output=True, env=env, timeout=30, check=True
    )
    info = dict(kv.split("=", 1) for kv in proc.stdout.decode().split()[1:])
    return int(info["vmsize_kb"]) - int(info["shim_kb"])


def test_no_room_for_the_shim_is_said_on_stderr_and_by_scan(shim):
    exe = build(PROGRAMS / "vsz_limit.c")
    # Room for the program and a little heap, not for the shim's first piece.
    limit_mib = _base_vmsize_kb(exe, shim) // 1024 + 2
    proc = subprocess.Popen(
        [str(exe), "64"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"LD_PRELOAD": str(shim)},
        preexec_fn=_limit(limit_mib),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"READY"), proc.stderr.read()
        said = proc.stderr.readline().decode()
        assert said.startswith("unreachable: ") and NO_ROOM in said, said
        assert "ulimit -v" in said, said
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(proc.pid)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 2, res
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "inert" in lines[0] and "no memory for its registry" in lines[0], lines[0]
        assert "OPTIONS" not in lines[0], lines[0]
    finally:
        proc.kill()
        proc.wait()
