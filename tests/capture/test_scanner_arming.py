"""The scanner's own arming and disarming of a write tracking (native/scanner/
write_protect.c) cost what the tracked memory holds, not the size of its
mappings: counted in ioctls, with strace on the scanner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.targets import TargetFactory
from tests.support.tracking import strace_for_tracking, wait_untracked

RESERVATION = Path(__file__).parent / "programs" / "rw_reservation.c"
PIECE = 8 << 20  # write_protect.h UR_WALK_CHUNK

# Arms and disarms the target's writes from the scanner (mode SCANNER, the
# disarm on this thread), and says how many mappings it armed.
TRACK = """
import sys
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import tracked_writes
with tracked_writes(open_target(int(sys.argv[1])), beside=False) as n:
    print(n)
"""


def test_a_read_write_reservation_is_armed_and_disarmed_in_few_calls(
    targets: TargetFactory, tmp_path: Path
) -> None:
    """A 64 GiB read-write reservation never touched: the scanner protected
    it with one page-table walk per 8 MiB and unregistered it with two
    ioctls per 8 MiB (24,576 calls here, MariaDB's 8 TiB three million).
    Now the runs of pages are found first: a stretch without pages costs
    no protecting walk and one unregistering call."""
    strace = strace_for_tracking("scanner's")
    target = targets.start(RESERVATION, "64")
    reserved = target.int("reserved")
    log = tmp_path / "ioctls"
    res = subprocess.run(
        [
            strace,
            "-f",
            "-qq",
            "-e",
            "trace=ioctl",
            "-o",
            str(log),
            sys.executable,
            "-c",
            TRACK,
            str(target.pid),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) > 0  # armed by the scanner: its calls are the ones counted
    wait_untracked(target.pid)
    calls = [line for line in log.read_text().splitlines() if " ioctl(" in line]
    unregisters = [line for line in calls if "UFFDIO_UNREGISTER" in line]
    assert unregisters, calls[:5]
    assert len(calls) < reserved // PIECE // 8, (len(calls), reserved // PIECE)
    assert target.alive()
