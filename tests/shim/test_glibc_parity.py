"""glibc's own malloc tests, run with and without the shim: the same outcome.

The tests in glibc_parity/malloc are glibc 2.36's malloc/tst-*.c (the
installed version, with Debian's patch), unchanged; glibc_parity/README.md
says which ones are here, which are not and why. Each is built against the
installed glibc with a small compatible test driver (glibc_parity/support),
run once without the shim for the reference outcome, then with the shim
preloaded under default options and under backtrace=16.
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cbuild import build

PARITY = Path(__file__).resolve().parent / "glibc_parity"
MALLOC = PARITY / "malloc"
# glibc builds its tests with -Wall but not -Wextra; the vendored sources stay
# as glibc wrote them.
CFLAGS = [
    f"-I{PARITY}",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-old-style-declaration",
]
# Longest a test may take here (glibc's own timeouts are 20 s, 50 s or 100 s
# times TIMEOUTFACTOR; the driver enforces those inside).
RUN_TIMEOUT = 240.0
REAPER = Path(__file__).resolve().parent / "reaper.py"
# What the reaper may take past the program's timeout to kill and reap.
REAPER_MARGIN = 60.0


@dataclass(frozen=True)
class Case:
    sources: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    driver: bool = True  # linked with support/support.c (all but mallocbug)
    # Why the shim's outcome differs from glibc's, for a known divergence.
    diverges: str = ""
    # The divergence is a race: the test fails under the shim some runs only.
    sometimes: bool = False
    # The option strings the divergence shows under.
    diverges_under: tuple[str, ...] = ("", "backtrace=16")


CASES: dict[str, Case] = {
    "mallocbug": Case(("mallocbug.c",), driver=False),
    "tst-malloc": Case(("tst-malloc.c",)),
    "tst-calloc": Case(("tst-calloc.c",)),
    "tst-valloc": Case(("tst-valloc.c",)),
    "tst-pvalloc": Case(("tst-pvalloc.c",)),
    "tst-pvalloc-fortify": Case(("tst-pvalloc-fortify.c",)),
    "tst-memalign": Case(("tst-memalign.c",)),
    "tst-mallocalign1": Case(("tst-mallocalign1.c",)),
    "tst-posix_memalign": Case(("tst-posix_memalign.c",)),
    "tst-realloc": Case(("tst-realloc.c",)),
    "tst-reallocarray": Case(("tst-reallocarray.c",)),
    "tst-malloc-too-large": Case(("tst-malloc-too-large.c",)),
    "tst-mallocfork": Case(("tst-mallocfork.c",)),
    "tst-mallocfork2": Case(("tst-mallocfork2.c",)),
    "tst-mallocfork3": Case(("tst-mallocfork3.c",)),
    "tst-malloc-fork-deadlock": Case(("tst-malloc-fork-deadlock.c",)),
    "tst-malloc-thread-exit": Case(("tst-malloc-thread-exit.c",)),
    "tst-malloc-thread-fail": Case(("tst-malloc-thread-fail.c",)),
    "tst-malloc-backtrace": Case(("tst-malloc-backtrace.c",)),
    "tst-mallopt": Case(("tst-mallopt.c",)),
    "tst-trim1": Case(("tst-trim1.c",)),
    "tst-mallinfo2": Case(("tst-mallinfo2.c",)),
    "tst-malloc_info": Case(("tst-malloc_info.c",)),
    "tst-malloc-stats-cancellation": Case(("tst-malloc-stats-cancellation.c",)),
    "tst-malloc-tcache-leak": Case(("tst-malloc-tcache-leak.c",)),
    "tst-tcfree1": Case(("tst-tcfree1.c",)),
    "tst-tcfree2": Case(("tst-tcfree2.c",)),
    "tst-tcfree3": Case(("tst-tcfree3.c",)),
    "tst-free-errno": Case(("tst-free-errno.c",)),
    "tst-mxfast": Case(
        ("tst-mxfast.c",),
        env={"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0"},
    ),
    "tst-safe-linking": Case(("tst-safe-linking.c",)),
    "tst-obstack": Case(("tst-obstack.c",)),
    "tst-interpose-nothread": Case(("tst-interpose-nothread.c", "tst-interpose-aux-nothread.c")),
    "tst-interpose-thread": Case(("tst-interpose-thread.c", "tst-interpose-aux-thread.c")),
}

# Known divergences that hang until glibc's timeout (100 s) are not run here:
# they would cost minutes of CI for a result README.md already states.
HANGS: set[str] = set()


def driver_digest() -> str:
    """The included .c files of the support layer, which build() does not hash."""
    h = hashlib.sha256()
    for path in sorted(PARITY.rglob("*.c")):
        if path.parent != MALLOC:
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


@functools.cache
def binary(name: str) -> Path:
    case = CASES[name]
    sources = [MALLOC / s for s in case.sources]
    if case.driver:
        sources.append(PARITY / "support" / "support.c")
    return build(sources, name=name, cflags=[*CFLAGS, f"-DUR_PARITY_DRIVER={driver_digest()}"])


@dataclass
class Outcome:
    code: int  # exit status, or -signal
    output: str

    def __str__(self) -> str:
        return f"exit {self.code}\n{self.output[-3000:]}"


def run(name: str, shim: Path | None, options: str | None, tmp: Path) -> Outcome:
    return run_program(binary(name), CASES[name].env, shim, options, tmp)


def run_program(
    exe: Path,
    case_env: dict[str, str],
    shim: Path | None,
    options: str | None,
    tmp: Path,
    timeout: float = RUN_TIMEOUT,
) -> Outcome:
    """Run exe through reaper.py: once it has exited or run out of time, no
    process it started is left, whatever group or session it moved to."""
    drop = ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(case_env)
    env["TMPDIR"] = str(tmp)
    env.setdefault("TIMEOUTFACTOR", "3")  # glibc's knob for slow or busy machines (CI has 2 cores)
    preload = []
    if shim is not None:
        preload += ["--set", f"LD_PRELOAD={shim}"]
        if options is not None:
            preload += ["--set", f"UNREACHABLE_MALLOC_OPTIONS={options}"]
    with tempfile.NamedTemporaryFile(dir=tmp, prefix=f"{exe.name}.", suffix=".status") as f:
        status_file = Path(f.name)
        cmd = [sys.executable, str(REAPER), "--status", str(status_file)]
        cmd += ["--timeout", str(timeout), *preload, "--", str(exe)]
        # A session of its own, so that the reaper can be killed with its
        # whole group if it ever outlives its own timeout.
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout + REAPER_MARGIN)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        text = out.decode(errors="replace")
        status = status_file.read_text().split()
    if proc.returncode != 0 or not status:
        raise RuntimeError(f"reaper.py failed (exit {proc.returncode}): {text[-2000:]}")
    if status[0] == "timeout":
        return Outcome(-signal.SIGKILL, text + "\n[killed: timeout]")
    code = int(status[1])
    return Outcome(-code if status[0] == "signal" else code, text)


@functools.cache
def reference(name: str, tmp: Path) -> Outcome:
    return run(name, None, None, tmp)


def params() -> list:
    out = []
    for name, case in CASES.items():
        for options in ("", "backtrace=16"):
            marks = []
            if case.diverges and options in case.diverges_under:
                run_it = name not in HANGS
                strict = not case.sometimes
                marks.append(pytest.mark.xfail(reason=case.diverges, strict=strict, run=run_it))
            test_id = f"{name}[{options or 'default'}]"
            out.append(pytest.param(name, options, marks=marks, id=test_id))
    return out


@pytest.fixture(scope="module")
def parity_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("glibc_parity")


@pytest.mark.parametrize(("name", "options"), params())
def test_same_outcome_as_glibc(shim: Path, parity_tmp: Path, name: str, options: str) -> None:
    ref = reference(name, parity_tmp)
    assert ref.code == 0, f"{name} fails without the shim: {ref}"
    got = run(name, shim, options, parity_tmp)
    assert got.code == ref.code, f"{name} under the shim ({options or 'default'}): {got}"


def hang_binary() -> Path:
    sources = [Path(__file__).resolve().parent / "programs" / "parity_fork_hang.c"]
    sources.append(PARITY / "support" / "support.c")
    return build(sources, cflags=[*CFLAGS, f"-DUR_PARITY_DRIVER={driver_digest()}"])


def left_behind(output: str) -> list[str]:
    """The processes parity_fork_hang printed that still exist (zombies too)."""
    pids = [int(line.split()[1]) for line in output.splitlines() if "child " in line]
    assert len(pids) == 2, output
    left = []
    for pid in pids:
        try:
            left.append(f"{pid}: {Path(f'/proc/{pid}/stat').read_text().strip()}")
        except FileNotFoundError:
            pass
    return left


@pytest.mark.parametrize(
    ("factor", "timeout"),
    [("1", RUN_TIMEOUT), ("100", 3.0)],
    ids=["driver-timeout", "harness-timeout"],
)
def test_timeout_leaves_no_process(shim: Path, tmp_path: Path, factor: str, timeout: float) -> None:
    """A test whose forked child and grandchild hang, in a process group of
    their own: the driver's timeout (1 s, TIMEOUTFACTOR 1) or the harness's
    (3 s, the driver's then 100 s) ends the run, and nothing is left behind."""
    got = run_program(hang_binary(), {"TIMEOUTFACTOR": factor}, shim, "", tmp_path, timeout)
    if factor == "1":
        assert got.code == 1 and "Timed out" in got.output, got
    else:
        assert got.code == -signal.SIGKILL and "[killed: timeout]" in got.output, got
    assert left_behind(got.output) == []


def test_the_reaper_passes_processes_whose_names_are_not_utf8(shim: Path, tmp_path: Path) -> None:
    """Any process of the machine may be named so (tests/scan/programs/
    odd_names.c is); the reaper reads every process's stat to find its own
    children and failed on one such name."""
    odd = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes, sys; ctypes.CDLL(None).prctl(15, b'odd-\\xff\\xfe', 0, 0, 0);"
            " print(flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert odd.stdout is not None and odd.stdout.readline() == b"\n"
        assert Path(f"/proc/{odd.pid}/comm").read_bytes() == b"odd-\xff\xfe\n"
        got = run_program(Path("/bin/true"), {}, shim, "", tmp_path)
        assert got.code == 0, got
    finally:
        odd.kill()
        odd.wait()
