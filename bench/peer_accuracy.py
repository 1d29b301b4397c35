"""Leak verdicts of unreachable, valgrind memcheck and LeakSanitizer on the
same programs, each at the moment the program says it is ready.

Not a test: prints, per scenario program (tests/scan/programs), the truth the
program reports about itself (leak_count, leak_bytes) and what each tool
found at that moment, then how many programs each tool got exactly right.

    python bench/peer_accuracy.py [--only NAME ...]

unreachable:  `scan` of the running program under the shim.
memcheck:     the program under valgrind; at READY, `vgdb leak_check summary`
              (definitely + indirectly lost; "possibly lost" blocks are
              reachable through interior pointers, which keep a block alive
              here too).
LSan:         the program built with -fsanitize=leak; at READY it calls
              __lsan_do_recoverable_leak_check() itself (scenario.h), so the
              check sees the process at the same point, not at exit.
A tool that is not installed gets a column of "-".
"""

from __future__ import annotations

import argparse
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.errors import ScanError  # noqa: E402
from unreachable.scan import ScanOptions, scan  # noqa: E402

PROGRAMS = REPO / "tests" / "scan" / "programs"
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Program:
    source: str
    args: tuple[str, ...] = ()
    cxx: bool = False
    library: str = ""  # a shared library built first, its path the first argument


SCENARIOS = [
    Program("globals.c"),
    Program("main_stack.c"),
    Program("thread_stack.c"),
    Program("registers.c"),
    Program("tls.c"),
    Program("mmap_page.c"),
    Program("interior.c"),
    Program("past_end.c"),
    Program("alloc_funcs.c"),
    Program("big_block.c"),
    Program("exited_thread.c"),
    Program("graph.c"),
    Program("churn.c"),
    Program("many.c", ("20000", "5000")),
    Program("cxx.cpp", cxx=True),
    Program("dlopen_main.c", library="dlopen_lib.c"),
    Program("epoll_data.c"),
    Program("timer_value.c"),
    Program("signal_stack.c"),
    Program("coroutine_stack.c"),
    Program("queued_signal.c"),
]

Verdict = tuple[int, int] | str | None  # (count, bytes); why it gave none; None: not installed


def _args(p: Program) -> list[str]:
    lib = [str(build(PROGRAMS / p.library, shared=True))] if p.library else []
    return lib + list(p.args)


def _ready(proc: subprocess.Popen[bytes]) -> dict[str, int]:
    """Wait for the READY line; its key=value pairs."""
    assert proc.stdout is not None
    deadline = time.monotonic() + TIMEOUT_S
    buf = b""
    while b"\n" not in buf:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the program never became ready")
        if select.select([proc.stdout], [], [], 1.0)[0]:
            buf += proc.stdout.read1(4096)  # type: ignore[attr-defined]
    for line in buf.decode(errors="replace").splitlines():
        if line.startswith("READY"):
            return {k: int(v, 0) for k, v in (kv.split("=", 1) for kv in line.split()[1:])}
    return _ready(proc)


def _finish(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=30)


def run_unreachable(p: Program) -> tuple[dict[str, int], Verdict]:
    exe = build(PROGRAMS / p.source, cxx=p.cxx)
    env = {"LD_PRELOAD": str(shim_path()), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [str(exe), *_args(p)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        truth = _ready(proc)
        try:
            report = scan(proc.pid, ScanOptions())
        except ScanError as e:
            return truth, f"error: {e}"[:24]
        return truth, (report.leak_count, report.leak_bytes)
    finally:
        _finish(proc)


# "definitely lost: 300 (+300) bytes in 1 (+1) blocks" (the deltas since the
# last check come with a monitor command's leak check).
_SUMMARY = re.compile(
    r"(definitely|indirectly) lost: ([\d,]+) (?:\([+-][\d,]+\) )?bytes in ([\d,]+)"
)


def run_memcheck(p: Program) -> Verdict:
    if not (shutil.which("valgrind") and shutil.which("vgdb")):
        return None
    exe = build(PROGRAMS / p.source, cxx=p.cxx)
    # Not -q: it would silence the monitor command's answer too.
    cmd = ["valgrind", "--tool=memcheck", "--vgdb=yes", "--leak-check=no", str(exe)]
    proc = subprocess.Popen(
        cmd + _args(p), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        _ready(proc)
        out = subprocess.run(
            ["vgdb", f"--pid={proc.pid}", "leak_check", "summary"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        found = _SUMMARY.findall(out.stdout + out.stderr)
        if not found:
            return "no answer"
        count = sum(int(n.replace(",", "")) for _, _, n in found)
        size = sum(int(b.replace(",", "")) for _, b, _ in found)
        return count, size
    finally:
        _finish(proc)


_LSAN = re.compile(r"SUMMARY: LeakSanitizer: (\d+) byte\(s\) leaked in (\d+) allocation\(s\)")


def run_lsan(p: Program) -> Verdict:
    try:
        exe = build(
            PROGRAMS / p.source,
            name=f"lsan-{Path(p.source).stem}",
            cxx=p.cxx,
            cflags=["-fsanitize=leak", "-DUR_PEER_LSAN"],
            ldflags=["-fsanitize=leak"],
        )
    except subprocess.CalledProcessError:
        return None  # no LeakSanitizer runtime for this compiler
    env = {"LSAN_OPTIONS": "detect_leaks=1:exitcode=0", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [str(exe), *_args(p)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        _ready(proc)  # printed after the check: its report is complete on stderr
        assert proc.stderr is not None
        err = b""
        while b"UR-LSAN-CHECKED" not in err:
            if not select.select([proc.stderr], [], [], TIMEOUT_S)[0]:
                return "no answer"
            chunk = proc.stderr.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                return "no answer"
            err += chunk
        m = _LSAN.search(err.decode(errors="replace"))
        return (int(m.group(2)), int(m.group(1))) if m else (0, 0)
    finally:
        _finish(proc)


def _cell(v: Verdict, truth: tuple[int, int]) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    mark = "ok" if v == truth else "WRONG"
    return f"{v[0]} / {v[1]} B {mark}"


def _verdict(tool: Callable[[Program], Verdict], p: Program) -> Verdict:
    """The tool's verdict; "failed" if the program crashed or hung under it
    twice (once can be this machine: vgdb attaching to a busy target)."""
    for _ in range(2):
        try:
            return tool(p)
        except (RuntimeError, OSError, subprocess.SubprocessError):
            pass
    return "failed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", default=[], help="program names to run")
    args = ap.parse_args()
    chosen = [p for p in SCENARIOS if not args.only or p.source in args.only]
    tools = ("unreachable", "memcheck", "LSan")
    exact = dict.fromkeys(tools, 0)
    ran = dict.fromkeys(tools, 0)
    print(f"{'program':18s} {'truth':>16s}  " + "  ".join(f"{t:>24s}" for t in tools))
    for p in chosen:
        info, ours = run_unreachable(p)
        truth = (info["leak_count"], info["leak_bytes"])
        verdicts = {
            "unreachable": ours,
            "memcheck": _verdict(run_memcheck, p),
            "LSan": _verdict(run_lsan, p),
        }
        for t, v in verdicts.items():
            ran[t] += v is not None
            exact[t] += v == truth
        cells = "  ".join(f"{_cell(verdicts[t], truth):>24s}" for t in tools)
        print(f"{p.source:18s} {f'{truth[0]} / {truth[1]} B':>16s}  {cells}", flush=True)
    print("exactly right: " + ", ".join(f"{t} {exact[t]} of {ran[t]}" for t in tools))
    return 0


if __name__ == "__main__":
    results.run("peer_accuracy", "Leak verdicts against the peers", main)
