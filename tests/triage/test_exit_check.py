"""leak_check_at_exit: short-lived programs that scan themselves as they exit
(tests/triage/programs/exit_leaks.c), through the shim and `run --check-at-exit`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cbuild import build

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
DROP = ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS", "UNREACHABLE_CLI", "UNREACHABLE_SUPPRESSIONS")
HEADER = re.compile(r"^==(\d+)==ERROR: unreachable: detected memory leaks at exit$", re.M)


@pytest.fixture(scope="module")
def program() -> Path:
    return build(PROGRAMS / "exit_leaks.c")


def run(
    program: Path, mode: str, shim: Path, options: str = "leak_check_at_exit backtrace", **env: str
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in DROP}
    full |= {
        "LD_PRELOAD": str(shim),
        "UNREACHABLE_MALLOC_OPTIONS": options,
        "UNREACHABLE_CLI": shlex.join(CLI),
    }
    return subprocess.run(
        [str(program), mode], env=full | env, capture_output=True, text=True, timeout=300
    )


def test_leak_left_at_exit_fails_the_process_with_23(program, shim):
    res = run(program, "leak", shim)
    assert res.returncode == 23, res.stderr
    assert res.stdout == "out"  # buffered output is still flushed
    m = HEADER.search(res.stderr)
    assert m, res.stderr
    report = res.stderr[m.end() :].lstrip("\n").splitlines()
    assert report[:3] == ["  64 bytes in 1 unreachable allocation", "  ABI: 'x86_64'", ""]
    assert re.fullmatch(r"  64 bytes unreachable at [0-9a-f]+", report[3])
    assert "(leak_here+" in report[4]
    assert report[-1] == "SUMMARY: unreachable: 64 byte(s) leaked in 1 allocation(s)."


def test_report_reaches_stderr_the_program_closed(program, shim):
    res = run(program, "closed", shim)
    assert res.returncode == 23
    assert "SUMMARY: unreachable: 64 byte(s) leaked in 1 allocation(s)." in res.stderr


def test_clean_exit_is_silent_and_keeps_its_status(program, shim):
    res = run(program, "clean", shim)
    assert (res.returncode, res.stdout, res.stderr) == (0, "out", "")


def test_runs_after_atexit_handlers_and_static_destructors(program, shim):
    """The blocks stay reachable from globals until an atexit handler and a
    destructor of the program drop them: reported only if the check comes after."""
    res = run(program, "dropped", shim)
    assert res.returncode == 23, res.stderr
    assert "SUMMARY: unreachable: 64 byte(s) leaked in 2 allocation(s)." in res.stderr
    sizes = sorted(int(n) for n in re.findall(r"^  (\d+) bytes unreachable at", res.stderr, re.M))
    assert sizes == [24, 40]


def test_forked_children_and_exec_inherit_it(program, shim):
    forked = run(program, "fork", shim)
    assert (forked.returncode, forked.stdout) == (0, "child=23\n"), forked.stderr
    assert len(HEADER.findall(forked.stderr)) == 1  # the child's; the parent leaked nothing
    execd = run(program, "exec", shim)
    assert execd.returncode == 23, execd.stderr
    assert "(leak_here+" in execd.stderr


def test_exitcode_option(program, shim):
    keep = run(program, "leak", shim, "leak_check_at_exit leak_check_exitcode=0 backtrace")
    assert keep.returncode == 7 and HEADER.search(keep.stderr), keep.stderr
    other = run(program, "leak", shim, "leak_check_at_exit leak_check_exitcode=42")
    assert other.returncode == 42, other.stderr


def test_suppressions_from_the_environment(program, shim, tmp_path):
    supp = tmp_path / "exit.supp"
    supp.write_text("leak:leak_here\n")
    res = run(program, "leak", shim, UNREACHABLE_SUPPRESSIONS=str(supp))
    assert (res.returncode, res.stderr) == (7, ""), res.stderr


def test_off_without_the_option(program, shim):
    res = run(program, "leak", shim, "backtrace")
    assert (res.returncode, res.stderr) == (7, "")


def test_a_check_that_cannot_run_leaves_the_status_alone(program, shim):
    res = run(program, "leak", shim, UNREACHABLE_CLI="/nonexistent/scanner")
    assert res.returncode == 7
    lines = res.stderr.splitlines()
    assert lines[0].startswith("libmemunreachable: no scanner found"), lines
    assert re.fullmatch(
        r"unreachable: pid \d+: the leak check at exit could not be done; exit status unchanged",
        lines[1],
    )


def test_run_check_at_exit(program, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    cmd = [*CLI, "run", "--check-at-exit", "--", str(program), "leak"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 23, res.stderr
    assert "(leak_here+" in res.stderr  # backtraces were turned on
    supp = tmp_path / "exit.supp"
    supp.write_text("leak:^leak_here$\n")
    at = cmd.index("--")
    cmd[at:at] = ["--suppressions", os.path.relpath(supp)]  # made absolute for CMD
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert (res.returncode, res.stderr) == (7, ""), res.stderr


def test_run_refuses_a_bad_exitcode_before_exec(program):
    res = subprocess.run(
        [*CLI, "run", "--check-at-exit", "--options", "leak_check_exitcode=256", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr == (
        "unreachable-cli: error: bad --options: bad value for option 'leak_check_exitcode', "
        "value must be <= 255: 256\n"
    )


# What the scanner an exit check starts must not import when nothing leaked:
# the daemon's RPC stack, the history's database, and pyelftools (the shim's
# descriptor is found with the struct-based ELF reader; pyelftools reads DWARF
# and libc's symbols, which a clean exit under the shim needs neither of).
NOT_ON_THE_EXIT_PATH = ("elftools", "grpc", "google", "sqlite3", "prometheus_client")
RECORDER = """\
import atexit, os, runpy, sys
out = os.environ["UR_TEST_MODULES"]
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
sys.argv[0] = "unreachable-cli"
runpy.run_module("unreachable.cli.main", run_name="__main__", alter_sys=True)
"""


def test_the_exit_checks_scanner_starts_lean(program, shim, tmp_path):
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    modules = tmp_path / "modules"
    res = run(
        program,
        "clean",
        shim,
        UNREACHABLE_CLI=shlex.join([sys.executable, str(recorder)]),
        UR_TEST_MODULES=str(modules),
    )
    assert (res.returncode, res.stderr) == (0, "")
    loaded = modules.read_text().splitlines()
    assert "unreachable.scan" in loaded  # it did scan
    assert [m for m in loaded if m.split(".")[0] in NOT_ON_THE_EXIT_PATH] == []
