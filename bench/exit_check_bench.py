"""The cost of leak_check_at_exit: a short-lived program's wall time from
start to exit, with no shim, with the shim, and with the shim and the check;
where the check's time goes; optionally a real test suite with and without it.

Not a test: prints medians of R interleaved rounds. The check starts the
scanner (a Python process: $UNREACHABLE_CLI, here this interpreter's
`-m unreachable.cli.main`) in every process that exits, so its cost is that
interpreter's start-up, the imports of the scan command and one scan of a
small heap; the second table splits it so, and the third lists the modules
whose imports take longest (python -X importtime, the least of R runs).

The package is byte-compiled first (python -m compileall), as an installed
one is: from source, every start would compile it again.

    python bench/exit_check_bench.py [--allocations N] [--repeat R] [--results]
    python bench/exit_check_bench.py --suite DIR --suite-command "make check"
    python bench/exit_check_bench.py --compare "before=python3 /path/to/old-cli.py"

The suite in bench/RESULTS.md is Debian's jansson (deb-src sources needed):

    apt-get source jansson
    cmake -S jansson-2.14 -B jb -DCMAKE_POLICY_VERSION_MINIMUM=3.5 && make -C jb
    python bench/exit_check_bench.py --suite jb --suite-command "make test"

--suite runs the command in DIR twice per round, plain and under
`unreachable-cli run --check-at-exit --`, after one untimed plain run (to
build what it builds), and prints both times and their ratio. --results
writes the tables to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

CLI = [sys.executable, "-m", "unreachable.cli.main"]
CONFIGS: dict[str, tuple[bool, str | None]] = {
    "glibc": (False, None),
    "shim": (True, None),
    "shim, backtrace": (True, "backtrace"),
    "shim, leak_check_at_exit": (True, "leak_check_at_exit"),
    "shim, leak_check_at_exit backtrace": (True, "leak_check_at_exit backtrace"),
}
CHECKED = "shim, leak_check_at_exit"
# The scanner's start-up in steps: the interpreter alone, then the CLI up to
# its parsed scan command (its imports; --help prints and exits there).
INTERPRETER = [sys.executable, "-c", "pass"]
SCAN_COMMAND = ["scan", "--help"]


def clean_env() -> dict[str, str]:
    drop = ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS", "UNREACHABLE_SUPPRESSIONS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["UNREACHABLE_CLI"] = shlex.join(CLI)
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, int]:
    started = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - started, res.returncode


def run_once(
    exe: Path, allocations: int, preload: bool, options: str | None, cli: str | None = None
) -> float:
    env = clean_env()
    if cli is not None:
        env["UNREACHABLE_CLI"] = cli
    if preload:
        env["LD_PRELOAD"] = str(shim_path())
    if options is not None:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    elapsed, code = timed([str(exe), str(allocations)], env)
    if code != 0:
        raise SystemExit(f"{exe} exited {code} with {options!r}")
    return elapsed


def import_times(repeat: int) -> list[tuple[str, int, int, int]]:
    """(module, depth, cumulative us, self us) under the scan command's
    imports, the least of `repeat` runs each."""
    cum: dict[str, list[int]] = defaultdict(list)
    own: dict[str, list[int]] = defaultdict(list)
    depth: dict[str, int] = {}
    line = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
    for _ in range(repeat):
        res = subprocess.run(
            [sys.executable, "-X", "importtime", *CLI[1:], *SCAN_COMMAND],
            env=clean_env(),
            capture_output=True,
            text=True,
        )
        for m in line.finditer(res.stderr):
            own[m[4]].append(int(m[1]))
            cum[m[4]].append(int(m[2]))
            depth[m[4]] = (len(m[3]) - 1) // 2  # "| " then two spaces a level
    return [(name, depth[name], min(cum[name]), min(own[name])) for name in cum]


def short_lived(args: argparse.Namespace) -> str:
    exe = build(REPO / "bench" / "programs" / "short_lived.c")
    configs = {name: (*config, None) for name, config in CONFIGS.items()}
    for given in args.compare:
        label, _, command = given.partition("=")
        configs[f"{CHECKED}, scanner: {label}"] = (True, "leak_check_at_exit", command)
    times: dict[str, list[float]] = {name: [] for name in configs}
    startup: dict[str, list[float]] = {"interpreter": [], "cli": []}
    for _ in range(args.repeat):
        for name, (preload, options, cli) in configs.items():
            times[name].append(run_once(exe, args.allocations, preload, options, cli))
        startup["interpreter"].append(timed(INTERPRETER, clean_env())[0])
        startup["cli"].append(timed([*CLI, *SCAN_COMMAND], clean_env())[0])
    med = {name: statistics.median(samples) * 1000 for name, samples in times.items()}
    best = {name: min(samples) * 1000 for name, samples in times.items()}
    load = os.getloadavg()[0]
    out = [
        f"`bench/programs/short_lived.c` ({args.allocations} live allocations, no leak), "
        f"start to exit, median and best of {args.repeat} interleaved rounds "
        f"({os.cpu_count()} CPUs, load average {load:.1f} at the end):",
        "",
        "| configuration | median ms | best ms | median x glibc | median x shim |",
        "|---|---|---|---|---|",
    ]
    for name, ms in med.items():
        out.append(
            f"| {name} | {ms:.1f} | {best[name]:.1f} | {ms / med['glibc']:.1f}"
            f" | {ms / med['shim']:.1f} |"
        )
    parts = []
    for pick, label in ((statistics.median, "median"), (min, "best")):
        check = pick(times[CHECKED]) * 1000 - pick(times["shim"]) * 1000
        interp = pick(startup["interpreter"]) * 1000
        imports = pick(startup["cli"]) * 1000 - interp
        parts.append((label, check, interp, imports, check - interp - imports))
    out += [
        "",
        "Where the check's time goes (the rest is the scan itself, its ptrace stops,",
        "the report and the shell that starts the scanner):",
        "",
        "| part | " + " | ".join(f"{p[0]} ms" for p in parts) + " |",
        "|---|---|---|",
        "| the check (leak_check_at_exit minus shim) | "
        + " | ".join(f"{p[1]:.0f}" for p in parts)
        + " |",
        "| interpreter start-up (`python -c pass`, site included) | "
        + " | ".join(f"{p[2]:.0f}" for p in parts)
        + " |",
        "| the CLI's imports up to its parsed scan command (`scan --help`) | "
        + " | ".join(f"{p[3]:.0f}" for p in parts)
        + " |",
        "| the rest | " + " | ".join(f"{p[4]:.0f}" for p in parts) + " |",
        "",
        f"Imports of `unreachable-cli scan` taking longest (`python -X importtime`, least of"
        f" {args.repeat} runs; cumulative, as it nests them, two levels; `site` is the"
        " interpreter's own start with the machine's .pth files, the same for any Python"
        " program there):",
        "",
        "| module | cumulative ms | own ms |",
        "|---|---|---|",
    ]
    rows = [r for r in import_times(args.repeat) if r[1] <= 1]
    for name, depth, total, own in sorted(rows, key=lambda r: -r[2])[:12]:
        out.append(f"| {'&nbsp;' * 2 * depth}{name} | {total / 1000:.1f} | {own / 1000:.1f} |")
    return "\n".join(out) + "\n"


def suite(args: argparse.Namespace) -> str:
    plain = ["sh", "-c", args.suite_command]
    checked = [*CLI, "run", "--check-at-exit", "--", *plain]
    env = clean_env()
    timed(plain, env, args.suite)  # build what the command builds, untimed
    runs = {"plain": (plain, env), "`unreachable-cli run --check-at-exit --`": (checked, env)}
    for given in args.compare:
        label, _, command = given.partition("=")
        runs[f"the same, scanner: {label}"] = (checked, env | {"UNREACHABLE_CLI": command})
    samples: dict[str, list[float]] = {label: [] for label in runs}
    codes = set()
    for _ in range(args.suite_repeat):
        for label, (argv, run_env) in runs.items():
            elapsed, code = timed(argv, run_env, args.suite)
            samples[label].append(elapsed)
            codes.add(code)
    med = {label: statistics.median(times) for label, times in samples.items()}
    out = [
        f"`{args.suite_command}` in {args.suite_name or args.suite.name}, median of"
        f" {args.suite_repeat} round(s), exit statuses {sorted(codes)}:",
        "",
        "| run | seconds | x plain |",
        "|---|---|---|",
    ]
    out += [f"| {label} | {t:.2f} | {t / med['plain']:.1f} |" for label, t in med.items()]
    return "\n".join(out) + "\n"


def write_results(text: str) -> None:
    """Replace this bench's section of bench/RESULTS.md (or add it)."""
    results.put_section("exit_check_bench", f"## Leak check at exit\n\n{text}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocations", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--suite", type=Path, help="a test suite's directory")
    p.add_argument("--suite-command", default="make check")
    p.add_argument("--suite-name", help="what to call it in the results")
    p.add_argument("--suite-repeat", type=int, default=3)
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=COMMAND",
        help="also time the check with COMMAND as the scanner ($UNREACHABLE_CLI), e.g. an"
        " older tree's CLI, interleaved with the others",
    )
    p.add_argument("--results", action="store_true", help="write bench/RESULTS.md")
    args = p.parse_args()
    compileall.compile_dir(str(REPO / "unreachable"), quiet=1)
    text = short_lived(args)
    if args.suite is not None:
        text += "\n" + suite(args)
    print(text, end="")
    if args.results:
        write_results(text)


if __name__ == "__main__":
    results.run("exit_check_bench", "Leak check at exit", main)
