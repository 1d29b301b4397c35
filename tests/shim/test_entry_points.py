"""The interposed allocator, one scenario program each, run under the shim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shim.support import program, run_ok

# malloc_debug options take the debug entry path (debug.c): same registry.
DEBUG_OPTIONS = "guard fill expand_alloc free_track=10 verify_pointers record_allocs=100000"


def test_every_entry_point(shim: Path) -> None:
    assert run_ok(program("entry_points.c"), shim=shim) == "OK\n"


def test_entry_points_with_backtraces(shim: Path) -> None:
    assert run_ok(program("entry_points.c"), shim=shim, options="backtrace=32") == "OK\n"


@pytest.mark.parametrize("options", ["guard", "DEBUG"])
def test_entry_points_with_debug_options(shim: Path, options: str) -> None:
    opts = DEBUG_OPTIONS if options == "DEBUG" else options
    assert run_ok(program("entry_points.c"), shim=shim, options=opts) == "OK\n"


def test_concurrent_threads_and_exact_registry(shim: Path) -> None:
    out = run_ok(program("threads.c"), shim=shim)
    assert out.startswith("OK ")


@pytest.mark.parametrize("options", ["", DEBUG_OPTIONS])
def test_first_allocation_inside_pthread_getattr_np(shim: Path, options: str) -> None:
    """Every JVM thread's first allocation: it used to deadlock the thread."""
    assert run_ok(program("getattr_first.c"), shim=shim, options=options) == "OK\n"


def test_environment_rebuilt_at_start(shim: Path) -> None:
    """The shim's helper thread must not read the environment while the
    program rebuilds it (redis's setproctitle: SIGSEGV one start in 20).
    Many variables widen the window; a crash shows in some of the runs."""
    exe = program("environ_rewrite.c")
    env = {**os.environ, **{f"UR_PAD_{i}": "x" * 8 for i in range(200)}}
    for _ in range(40):
        done = subprocess.run(
            [str(exe)], env={**env, "LD_PRELOAD": str(shim)}, capture_output=True, timeout=60
        )
        assert (done.returncode, done.stdout) == (0, b"OK\n"), done.stderr


def test_threads_with_backtraces(shim: Path) -> None:
    assert run_ok(program("threads.c"), shim=shim, options="bt=8").startswith("OK ")


def test_threads_with_debug_options(shim: Path) -> None:
    opts = DEBUG_OPTIONS + " bt=8"
    assert run_ok(program("threads.c"), shim=shim, options=opts).startswith("OK ")


@pytest.mark.parametrize("options", ["", "backtrace", DEBUG_OPTIONS])
def test_fork_from_multithreaded_program(shim: Path, options: str) -> None:
    assert run_ok(program("fork.c"), shim=shim, options=options) == "OK\n"


def test_cxx_new_delete(shim: Path) -> None:
    assert run_ok(program("cxx.cpp", cxx=True), shim=shim) == "OK\n"


def test_program_that_never_frees(shim: Path) -> None:
    assert run_ok(program("never_free.c"), shim=shim) == "OK\n"


def test_malloc_disable_blocks_other_threads(shim: Path) -> None:
    assert run_ok(program("disable.c"), shim=shim) == "OK\n"


def test_real_programs_run_under_the_shim(shim: Path) -> None:
    """Something bigger than our scenarios: a Python interpreter doing work."""
    script = "import json; [json.dumps(list(range(10000))) for _ in range(20)]; print('ok')"
    env = {"LD_PRELOAD": str(shim), "UNREACHABLE_MALLOC_OPTIONS": "bt"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_sigaltstack_is_recorded_for_the_scanner(shim: Path) -> None:
    """roots/signal_stacks.py reads this table: a stack only the kernel holds."""
    assert run_ok(program("altstack.c"), shim=shim) == "OK\n"
