"""Scans of core files (unreachable/scan/core.py, capture/core_file.py):
gdb's gcore of a scenario program gives the live scan's answer, under the
shim (its registry and backtraces) and without it (glibc's heap walked over
the core); what is not a readable core gets one line and exit status 2."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.renamed_shim import start_renamed
from tests.support.targets import Target, wait_for_helper
from unreachable.capture.core_file import open_core
from unreachable.scan import ScanOptions, scan
from unreachable.scan.run import scan_core

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]

pytestmark = pytest.mark.skipif(not shutil.which("gcore"), reason="gdb's gcore is not installed")

# Programs whose roots a core holds whole. Left out: those kept alive by
# what the kernel holds (epoll data, timers, queued signals, pipe bytes),
# which no core records (docs/cli.md).
SCENARIOS = [
    "globals.c",
    "main_stack.c",
    "thread_stack.c",
    "registers.c",
    "tls.c",
    "mmap_page.c",
    "interior.c",
    "big_block.c",
    "exited_thread.c",
    "jit_code.c",
    "arena_heap.c",
]


def _gcore(pid: int, directory: Path) -> Path:
    prefix = directory / "core"
    res = subprocess.run(
        ["gcore", "-o", str(prefix), str(pid)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return Path(f"{prefix}.{pid}")


def _leaks(report) -> dict[int, tuple[int, list[str]]]:  # noqa: ANN001
    return {
        e.address: (e.size, [f"{f.map}:{f.function}" for f in e.backtrace]) for e in report.leaks
    }


@pytest.mark.parametrize("program", SCENARIOS)
def test_core_of_a_shimmed_process(targets, tmp_path, program):
    target = targets.start(PROGRAMS / program, options="backtrace=16")
    live = scan(target.pid, ScanOptions())
    assert live.leak_count == target.int("leak_count")
    core = _gcore(target.pid, tmp_path)
    report = scan_core(str(core))
    assert (report.leak_count, report.leak_bytes) == (live.leak_count, live.leak_bytes)
    assert (report.snapshot, report.allocations) == ("core", "shim registry")
    assert _leaks(report) == _leaks(live)
    assert all(e.backtrace for e in report.leaks)
    assert report.pid == target.pid and report.allocation_count == live.allocation_count


@pytest.mark.parametrize("program", SCENARIOS)
def test_core_of_a_process_without_the_shim(targets, tmp_path, program):
    target = targets.start(PROGRAMS / program, preload=False, wait_helper=False)
    live = scan(target.pid, ScanOptions())
    assert live.allocations == "glibc heap"
    core = _gcore(target.pid, tmp_path)
    report = scan_core(str(core))
    assert (report.leak_count, report.leak_bytes) == (live.leak_count, live.leak_bytes)
    assert (report.snapshot, report.allocations) == ("core", "glibc heap")
    assert _leaks(report) == _leaks(live)


def test_core_of_a_process_under_a_renamed_shim(targets, tmp_path, shim):
    """A core keeps no environment to say what was preloaded: the shim under
    another name is found by its descriptor among the files mapped, and the
    core is read through its registry, backtraces and all (it was swept as
    a process without the shim, glibc's heap walked)."""
    target, _ = start_renamed(targets, shim, tmp_path, PROGRAMS / "globals.c", "backtrace=16")
    report = scan_core(str(_gcore(target.pid, tmp_path)))
    assert (report.snapshot, report.allocations) == ("core", "shim registry")
    assert report.leak_count == target.int("leak_count") > 0
    assert all(e.backtrace for e in report.leaks)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_cli_scans_a_core_and_names_what_it_left_out(targets, tmp_path):
    """gcore leaves read-only file mappings out: they are read from the
    files, and the report says so. An --exe that is not the program mapped
    is not read for it: its pages are named missing, its frames stay raw."""
    target = targets.start(PROGRAMS / "globals.c", options="backtrace=16")
    core = _gcore(target.pid, tmp_path)
    res = _cli("scan", "--core", str(core), "--json")
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert report["leak_count"] == 1 and report["snapshot"] == "core"
    assert "read from the mapped files" in report["snapshot_note"]
    assert "missing" not in report["snapshot_note"]
    res = _cli("scan", "--core", str(core), "--exe", "/bin/true")
    assert res.returncode == 1, res.stderr
    note = next(line for line in res.stdout.splitlines() if "core file:" in line)
    assert "missing from the core" in note and "globals" in note, note
    # Nor is it read for symbols: the program's own frames stay raw.
    assert "globals-" in res.stdout and "(not the file mapped)" in res.stdout
    assert "(setup+" not in res.stdout


def test_truncated_core_gets_one_line(targets, tmp_path):
    target = targets.start(PROGRAMS / "globals.c", preload=False, wait_helper=False)
    core = _gcore(target.pid, tmp_path)
    data = core.read_bytes()
    for cut in (40, len(data) // 2, len(data) - 1):
        short = tmp_path / f"short{cut}"
        short.write_bytes(data[:cut])
        res = _cli("scan", "--core", str(short))
        assert res.returncode == 2, res.stdout
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "truncated" in lines[0], lines


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "text", "not an ELF core file"),
        (lambda d: Path("/bin/true"), "not an x86-64 core"),
        (lambda d: d / "absent", "cannot open core file"),
    ],
)
def test_what_is_not_a_core_gets_one_line(tmp_path, make, says):
    (tmp_path / "text").write_text("not a core\n")
    res = _cli("scan", "--core", str(make(tmp_path)))
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines


@pytest.mark.parametrize(
    "args",
    [[], ["1", "--core", "/bin/true"], ["1", "--exe", "/bin/true"], ["--sysroot", "/"]],
)
def test_pid_or_core(args):
    res = _cli("scan", *args)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def _kernel_dumps_here() -> str:
    """Why the kernel's own cores cannot be had here ("" if they can): its
    core_pattern must name a file in the dying process's directory."""
    try:
        with open("/proc/sys/kernel/core_pattern") as f:
            pattern = f.read().strip()
    except OSError as e:
        return str(e)
    if not pattern or pattern.startswith("|") or "/" in pattern:
        return f"kernel.core_pattern is {pattern!r}, not a file in the process's directory"
    return ""


def _dumps_into(directory: Path) -> Callable[[], None]:
    def setup() -> None:
        os.chdir(directory)
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2)
        # A shell that starts the tests in the background ignores SIGQUIT,
        # and an ignored signal stays ignored across exec: the dump's SIGQUIT
        # would then not end the target.
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)

    return setup


def _kernel_core(target, directory: Path, dump_filter: str = "0x33") -> Path:  # noqa: ANN001
    with open(f"/proc/{target.pid}/coredump_filter", "w") as f:
        f.write(dump_filter)
    os.kill(target.pid, signal.SIGQUIT)
    assert target.proc.wait(timeout=60) == -signal.SIGQUIT
    (core,) = [p for p in directory.iterdir() if p.name.startswith("core")]
    return core


@pytest.mark.skipif(bool(_kernel_dumps_here()), reason=_kernel_dumps_here())
@pytest.mark.parametrize("shimmed", [True, False])
@pytest.mark.parametrize("program", ["globals.c", "exited_thread.c", "thread_stack.c"])
def test_kernel_core(targets, tmp_path, program, shimmed):
    """The kernel's core (coredumpctl dump gives the same file): it leaves
    the read-only file pages out with no bytes (filesz 0), and lists the
    guard pages gdb leaves out."""
    kw = {"options": "backtrace=16"} if shimmed else {"preload": False, "wait_helper": False}
    target = targets.start(PROGRAMS / program, preexec=_dumps_into(tmp_path), **kw)
    live = scan(target.pid, ScanOptions())
    report = scan_core(str(_kernel_core(target, tmp_path)))
    assert (report.leak_count, report.leak_bytes) == (live.leak_count, live.leak_bytes)
    assert _leaks(report) == _leaks(live)
    assert report.allocations == live.allocations
    assert "read from the mapped files" in report.snapshot_note


@pytest.mark.skipif(bool(_kernel_dumps_here()), reason=_kernel_dumps_here())
@pytest.mark.parametrize("shimmed", [True, False])
def test_core_without_the_heap_gets_one_line(targets, tmp_path, shimmed):
    """coredump_filter 0 leaves every written page out: what the scan starts
    from (the shim's descriptor, glibc's main_arena) is missing, and the
    file's pages would not be what the process wrote."""
    kw = {} if shimmed else {"preload": False, "wait_helper": False}
    target = targets.start(PROGRAMS / "globals.c", preexec=_dumps_into(tmp_path), **kw)
    core = _kernel_core(target, tmp_path, "0")
    res = _cli("scan", "--core", str(core))
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "left out of the core" in lines[0], lines


def _functions(report) -> dict[int, list[str]]:  # noqa: ANN001
    return {e.address: [f.function for f in e.backtrace] for e in report.leaks}


def _sysroot_of(core: Path, sysroot: Path) -> None:
    """Copies of every file the core names, under sysroot."""
    opened = open_core(str(core))
    try:
        for m in opened.mappings:
            if m.path.startswith("/") and os.path.exists(m.path):
                copy = Path(f"{sysroot}{m.path}")
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(m.path, copy)
    finally:
        opened.close()


@pytest.mark.parametrize("shimmed", [True, False])
def test_core_with_another_build_of_the_allocator_gets_one_line(targets, tmp_path, shimmed):
    """A --sysroot whose shim (or libc) is not the one the process ran: its
    symbols would put the registry (or main_arena) elsewhere."""
    kw = {} if shimmed else {"preload": False, "wait_helper": False}
    target = targets.start(PROGRAMS / "globals.c", **kw)
    core = _gcore(target.pid, tmp_path)
    sysroot = tmp_path / "sysroot"
    _sysroot_of(core, sysroot)
    name = "libunreachable_shim" if shimmed else "libc.so"
    (other,) = {p for p in sysroot.rglob(f"{name}*") if p.is_file()}
    shutil.copy2(build(PROGRAMS / "globals.c"), other)
    res = _cli("scan", "--core", str(core), "--sysroot", str(sysroot))
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not the" in lines[0] and str(other) in lines[0], lines


@pytest.mark.parametrize("how", ["sysroot", "exe"])
def test_core_whose_files_moved(shim, tmp_path, how):
    """The program ran from a directory that is gone: --sysroot DIR (every
    file the core names, under DIR) or --exe PATH (the program alone) finds
    its files, and its own frames are symbolized from them."""
    ran = tmp_path / "ran" / "globals"
    ran.parent.mkdir()
    shutil.copy2(build(PROGRAMS / "globals.c"), ran)
    env = dict(os.environ, LD_PRELOAD=str(shim), UNREACHABLE_MALLOC_OPTIONS="backtrace=16")
    proc = subprocess.Popen([str(ran)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    target = Target(proc)
    try:
        while not target.read_line().startswith("READY"):
            pass
        wait_for_helper(target.pid)
        live = scan(target.pid, ScanOptions())
        core = _gcore(target.pid, tmp_path)
    finally:
        target.stop()
    if how == "sysroot":
        sysroot = tmp_path / "sysroot"
        _sysroot_of(core, sysroot)
        args: dict[str, str] = {"sysroot": str(sysroot)}
    else:
        args = {"exe": str(tmp_path / "moved")}
        shutil.copy2(ran, args["exe"])
    shutil.rmtree(ran.parent)
    report = scan_core(str(core), **args)
    assert (report.leak_count, report.leak_bytes) == (live.leak_count, live.leak_bytes)
    assert _functions(report) == _functions(live)
    assert "setup" in next(iter(_functions(report).values()))
    assert "missing" not in report.snapshot_note
    # Without them the program's read-only pages are missing, and named.
    report = scan_core(str(core))
    assert "missing from the core and unreadable:" in report.snapshot_note
    assert str(ran) in report.snapshot_note


@pytest.mark.parametrize("dumper", ["gcore", "kernel"])
def test_core_of_threads_churning_malloc(targets, tmp_path, dumper):
    """Four threads in malloc, realloc and free when the core is written:
    exactly the 5 dropped blocks, or one line saying the heap was
    mid-update; never a leak made up from a half-updated heap."""
    if dumper == "kernel" and _kernel_dumps_here():
        pytest.skip(_kernel_dumps_here())
    answers = set()
    # gdb writes each arena's untouched reservation out whole (300 MB): once.
    for i in range(1 if dumper == "gcore" else 5):
        directory = tmp_path / str(i)
        directory.mkdir()
        target = targets.start(
            PROGRAMS / "churn.c", preload=False, wait_helper=False, preexec=_dumps_into(directory)
        )
        core = (
            _gcore(target.pid, directory) if dumper == "gcore" else _kernel_core(target, directory)
        )
        res = _cli("scan", "--core", str(core), "--json")
        if res.returncode == 2:
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "mid-update" in lines[0], lines
            answers.add("mid-update")
            continue
        assert res.returncode == 1, res.stderr
        report = json.loads(res.stdout)
        assert report["leak_count"] == 5, report["leaks"]
        assert 5010 <= report["leak_bytes"] <= 5010 + 5 * 24
        answers.add("exact")
    assert answers
