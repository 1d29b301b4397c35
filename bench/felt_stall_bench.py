"""Where the stall a target feels lies against the pauses we report (not a test).

bench/programs/peer_heap.c's heartbeat thread records its longest gap and
when it ended (CLOCK_MONOTONIC, the clock of time.monotonic()). For a copy
snapshot and a concurrent one of the same heap, this prints the reported
pause(s), the longest gap, and where it ended relative to the release(s):
inside a pause, or while the scanner copied, marked or tore the tracking
down with the target running.

    python bench/felt_stall_bench.py [BYTES MIN MAX THREADS] [--repeat N] [--shared]

The target runs in a session of its own, as a service does (its own
autogroup: bench/peer_lsan_bench.py, docs/pause.md "CPU share"); --shared
leaves it in this bench's session, where the scan's threads and the
target's share one scheduling group thread by thread.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.peer_lsan_bench import Heap, build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.capture.copy_snapshot import capture as copy_capture  # noqa: E402
from unreachable.capture.stop_world import CaptureRequest  # noqa: E402
from unreachable.capture.target import open_target  # noqa: E402
from unreachable.scan.concurrent import concurrent_sweep  # noqa: E402

SETTLE_S = 0.3  # after the scan: a gap caused by the tracking's teardown is seen too
HOLD_S = 1.0  # the copy snapshot held after the release, as a scan holds it


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", nargs="*", default=["300000000", "16", "1040", "1"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--shared", action="store_true", help="the target in this bench's session")
    args = ap.parse_args()
    exe = build(Path(tempfile.mkdtemp()), sanitize=False)
    shape = (int(args.shape[0]), int(args.shape[1]), int(args.shape[2]), int(args.shape[3]))
    placement = "shared" if args.shared else "service"
    heap = Heap(exe, shape, {"LD_PRELOAD": str(shim_path())}, placement)
    pid = heap.proc.pid
    print(f"READY {heap.blocks}", f"load average {os.getloadavg()[0]:.1f}", flush=True)
    ask = heap.ask

    def gap() -> tuple[float, float]:
        _, us, at = ask("g").split()
        return int(us) / 1000, int(at) / 1e9

    try:
        for _ in range(args.repeat):
            ask("r")
            time.sleep(1.0)
            print(f"idle: longest gap {gap()[0]:.1f} ms")
            ask("r")
            t0 = time.monotonic()
            with copy_capture(open_target(pid), CaptureRequest("copy")) as cap:
                rel, pause, hold = time.monotonic(), cap.pause_ms, cap.hold_ms
                # Held as a scan holds it: the target's first writes wait
                # for the scanner's server meanwhile.
                time.sleep(HOLD_S)
                stats = cap.copy.stats if cap.copy is not None else {}
            time.sleep(SETTLE_S)
            g, at = gap()
            print(
                f"copy: pause {pause:.1f} ms (hold {hold:.1f}); longest gap {g:.1f} ms, ending"
                f" {1000 * (at - rel):+.1f} ms from the release (the copy took"
                f" {1000 * (rel - t0) - pause:.0f} ms before the stop); pages written"
                f" before the stop {stats.get('dirty', 0)}, saved by it"
                f" {stats.get('seal_saved', 0)}; faults after it {stats.get('faults', 0)},"
                f" on pages written before it {stats.get('dirty_faults', 0)}"
            )
            ask("r")
            t0 = time.monotonic()
            done = concurrent_sweep(open_target(pid))
            time.sleep(SETTLE_S)
            g, at = gap()
            r1, r2 = done.released_at
            print(
                f"concurrent: stops {done.pauses_ms[0]:.1f} / {done.pauses_ms[1]:.1f} ms"
                f" (hold {done.hold_ms:.1f});"
                f" longest gap {g:.1f} ms, ending {1000 * (at - r1):+.1f} ms from the first"
                f" release, {1000 * (at - r2):+.1f} ms from the second"
                f" (scan {1000 * (r2 - t0):.0f} ms)",
                flush=True,
            )
    finally:
        heap.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
