"""unreachable-cli scan as a user runs it: output formats, exit codes, bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.targets import Target, wait_state, wait_untraced

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def cli(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, **kw)


def assert_one_line_error(res: subprocess.CompletedProcess[str], pattern: str) -> None:
    assert res.returncode == 2, res
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert re.search(pattern, lines[0]), lines[0]


def test_text_report(targets):
    target = targets.start(PROGRAMS / "graph.c")
    res = cli("scan", str(target.pid), "--contents")
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"  {target.int('leak_bytes')} bytes in 11 unreachable allocations"
    assert lines[1] == "  ABI: 'x86_64'"
    # largest total first: the tree root and the 4 blocks below it
    assert re.fullmatch(r"  132 bytes unreachable at [0-9a-f]+", lines[3]), lines[3]
    assert lines[4] == "   referencing 528 unreachable bytes in 4 allocations"
    assert lines[5] == "   first 32 bytes of contents:"
    rows = [line for line in lines if re.match(r"   [0-9a-f]+: ", line)]
    assert rows and all(len(r.split(": ", 1)[1]) == 16 * 3 + 16 for r in rows if len(r) > 60)


def test_json_report_schema(targets):
    target = targets.start(PROGRAMS / "alloc_funcs.c")
    res = cli("scan", str(target.pid), "--json", "--contents")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    for key in (
        "pid",
        "leak_count",
        "leak_bytes",
        "allocation_count",
        "allocation_bytes",
        "pause_ms",
        "hold_ms",
        "scan_ms",
        "leaks",
    ):
        assert key in doc
    assert doc["pid"] == target.pid
    assert doc["leak_count"] == 9 and doc["leak_bytes"] == target.int("leak_bytes")
    leak = doc["leaks"][0]
    for key in (
        "address",
        "size",
        "referenced_count",
        "referenced_size",
        "similar_count",
        "similar_size",
        "total_size",
        "contents_hex",
        "backtrace",
    ):
        assert key in leak
    assert doc["pause_ms"] >= 0 and doc["scan_ms"] >= doc["pause_ms"]
    # The hold is the pause from its last thread stopped: part of it.
    assert 0 < doc["hold_ms"] <= doc["pause_ms"]


def test_no_leaks_exit_zero(targets):
    target = targets.start(PROGRAMS / "many.c", "1000", "0")
    res = cli("scan", str(target.pid), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["leak_count"] == 0


def test_backtraces_name_the_allocating_function(targets):
    target = targets.start(PROGRAMS / "globals.c", options="backtrace=16")
    res = cli("scan", str(target.pid), "--json")
    doc = json.loads(res.stdout)
    frames = doc["leaks"][0]["backtrace"]
    assert frames, doc
    assert frames[0]["function"] == "setup", frames[0]
    assert frames[0]["map"].endswith(target.proc.args[0].rsplit("/", 1)[1])
    assert any(f["function"] == "main" for f in frames)
    assert any(f["function"] == "setup" for f in frames)


def test_pid_that_does_not_exist():
    assert_one_line_error(cli("scan", "4194000"), r"no process with pid 4194000")


def test_not_a_pid():
    res = cli("scan", "abc")
    assert res.returncode == 2 and "not a pid" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_bad_mark_threads(targets, value):
    target = targets.start(PROGRAMS / "many.c", "1000", "10")
    res = cli("scan", str(target.pid), "--mark-threads", value)
    assert res.returncode == 2 and "--mark-threads" in res.stderr, res
    assert "Traceback" not in res.stderr
    assert target.alive() and target.tracer() == 0


@pytest.mark.parametrize("value", ["0", "-3", "ten", "inf"])
def test_bad_max_pause(targets, value):
    target = targets.start(PROGRAMS / "many.c", "1000", "10")
    res = cli("scan", str(target.pid), f"--max-pause={value}")
    assert res.returncode == 2 and "--max-pause" in res.stderr, res
    assert "Traceback" not in res.stderr
    assert target.alive() and target.tracer() == 0


def test_a_max_pause_no_snapshot_meets_is_said(targets):
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    res = cli("scan", str(target.pid), "--json", "--max-pause", "0.000001")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["leak_count"] == 5000
    assert "more than --max-pause 1e-06 ms" in doc["snapshot_note"], doc["snapshot_note"]
    res = cli("scan", str(target.pid), "--json", "--max-pause", "10000")
    doc = json.loads(res.stdout)
    assert (doc["leak_count"], doc["snapshot"], doc["snapshot_note"]) == (5000, "fork", "")
    assert target.alive() and target.tracer() == 0


def test_mark_threads(targets):
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    res = cli("scan", str(target.pid), "--json", "--mark-threads", "3")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["leak_count"], doc["sweep"]) == (5000, "child")


def test_target_without_shim(targets):
    """Its glibc heap is walked (docs/glibc-heap.md); what needs the shim's
    helper thread is refused with one line that says what to drop, exit 2,
    the target left as found."""
    target = targets.start(PROGRAMS / "globals.c", preload=False)
    res = cli("scan", str(target.pid), "--json")
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["allocations"] == "glibc heap"
    for snapshot in ("fork", "copy"):
        refused = cli("scan", str(target.pid), "--snapshot", snapshot)
        assert_one_line_error(
            refused,
            rf"pid {target.pid} runs without the unreachable shim, and --snapshot {snapshot}"
            r" needs the shim's helper thread: drop --snapshot \(without the shim the scan"
            r" makes a copy-on-write snapshot of its own",
        )
    assert target.alive() and target.tracer() == 0


def test_pid_1_and_kernel_thread():
    assert_one_line_error(cli("scan", "1"), r"pid 1[ :].*|not running under the unreachable shim")
    kthreadd = 2
    if Path(f"/proc/{kthreadd}/status").exists():
        assert_one_line_error(cli("scan", str(kthreadd)), r"kernel thread")


def test_own_pid():
    from unreachable.errors import TargetUnscannable
    from unreachable.scan import scan

    with pytest.raises(TargetUnscannable, match="scanner itself"):
        scan(os.getpid())


def test_zombie(targets, tmp_path):
    # A child that exits without being reaped stays a zombie until we wait.
    proc = subprocess.Popen(["true"])
    wait_state(Target(proc), "Z")
    try:
        assert_one_line_error(cli("scan", str(proc.pid)), r"zombie")
    finally:
        proc.wait()


def test_already_traced(targets):
    target = targets.start(PROGRAMS / "globals.c")
    # A tracer process that seizes the target and holds it.
    tracer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes,sys,time;libc=ctypes.CDLL(None,use_errno=True);"
            f"r=libc.ptrace(0x4206,{target.pid},0,0);print(r,flush=True);time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert tracer.stdout.readline().strip() == "0"
        assert_one_line_error(cli("scan", str(target.pid)), r"already traced by pid")
    finally:
        tracer.kill()
        tracer.wait()
    wait_untraced(target)
    assert target.alive()


def test_no_permission(targets):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    target = targets.start(PROGRAMS / "globals.c")
    # The interpreter may live where another user cannot exec it, so drop
    # privileges in a forked child that already runs Python, modules loaded
    # (the CLI imports a command's modules only once it is given: load them
    # here, as that user may not read the standard library either).
    import unreachable.cli.scan
    import unreachable.report.pprof
    import unreachable.scan.run  # noqa: F401
    from unreachable.cli.main import main

    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        sys.stderr = os.fdopen(write_end, "w")  # pytest replaced the real one
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        rc = main(["scan", str(target.pid)])
        sys.stderr.flush()
        os._exit(rc)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        err = f.read()
    _, status = os.waitpid(child, 0)
    res = subprocess.CompletedProcess([], os.waitstatus_to_exitcode(status), "", err)
    assert_one_line_error(res, r"permission")
    assert target.alive() and target.tracer() == 0


def test_target_killed_mid_scan(targets):
    target = targets.start(PROGRAMS / "many.c", "300000", "300000")
    scanner = subprocess.Popen(
        [*CLI, "scan", str(target.pid), "--snapshot", "stopped"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while scanner.poll() is None and target.tracer() == 0:
        time.sleep(0.001)
    os.kill(target.pid, signal.SIGKILL)
    out, err = scanner.communicate(timeout=60)
    assert "Traceback" not in err
    if scanner.returncode == 2:
        assert len(err.strip().splitlines()) == 1 and "exited" in err, err
    else:
        assert scanner.returncode in (0, 1)


def test_scanner_killed_while_target_stopped(targets):
    target = targets.start(PROGRAMS / "many.c", "400000", "400000")
    scanner = subprocess.Popen(
        [*CLI, "scan", str(target.pid), "--snapshot", "stopped"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while target.tracer() == 0 and time.monotonic() < deadline and scanner.poll() is None:
        time.sleep(0.0005)
    os.kill(scanner.pid, signal.SIGKILL)
    scanner.wait()
    wait_untraced(target)
    wait_state(target, "SR")
    # the target still answers: closing stdin makes it exit normally
    target.proc.stdin.close()
    assert target.proc.wait(timeout=10) == 0


def test_signal_during_capture_is_delivered_after(targets):
    target = targets.start(PROGRAMS / "signal_target.c")
    scanner = subprocess.Popen(
        [*CLI, "scan", str(target.pid), "--snapshot", "stopped"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while target.tracer() == 0 and time.monotonic() < deadline and scanner.poll() is None:
        time.sleep(0.0005)
    os.kill(target.pid, signal.SIGUSR1)
    scanner.wait(timeout=60)
    assert target.read_line() == "SIGUSR1"


def test_user_stopped_target_stays_stopped(targets):
    target = targets.start(PROGRAMS / "globals.c")
    os.kill(target.pid, signal.SIGSTOP)
    wait_state(target, "T")
    res = cli("scan", str(target.pid), "--json")
    assert res.returncode == 1, res.stderr
    # The scanner has exited: nothing traces it, and it is back in its group stop.
    assert target.tracer() == 0
    wait_state(target, "T")
    os.kill(target.pid, signal.SIGCONT)


def test_target_in_secure_execution_mode_is_told_why(tmp_path):
    """LD_PRELOAD given, and dropped by the loader: the error says why."""
    from tests.support.setid import setgid_sleep

    exe = setgid_sleep(tmp_path)
    _assert_secure_scan_error(
        [str(exe), "30"],
        None,
        r"not running under the unreachable shim: .*secure-exec.*set-group-ID; run a copy",
    )


def _assert_secure_scan_error(
    argv: list[str], preexec: Callable[[], None] | None, pattern: str
) -> None:
    """Starts argv under the shim (preexec before its exec), waits until it
    runs in secure-execution mode, and checks the scan's one-line error."""
    from unreachable._paths import shim_path
    from unreachable.process.secure_exec import runs_secure

    env = dict(os.environ, LD_PRELOAD=str(shim_path()))
    proc = subprocess.Popen(argv, env=env, preexec_fn=preexec)
    try:
        deadline = time.monotonic() + 10
        while not runs_secure(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the exec is done
        assert_one_line_error(cli("scan", str(proc.pid)), pattern)
    finally:
        proc.kill()
        proc.wait()


def test_target_exec_ed_with_ids_that_differ_is_told_why():
    """squid's master, root with its real uid the proxy user's, execs its
    kids in secure-execution mode from a plain program: the error must not
    send the user looking for set-ID bits the program does not have."""

    if os.getuid() != 0:
        pytest.skip("exec'ing with a real uid other than the effective one takes root")
    sleep = shutil.which("sleep") or "/bin/sleep"
    _assert_secure_scan_error(
        [sleep, "30"],
        lambda: os.setresuid(65534, 0, 0),
        r"secure-execution mode.*: it was exec'ed with real and effective user or group IDs"
        r" that differ",
    )
