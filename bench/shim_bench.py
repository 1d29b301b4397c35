"""malloc/free throughput: plain glibc vs the shim, default and backtrace=16,
then the overhead of each malloc_debug option (docs/malloc_debug.md).

Not a test: prints ops/s (best of R interleaved rounds, every configuration
measured in each round) and the slowdown of each shim configuration against
glibc, as the median of the rounds' ratios and as best against best. Only
the default and backtrace=16 configurations have targets; the malloc_debug
options are debugging aids and are reported without one. The load average
is printed before and after the measured rounds: other work on the machine
moves every ratio.

With --results and --no-options, the malloc_debug options table of the
previous bench/RESULTS.md section is kept, under a line that says it comes
from an earlier run (its command and load) and was not measured again.

    python bench/shim_bench.py [--ops N] [--repeat R] [--option-ops N] [--no-options]
                               [--compare OTHER_SHIM.so]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

TARGETS = {"default": 1.2, "backtrace=16": 3.0}
# with a slowdown; only TARGETS have a verdict
REPORTED = {*TARGETS, "compared", "compared backtrace=16"}

# One configuration per malloc_debug option that costs something per call
# (the signal-driven ones cost nothing until their signal arrives).
OPTION_CONFIGS = [
    "guard",
    "front_guard",
    "rear_guard",
    "fill_on_alloc",
    "fill_on_free",
    "fill",
    "fill=64",
    "expand_alloc",
    "free_track",
    "free_track free_track_backtrace_num_frames=0",
    "verify_pointers",
    "leak_track",
    "record_allocs",
    "abort_on_error",
    "check_unreachable_on_signal log_allocator_stats_on_signal",
    "guard fill free_track verify_pointers backtrace=16",
]


def measure(exe: Path, threads: int, ops: int, shim: Path | None, options: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    env.pop("UNREACHABLE_MALLOC_OPTIONS", None)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    if options is not None:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    out = subprocess.run(
        [str(exe), str(threads), str(ops)], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=4_000_000, help="operations per thread")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds per configuration")
    ap.add_argument(
        "--option-ops", type=int, default=1_000_000, help="operations per thread, option runs"
    )
    ap.add_argument("--no-options", action="store_true", help="skip the malloc_debug options")
    ap.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="another build of the shim, measured (default, backtrace=16) in the same rounds",
    )
    args = ap.parse_args()

    exe = build(REPO / "bench" / "programs" / "malloc_bench.c", cflags=["-O2"])
    shim = shim_path()
    configs: list[tuple[str, Path | None, str | None]] = [
        ("glibc", None, None),
        ("default", shim, ""),
        ("backtrace=16", shim, "backtrace=16"),
    ]
    if args.compare is not None:
        configs.append(("compared", args.compare, ""))
        configs.append(("compared backtrace=16", args.compare, "backtrace=16"))
    ok = True
    print(f"load average {load():.1f} before the rounds")
    for threads in (1, 2):
        best = {name: 0.0 for name, _, _ in configs}
        rounds: list[dict[str, float]] = []
        for _ in range(args.repeat):  # interleaved, so drift hits every configuration alike
            rates = {
                name: measure(exe, threads, args.ops, lib, opts) for name, lib, opts in configs
            }
            rounds.append(rates)
            for name, rate in rates.items():
                best[name] = max(best[name], rate)
        print(f"threads={threads}")
        for name, _, _ in configs:
            line = f"  {name:21s} {best[name] / 1e6:8.2f} Mops/s"
            if name in REPORTED:
                # Two estimators: best against best, and the median of each
                # round's ratio (glibc and the shim measured seconds apart),
                # which a single lucky or unlucky run cannot move. The
                # verdict uses the median.
                ratio = best["glibc"] / best[name]
                paired = statistics.median(r["glibc"] / r[name] for r in rounds)
                line += f"   slowdown {paired:5.2f}x median of rounds, {ratio:5.2f}x best"
                if name in TARGETS:
                    target = TARGETS[name]
                    verdict = "ok" if paired <= target else "MISSED"
                    ok &= paired <= target
                    line += f" (target <= {target}x: {verdict})"
            print(line)
    print(f"load average {load():.1f} after the rounds")
    if not args.no_options:
        measure_options(exe, shim, args)
    elif RECORDING:
        print(earlier_options())
    return 0 if ok else 1


def load() -> float:
    return os.getloadavg()[0]


OPTIONS_HEAD = "malloc_debug options, threads="
KEPT_HEAD = "malloc_debug options: not measured by this run (--no-options);"


def earlier_options() -> str:
    """The options table of the section this bench wrote last, under a line
    naming the run that measured it (kept as is when it was kept before)."""
    old = results.RESULTS.read_text() if results.RESULTS.exists() else ""
    mark = "<!-- shim_bench -->"
    section = old.partition(mark)[2].partition(mark)[0]
    lines = section.splitlines()
    start = next(
        (i for i, ln in enumerate(lines) if ln.startswith((KEPT_HEAD, OPTIONS_HEAD))), None
    )
    if start is None:
        return f"{KEPT_HEAD} no earlier run measured them"
    end = next(i for i in range(start, len(lines) + 1) if i == len(lines) or lines[i] == "```")
    table = lines[start:end]
    if table[0].startswith(KEPT_HEAD):
        return "\n".join(table)
    command = next((ln for ln in lines if ln.startswith("`python bench/")), "`?`").rstrip(":")
    machine = next((ln for ln in lines if ln.startswith("Machine: ")), "Machine: ?")
    where = machine.removeprefix("Machine: ").rstrip(".").rpartition("; ")[2]
    return "\n".join([f"{KEPT_HEAD} from an earlier run, {command}, {where}:", *table])


def measure_options(exe: Path, shim: Path, args: argparse.Namespace) -> None:
    """Slowdown of each malloc_debug option against glibc (1 and 2 threads)."""
    configs: list[tuple[str, Path | None, str | None]] = [("glibc", None, None)]
    configs += [(opts, shim, opts) for opts in OPTION_CONFIGS]
    for threads in (1, 2):
        best = {name: 0.0 for name, _, _ in configs}
        for _ in range(max(1, args.repeat - 2)):
            for name, lib, options in configs:
                rate = measure(exe, threads, args.option_ops, lib, options)
                best[name] = max(best[name], rate)
        print(f"malloc_debug options, threads={threads} ({args.option_ops} ops/thread)")
        for name, _, _ in configs:
            line = f"  {name:52s} {best[name] / 1e6:8.2f} Mops/s"
            if name != "glibc":
                line += f"   slowdown {best['glibc'] / best[name]:6.2f}x"
            print(line)


RECORDING = "--results" in sys.argv[1:]

if __name__ == "__main__":
    results.run("shim_bench", "Shim speed (malloc/free against glibc)", main)
