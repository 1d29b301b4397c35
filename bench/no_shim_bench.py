"""Scan without the shim (glibc's heap walked from a child or a copy) beside the shim's scan.

tests/scan/programs/big_heap.c allocates MIB mebibytes of SIZE-byte blocks
from the main thread (every eighth one leaked) and is started twice per
heap: without the shim, scanned both ways such a process is (the default:
a copy-on-write child made by a clone() injected into a stopped thread;
and --snapshot stopped: its writable memory copied in the pause), glibc's
heap walked in the child or the copy, and under the shim, scanned the
default way (a fork snapshot, or a copy snapshot for big heaps, swept in
the snapshot child) and stopped. Each is scanned REPEAT times; the
medians of the pause and of the whole scan are printed, with their ratio
to the shim's default scan of the same heap, measured in the same run
(the baseline). Every scan's leak count must be the program's.

--threads N,...: instead, the pause of a small heap's scan without the
shim against its number of threads (N beside the main thread), each with
a malloc'ed alternate signal stack only the kernel holds
(tests/scan/programs/dropped_signal_stacks.c): the stop asks every
thread's sigaltstack() (docs/pause.md, "Asking the signal stacks").
Medians and quartiles of REPEAT scans in each mode, the ratio to the first
count's pause measured in the same run, and the pause each thread more
adds. Then the stopper alone, REPEAT stops of each kind taken in turn: the
hold of a stop that asks every thread (`asking`; and with each stopper of
--other-stoppers, another build of it, `other N`) against the hold of one
that asks none (the ratio), and the hold each thread's query adds.

    python bench/no_shim_bench.py [--heaps 100,1024] [--size 64] [--repeat 3] [--results]
    python bench/no_shim_bench.py --threads 1,5,20,100 [--repeat 15]
        [--other-stoppers PATH,...] [--results]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from tests.support.targets import Target, TargetFactory  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.allocations.glibc_heap import GlibcLibc, find_libc  # noqa: E402
from unreachable.capture import stopper as stopper_module  # noqa: E402
from unreachable.capture.stopper import Stopper  # noqa: E402
from unreachable.process.maps import read_maps  # noqa: E402
from unreachable.scan import ScanOptions, scan  # noqa: E402
from unreachable.scan.syscall_site import syscall_instruction  # noqa: E402

PROGRAM = ROOT / "tests" / "scan" / "programs" / "big_heap.c"
STACKS_PROGRAM = ROOT / "tests" / "scan" / "programs" / "dropped_signal_stacks.c"


def measure(target: Target, options: ScanOptions, repeat: int) -> tuple[float, float, str, str]:
    """Median pause (ms) and whole scan (s), the snapshot taken and where
    the allocations came from; every scan's leak count checked."""
    pauses, totals, snapshot, allocations = [], [], "", ""
    for _ in range(repeat):
        t0 = time.monotonic()
        report = scan(target.pid, options)
        totals.append(time.monotonic() - t0)
        pauses.append(report.pause_ms)
        if report.leak_count != target.int("leak_count"):
            raise SystemExit(f"leak count {report.leak_count}, expected {target.int('leak_count')}")
        snapshot, allocations = report.snapshot, report.allocations
    return statistics.median(pauses), statistics.median(totals), snapshot, allocations


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q[0], statistics.median(values), q[2]


def pauses(target: Target, options: ScanOptions, repeat: int) -> tuple[list[float], list[float]]:
    """Each scan's pause and hold (ms); every scan's leaks and stacks checked."""
    paused, held = [], []
    for _ in range(repeat):
        report = scan(target.pid, options)
        if report.leak_count != target.int("leak_count") or report.snapshot_note:
            raise SystemExit(f"{report.leak_count} leaks, note {report.snapshot_note!r}")
        paused.append(report.pause_ms)
        held.append(report.hold_ms)
    return paused, held


def _held(target: Target, libc: GlibcLibc, ip: int, ask: bool) -> float:
    """The stopper's hold (ms) of one stop, asking the signal stacks or not."""
    stopper = Stopper(target.pid, ip)
    try:
        got = stopper.stop(libc.malloc_code, 8, 0, ask)
        if ask and (got.signal_stacks.unread or not got.signal_stacks.records):
            raise SystemExit(f"signal stacks not read: {got.signal_stacks}")
        stopper.release()
    finally:
        stopper.close()
    return stopper.hold_ns / 1e6


def asking(target: Target, repeat: int, others: list[str]) -> list[list[float]]:
    """The stopper's holds (ms) of stops that do not ask the signal stacks,
    that ask them, and that ask them with each stopper of `others`, taken
    in turn on the same target."""
    mappings = read_maps(target.pid)
    libc = find_libc(target.pid, mappings)
    ip = syscall_instruction(target.pid, libc, mappings)
    own = stopper_module.stopper_path()
    held: list[list[float]] = [[] for _ in range(2 + len(others))]
    for _ in range(repeat):
        held[0].append(_held(target, libc, ip, False))
        for i, path in enumerate([own, *others]):
            stopper_module.stopper_path = lambda p=path: p  # type: ignore[misc]
            try:
                held[1 + i].append(_held(target, libc, ip, True))
            finally:
                stopper_module.stopper_path = lambda: own  # type: ignore[misc]
    return held


def threads_shape(
    factory: TargetFactory, counts: list[int], repeat: int, others: list[str]
) -> None:
    print(
        f"{'threads':>7}  {'scan':<9} {'pause ms (q1 med q3)':>22} {'x first':>8}"
        f" {'hold ms':>8} {'per thread':>10}"
    )
    base: dict[str, float] = {}
    for n in counts:
        # n threads beside main, each with its own stack.
        cflags = ["-O2", f"-DTHREADS={n}"]
        target = factory.start(STACKS_PROGRAM, preload=False, wait_helper=False, cflags=cflags)
        try:
            for how, options in (
                ("stopped", ScanOptions(snapshot="stopped")),
                ("fork", ScanOptions()),
            ):
                paused, held = pauses(target, options, repeat)
                q1, med, q3 = _quartiles(paused)
                base.setdefault(how, med)
                per = (med - base[how]) / (n - counts[0]) if n > counts[0] else 0.0
                print(
                    f"{n:>7}  {how:<9} {q1:>6.2f} {med:>7.2f} {q3:>7.2f} {med / base[how]:>7.2f}x"
                    f" {statistics.median(held):>8.2f} {per * 1000:>7.0f} us",
                    flush=True,
                )
            held = asking(target, repeat, others)
            bare = statistics.median(held[0])
            names = ["asking", *(f"other {i + 1}" for i in range(len(others)))]
            for name, h in zip(names, held[1:], strict=True):
                q1, med, q3 = _quartiles(h)
                print(
                    f"{n:>7}  {name:<9} {q1:>6.2f} {med:>7.2f} {q3:>7.2f} {med / bare:>7.2f}x"
                    f" {'':>8} {(med - bare) * 1000 / n:>7.0f} us  (hold; x a stop not asking)",
                    flush=True,
                )
        finally:
            target.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heaps", default="100,1024", help="heap sizes in MiB, comma-separated")
    ap.add_argument("--size", type=int, default=64, help="block size in bytes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="", help="thread counts, comma-separated (see above)")
    ap.add_argument(
        "--other-stoppers", default="", help="--threads: also ask with these stoppers (commas)"
    )
    args = ap.parse_args()
    factory = TargetFactory(shim_path())
    if args.threads:
        try:
            counts = [int(n) for n in args.threads.split(",")]
            others = [o for o in args.other_stoppers.split(",") if o]
            for i, other in enumerate(others):
                print(f"other {i + 1}: {other}")
            threads_shape(factory, counts, args.repeat, others)
        finally:
            factory.cleanup()
        return
    print(
        f"{'heap':>9} {'blocks':>10}  {'scan':<34} {'pause ms':>9} {'x shim':>7}"
        f" {'scan s':>7} {'x shim':>7}"
    )
    try:
        for mib in (int(h) for h in args.heaps.split(",")):
            program_args = (str(mib), str(args.size))
            rows = []
            for who, preload in (("shim", True), ("no shim", False)):
                target = factory.start(PROGRAM, *program_args, preload=preload, cflags=["-O2"])
                try:
                    for how, options in (
                        ("default", ScanOptions()),
                        ("stopped", ScanOptions(snapshot="stopped")),
                    ):
                        rows.append((f"{who}, {how}", *measure(target, options, args.repeat)))
                finally:
                    target.stop()
            _, base_pause, base_total, _, _ = rows[0]
            blocks = (mib << 20) // args.size
            for name, pause, total, snapshot, allocations in rows:
                label = f"{name} ({snapshot})"
                print(
                    f"{mib:>5} MiB {blocks:>10,}  {label:<34} {pause:>9.1f}"
                    f" {pause / base_pause:>6.2f}x {total:>7.2f} {total / base_total:>6.2f}x",
                    flush=True,
                )
                no_shim = name.startswith("no shim")
                assert allocations == ("glibc heap" if no_shim else "shim registry")
    finally:
        factory.cleanup()


if __name__ == "__main__":
    if any(a.startswith("--threads") for a in sys.argv[1:]):
        results.run("no_shim_threads", "Pause without the shim, by threads", main)
    else:
        results.run("no_shim_bench", "Scan without the shim", main)
