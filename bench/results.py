"""bench/RESULTS.md: one section per bench, written by that bench's --results.

Each section sits between two `<!-- NAME -->` lines and is replaced whole by
the next run, so the file always holds the latest run of every bench, each
with the machine it ran on. The docs and the README quote these tables
rather than carrying numbers of their own.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

# Another file for tests of a bench's --results (they must not rewrite this one).
RESULTS = Path(
    os.environ.get("UNREACHABLE_BENCH_RESULTS") or Path(__file__).resolve().parent / "RESULTS.md"
)
HEADER = (
    "# Benchmark results\n\n"
    "Written by the benches themselves (`python bench/NAME.py --results`); each\n"
    "section names the machine it ran on and is replaced whole by the next run.\n"
    "Ratios compare with a baseline measured in the same run; absolute times\n"
    "move with the machine and its load.\n"
)


def machine() -> str:
    """One line: CPU model, CPUs this process may use, kernel, glibc, and the
    load average as the run ended (other work on the machine slows a run)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0))
    libc = " ".join(platform.libc_ver()) or "unknown libc"
    load = os.getloadavg()[0]
    return (
        f"{platform.machine()}, {model}, {cpus} CPUs, Linux {platform.release()}, {libc}; "
        f"load average {load:.1f} at the end of the run"
    )


def write_section(name: str, title: str, text: str) -> None:
    """Replace bench `name`'s section of RESULTS.md (or add it) with `title`,
    the machine line and `text` (markdown, ending in a newline)."""
    put_section(name, f"## {title}\n\nMachine: {machine()}.\n\n{text}")


def put_section(name: str, body: str) -> None:
    """Replace bench `name`'s section of RESULTS.md (or add it) with body,
    as it is (a bench that writes its own machine line)."""
    mark = f"<!-- {name} -->"
    old = RESULTS.read_text() if RESULTS.exists() else HEADER
    section = f"{mark}\n{body}{mark}\n"
    if mark in old:
        head, _, rest = old.partition(mark)
        _, _, tail = rest.partition(mark + "\n")
        new = head + section + tail
    else:
        new = old.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(new)


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.kept = io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


def run(name: str, title: str, main: Callable[[], object]) -> None:
    """Run a bench's main(); with --results (taken off argv first), also write
    what it printed to its section of RESULTS.md, with the command line."""
    record = "--results" in sys.argv[1:]
    sys.argv = [a for a in sys.argv if a != "--results"]
    if not record:
        status = main()
        sys.exit(status if isinstance(status, int) else 0)
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        status = main()
    command = " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    write_section(name, title, f"`{command}`:\n\n```\n{tee.kept.getvalue().rstrip()}\n```\n")
    sys.exit(status if isinstance(status, int) else 0)
