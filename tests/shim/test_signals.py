"""Allocator calls from signal handlers, and the helper thread kept out of
glibc's sight while the program has one thread."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.shim.support import PROGRAMS, program, run, run_ok
from tests.support.targets import TargetFactory, wait_for_helper

RUNS = 6  # a handler that waited on a lock its own thread held would hang ~2 runs in 3


def test_malloc_in_a_signal_handler_does_not_hang(shim: Path) -> None:
    """glibc takes no arena lock while the process has one thread, so a
    handler's malloc cannot wait on the code it interrupted; the shim's
    helper thread made glibc lock, and 2 runs in 3 hung. A handler's malloc
    that lands inside glibc's own bookkeeping can still corrupt glibc's heap
    (glibc aborts or faults): that happens as often without the shim (2 runs
    in 30 on a loaded machine, with and without it), so only a hang fails."""
    exe = program("signal_malloc.c")
    for _ in range(RUNS):
        try:
            result = subprocess.run(
                [str(exe), "2000000"],
                env={**os.environ, "LD_PRELOAD": str(shim)},
                capture_output=True,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("hung: a signal handler's malloc waited on its own thread")
        if result.returncode in (-signal.SIGABRT, -signal.SIGSEGV):
            continue  # glibc's own non-reentrancy, not the shim's
        assert (result.returncode, result.stdout) == (0, "OK\n"), result.stderr


def test_helper_work_while_the_program_allocates(shim: Path) -> None:
    """The helper's first work in glibc's allocator (malloc_stats) makes glibc
    see the threads first, and waits out the program's call in progress: a
    program calling malloc and free back to back is never seen between two
    calls by a waiter that only looks, and got none of its ten requests
    answered in about one run of four."""
    for _ in range(4):
        out = run(
            program("signal_malloc.c"),
            "2000000",
            "stats",
            shim=shim,
            options="log_allocator_stats_on_signal",
            timeout=120,
        )
        assert (out.returncode, out.stdout) == (0, "OK\n"), out.stderr
        assert "Logging allocator stats" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give it up")
def test_set_id_reaches_the_helper(shim: Path) -> None:
    """glibc applies set*id() to every thread only when it knows there are
    several: the helper must not keep root when the program drops it."""
    assert run_ok(program("setid_helper.c"), shim=shim) == "OK\n"


def test_glibc_sees_the_programs_threads_only(shim: Path) -> None:
    """One thread while the program has one (the helper uncounted), several
    once the program starts one, and a set*id() call changes neither."""
    assert run_ok(program("single_flag.c"), shim=shim) == "OK\n"


FORK_RUNS = 3  # before the fixes, 2 runs in 3 hung and 1 in 3 had a child abort


@pytest.mark.parametrize(
    ("options", "args"),
    [("", ("2000",)), ("backtrace=16", ("2000",)), ("", ("200000", "stdio"))],
    ids=["forks", "forks-backtrace", "fclose"],
)
def test_fork_in_a_signal_handler_completes(shim: Path, options: str, args: tuple[str]) -> None:
    """glibc's fork is async-signal-safe while the process has one thread
    (glibc's tst-mallocfork2). A handler's fork that lands inside the
    shim's own fork handlers, its parent's unlocking or its child's
    resetting included, or inside fclose holding stdio's list lock, must
    not wait on locks its own thread holds; and the child must not touch
    glibc's heap, which the interrupted code may have left mid-update. The
    bound is generous: a run takes seconds."""
    exe = program("signal_fork.c")
    for _ in range(FORK_RUNS):
        try:
            result = run(exe, *args, shim=shim, options=options, timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("hung: a signal handler's fork waited on its own thread's locks")
        assert (result.returncode, result.stdout) == (0, "OK\n"), result.stderr


def test_a_handler_that_allocates_keeps_the_operation_it_interrupted(shim: Path) -> None:
    """A handler's malloc, calloc, realloc and free, landing while its thread
    is inside one of them in the shim's code, leave the slot as they found
    it: the op (and the blocks realloc names) still announced, as a scan
    that stops the thread after the handler must read it. They cleared it,
    and a scan took the rest of the outer call for the program's code."""
    out = run_ok(program("signal_nested.c"), "200", "60", shim=shim)
    hits, changed = (int(w) for w in out.split()[1::2])
    assert hits > 0, out
    assert changed == 0, out


def test_a_handler_that_allocates_inside_a_shard_loses_no_entry(shim: Path) -> None:
    """A handler's malloc and free landing while the thread's own call is
    inside a shard it owns (backtraces on: every block in a shard; a second
    thread: the shard owned, updated without the lock) leave every block
    the program holds registered. The nested call updated the same shard
    without the lock and the interrupted call then wrote over its entry."""
    out = run_ok(program("signal_shard.c"), "20000", "60", shim=shim, options="backtrace=16")
    hits, missing = (int(w) for w in out.split()[1::2])
    assert hits > 0, out
    assert missing == 0, out


@pytest.mark.parametrize("how", ["pthread_exit", "raw"])
def test_a_thread_ended_inside_realloc_is_waited_for_no_more(shim: Path, how: str) -> None:
    """A thread a signal handler ends while it is inside realloc leaves its
    slot announcing the call. With pthread_exit its exit clears it; with the
    raw exit system call (no destructor runs) malloc_disable, waiting out
    the threads inside the allocator, finds the thread gone and releases
    its slot. Both waited for ever."""
    out = run(program("exit_in_realloc.c"), how, "disable", shim=shim, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    dead, enabled = out.stdout.splitlines()
    if how == "pthread_exit":
        assert " op=0 " in dead, dead
    assert enabled == "ENABLED op=0 state=2", out.stdout


def test_a_handler_landing_as_its_thread_takes_a_shard_lock_waits_for_nothing(shim: Path) -> None:
    """A handler's free, landing while its own thread holds the lock of the
    block's shard, at any instruction of the hold (just after the lock was
    taken, or just before it is released), puts its update aside and
    returns. The lock named its holder in a second word, stored after the
    lock was taken and cleared before it was released: a handler landing
    between the two found the lock held by no one it knew and waited on its
    own thread for ever."""
    try:
        out = run(program("signal_lock.c"), "16", "60", shim=shim, options="backtrace=16")
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a handler's free waited on the shard lock its own thread holds")
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    assert out.stdout == "HITS 16 MISSING 0\n", out.stdout


def test_a_handlers_call_takes_no_backtrace(shim: Path) -> None:
    """With backtraces on, a handler's malloc landing while its thread is
    inside malloc or free is registered without a backtrace: the code it
    interrupted may be inside the unwinder. It took one."""
    out = run_ok(program("signal_backtrace.c"), "200", "60", shim=shim, options="backtrace=16")
    hits, found, captured = (int(w) for w in out.split()[1::2])
    assert hits > 0 and found > 0, out
    assert captured == 0, out


def test_a_handler_that_rebuilds_a_shard_while_its_thread_rebuilds_another_misplaces_nothing(
    shim: Path,
) -> None:
    """A handler's free landing while its own thread rebuilds a shard's
    table is put aside until the rebuild is published, even after the
    handler rebuilt another shard itself (a big block's first table): that
    rebuild applies only its own shard's updates and leaves the outer
    rebuild's mark in place. It applied the outer shard's removal to its
    own table, where it found nothing, and cleared the mark, so that the
    next free emptied an entry the outer rebuild had already copied: both
    blocks stayed registered after they were freed."""
    try:
        out = run(program("signal_rebuild.c"), "16", "60", shim=shim, options="backtrace=16")
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a handler's rebuild nested in its thread's rebuild")
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    hits, stale = (int(w) for w in out.stdout.split()[1::2])
    assert hits > 0, out.stdout
    assert stale == 0, out.stdout


def test_a_handler_that_frees_and_allocates_many_blocks_while_its_thread_rebuilds_loses_none(
    shim: Path,
) -> None:
    """A handler landing while its own thread rebuilds a shard frees 80
    blocks of that shard and allocates 80 more: every update is put aside
    until the rebuild is published. The list held 32; past them each update
    went straight to the table being copied, and a removal made after the
    rebuild had copied its entry was lost: 119-163 of the 1280 freed blocks
    stayed registered in each of three runs."""
    try:
        out = run(
            program("signal_rebuild.c"), "16", "60", "many", shim=shim, options="backtrace=16"
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a handler's many updates of the shard its thread rebuilds")
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    hits, stale, missing = (int(w) for w in out.stdout.split()[1::2])
    assert hits > 0, out.stdout
    assert (stale, missing) == (0, 0), out.stdout


def test_a_handlers_call_on_a_thread_without_a_shared_slot_is_nested(shim: Path) -> None:
    """On a thread started once every shared slot was taken, a handler's
    malloc landing inside the thread's own call is nested as on any other
    thread: registered without a backtrace, announced in the spare slot.
    The thread's only slot was the spare one, so the handler's call took a
    backtrace and cleared the interrupted call's announcement."""
    try:
        out = run(program("signal_unshared.c"), "200", "60", shim=shim, options="backtrace=16")
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a handler's call on a thread without a shared slot")
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    hits, found, captured = (int(w) for w in out.stdout.split()[1::2])
    assert hits > 0 and found > 0, out.stdout
    assert captured == 0, out.stdout


def test_a_handler_that_needs_the_shims_memory_while_its_thread_holds_it_goes_without(
    shim: Path,
) -> None:
    """A handler's malloc landing while its own thread holds the lock of the
    shim's memory (making a size map), whose block must go to a shard with
    no table yet, gets no table instead of waiting on its own thread for
    ever: its block goes unregistered and counted, so scans say their answer
    is not exact (a block whose shard has a table is registered there). It
    waited on the region's lock its thread held."""
    try:
        out = run(
            program("signal_region.c"),
            "16",
            "60",
            shim=shim,
            options="backtrace=4 backtrace_min_size=2097152",
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a handler's malloc waited on the region lock its own thread holds")
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    hits, missing, unregistered = (int(w) for w in out.stdout.split()[1::2])
    assert hits == 16, out.stdout
    assert missing == unregistered, out.stdout
    if unregistered:
        assert "a signal handler allocated while its thread was extending" in out.stderr


def _helper_cpu_and_sleeps(pid: int, tid: int) -> tuple[float, int]:
    """The thread's CPU time (s, schedstat: ns, not ticks) and how often it slept."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        cpu = int(f.read().split()[0]) / 1e9
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        sleeps = next(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))
    return cpu, sleeps


def _where(pid: int, tid: int) -> str:
    """Where a thread runs: its system call now, and its user stack (gdb)."""
    with open(f"/proc/{pid}/task/{tid}/syscall") as f:
        where = f"system call {f.read().strip()}"
    if shutil.which("gdb"):
        bt = subprocess.run(
            ["gdb", "-q", "-batch", "-p", str(pid), "-ex", "thread apply all bt"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        where += "\n" + bt.stdout
    return where


def test_the_helper_sleeps_while_a_call_it_waits_for_is_held(targets: TargetFactory) -> None:
    """The helper's request work first waits out the program's allocator
    calls in progress (ur_threads_wait_quiescent, as malloc_disable does).
    A thread held inside one (stopped by a debugger, a page fault that
    waits) kept the helper yielding in a loop, a core of the target's
    burnt for as long as it was held. It now sleeps between its looks:
    over 20 of its sleeps it takes a few ms of CPU, where the loop took
    half a second before sleeping once."""
    target = targets.start(PROGRAMS / "held_in_malloc.c", options="log_allocator_stats_on_signal")
    tid = wait_for_helper(target.pid)
    cpu0, sleeps0 = _helper_cpu_and_sleeps(target.pid, tid)
    os.kill(target.pid, signal.SIGRTMAX - 15)  # the stats request: the helper's work
    deadline = time.monotonic() + 60  # a guard against a hang, not a measure
    while True:
        cpu, sleeps = _helper_cpu_and_sleeps(target.pid, tid)
        if sleeps - sleeps0 >= 20 or cpu - cpu0 >= 0.5 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert cpu - cpu0 < 0.1, (
        f"the helper ran {cpu - cpu0:.3f} s of CPU and slept {sleeps - sleeps0} times"
        " while the program's thread was held inside malloc; it was at " + _where(target.pid, tid)
    )
    assert sleeps - sleeps0 >= 20
