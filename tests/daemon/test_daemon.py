"""unreachabled end to end: a real daemon, real shimmed targets, real clients."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.daemon.conftest import WatchThread
from tests.support.cbuild import build
from tests.support.tracking import copy_unsupported, wait_untracked
from unreachable.capture.target import open_target
from unreachable.errors import ScanError, TargetNotShimmed
from unreachable.heapdump.dump_format import parse_dump
from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
NOTIFY_CLIENT = Path(__file__).parent / "programs" / "notify_client.c"
BIG_HEAP = Path(__file__).parent / "programs" / "big_heap.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
RPC_TIMEOUT = 120.0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180)


def stub(address: str) -> pb_grpc.UnreachableStub:
    return pb_grpc.UnreachableStub(grpc.insecure_channel(address))


def tls_channel(daemon, certs, *, ca=None, cert=None, key=None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=Path(ca or certs.ca).read_bytes(),
        private_key=Path(key).read_bytes() if key else None,
        certificate_chain=Path(cert).read_bytes() if cert else None,
    )
    return grpc.secure_channel(f"127.0.0.1:{daemon.tcp_port}", creds)


def scan_events(s: pb_grpc.UnreachableStub, **request) -> list[pb.ScanEvent]:
    return list(s.Scan(pb.ScanRequest(**request), timeout=RPC_TIMEOUT))


def scan_report(s: pb_grpc.UnreachableStub, **request) -> pb.ScanReport:
    events = scan_events(s, **request)
    assert events[-1].HasField("report"), events
    return events[-1].report


def rpc_code(fn, *args, **kw) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        result = fn(*args, **kw)
        if hasattr(result, "__iter__") and not isinstance(result, (bytes, str)):
            list(result)
    return info.value.code(), info.value.details()


def embedded(pid: int) -> dict:
    res = cli("scan", str(pid), "--json")
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)


def leak_set(leaks) -> list[tuple[int, int]]:
    return sorted(
        (leak["address"], leak["size"]) if isinstance(leak, dict) else (leak.address, leak.size)
        for leak in leaks
    )


def wait_untraced(pid: int, timeout: float = 20.0) -> str:
    """The target's state once no tracer holds it (fails after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        tracer = int(fields["TracerPid"])
        state = fields["State"].strip()[:1]
        if tracer == 0 and state not in ("t", "T"):
            return state
        assert time.monotonic() < deadline, f"pid {pid} still traced by {tracer} ({state})"
        time.sleep(0.05)


# --- the service ----------------------------------------------------------


def test_unix_socket_mode(daemon):
    mode = os.stat(daemon.socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o660
    assert stat.S_IMODE(os.stat(daemon.notify_socket).st_mode) == 0o666


def test_health_serving(daemon):
    channel = grpc.insecure_channel(daemon.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "unreachable.v1.Unreachable"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_service(daemon):
    channel = grpc.insecure_channel(daemon.address)
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
    )
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert "unreachable.v1.Unreachable" in names
    assert "grpc.health.v1.Health" in names


def test_scan_equals_embedded(daemon, targets):
    target = targets.start(PROGRAMS / "globals.c")
    events = scan_events(stub(daemon.address), pid=target.pid)
    stages = [e.progress.stage_name for e in events if e.HasField("progress")]
    assert stages[0] == "started" and stages[-1] == "done", stages
    assert stages.index("captured") < stages.index("marked") < stages.index("folded")
    report = events[-1].report
    assert report.pid == target.pid
    assert report.leak_count == target.int("leak_count") == 1
    assert report.leak_bytes == target.int("leak_bytes") == 300
    local = embedded(target.pid)
    assert (report.leak_count, report.leak_bytes) == (local["leak_count"], local["leak_bytes"])
    assert report.allocation_count == local["allocation_count"]
    assert leak_set(report.leaks) == leak_set(local["leaks"])
    assert not any(leak.HasField("contents") for leak in report.leaks)
    assert target.alive() and target.tracer() == 0


def test_cli_remote_prints_what_embedded_prints(daemon, targets):
    target = targets.start(PROGRAMS / "graph.c")
    # Over --remote the text report shows no leak's bytes unasked.
    local = cli("scan", str(target.pid), "--no-contents")
    remote = cli("scan", str(target.pid), "--remote", daemon.address)
    assert local.returncode == remote.returncode == 1, remote.stderr
    assert remote.stdout == local.stdout
    assert remote.stderr == local.stderr == ""

    local = cli("scan", str(target.pid), "--json", "--limit", "2")
    remote = cli("scan", str(target.pid), "--json", "--limit", "2", "--remote", daemon.address)
    assert local.returncode == remote.returncode == 1, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    for doc in (a, b):
        doc.pop("pause_ms"), doc.pop("hold_ms"), doc.pop("scan_ms")
    assert a == b
    assert len(b["leaks"]) == 2


def test_daemon_mark_threads_unless_the_request_names_its_own(daemons, targets):
    d = daemons.start("--mark-threads", "1", "--log-level", "DEBUG")
    target = targets.start(PROGRAMS / "graph.c")
    for asked, used in [(0, 1), (3, 3)]:
        request = pb.ScanRequest(pid=target.pid, mark_threads=asked)
        events = list(stub(d.address).Scan(request, timeout=RPC_TIMEOUT))
        assert events[-1].report.leak_count > 0
        d.wait_for_log(rf'running the worker: .*"pid": {target.pid}, .*"mark_threads": {used}\b')


@pytest.mark.skipif(os.geteuid() != 0, reason="reading seccomp filters takes CAP_SYS_ADMIN")
def test_cli_remote_reports_why_it_swept_stopped(daemon, targets):
    target = targets.start(PROGRAMS / "seccomp_filter.c", "kill-clone")
    # A stopped-mode scan reads whole 1 MiB chunks, mapping the zero page
    # into untouched pages it passes: the first scan changes how many root
    # pages the next one finds present. Compare two that come after it.
    assert cli("scan", str(target.pid), "--json").returncode == 1
    local = cli("scan", str(target.pid), "--json")
    remote = cli("scan", str(target.pid), "--json", "--remote", daemon.address)
    assert local.returncode == remote.returncode == 1, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    for doc in (a, b):
        doc.pop("pause_ms"), doc.pop("hold_ms"), doc.pop("scan_ms")
    assert a == b
    assert b["snapshot"] == "stopped" and "seccomp" in b["snapshot_note"]


def test_cli_remote_passes_sweep_and_mark_threads(daemon, targets):
    target = targets.start(PROGRAMS / "graph.c")
    for flags, sweep in [(["--sweep", "scanner"], "scanner"), (["--mark-threads", "3"], "child")]:
        res = cli("scan", str(target.pid), "--json", *flags, "--remote", daemon.address)
        assert res.returncode == 1, res.stderr
        assert json.loads(res.stdout)["sweep"] == sweep


def test_cli_remote_over_mtls(tls_daemon, certs, targets):
    target = targets.start(PROGRAMS / "globals.c")
    tls = ["--tls-ca", str(certs.ca), "--tls-cert", str(certs.client_cert)]
    tls += ["--tls-key", str(certs.client_key)]
    remote = cli("scan", str(target.pid), "--remote", f"127.0.0.1:{tls_daemon.tcp_port}", *tls)
    local = cli("scan", str(target.pid), "--no-contents")  # none unasked over --remote
    assert remote.returncode == local.returncode == 1, remote.stderr
    assert remote.stdout == local.stdout
    assert "300 bytes in 1 unreachable allocation" in remote.stdout


def test_mtls_scan_and_refusals(tls_daemon, certs, targets):
    target = targets.start(PROGRAMS / "globals.c")
    good = tls_channel(tls_daemon, certs, cert=certs.client_cert, key=certs.client_key)
    report = scan_report(pb_grpc.UnreachableStub(good), pid=target.pid)
    assert (report.leak_count, report.leak_bytes) == (1, 300)

    # No client certificate: the handshake fails.
    bare = tls_channel(tls_daemon, certs)
    code, _ = rpc_code(
        pb_grpc.UnreachableStub(bare).ListTargets, pb.ListTargetsRequest(), timeout=10
    )
    assert code == grpc.StatusCode.UNAVAILABLE
    # A client certificate from another CA.
    rogue = tls_channel(tls_daemon, certs, cert=certs.rogue_cert, key=certs.rogue_key)
    code, _ = rpc_code(
        pb_grpc.UnreachableStub(rogue).ListTargets, pb.ListTargetsRequest(), timeout=10
    )
    assert code == grpc.StatusCode.UNAVAILABLE
    # The client trusts another CA: the server's certificate is refused.
    wrong = tls_channel(
        tls_daemon, certs, ca=certs.other_ca, cert=certs.client_cert, key=certs.client_key
    )
    code, _ = rpc_code(
        pb_grpc.UnreachableStub(wrong).ListTargets, pb.ListTargetsRequest(), timeout=10
    )
    assert code == grpc.StatusCode.UNAVAILABLE
    # Plaintext to the TLS port.
    plain = grpc.insecure_channel(f"127.0.0.1:{tls_daemon.tcp_port}")
    code, _ = rpc_code(
        pb_grpc.UnreachableStub(plain).ListTargets, pb.ListTargetsRequest(), timeout=10
    )
    assert code == grpc.StatusCode.UNAVAILABLE
    assert target.alive() and target.tracer() == 0


def test_cli_without_client_cert_fails_cleanly(tls_daemon, certs, targets):
    res = cli(
        "scan", "1", "--remote", f"127.0.0.1:{tls_daemon.tcp_port}", "--tls-ca", str(certs.ca)
    )
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.startswith("unreachable-cli: error: cannot reach unreachabled at")
    assert len(res.stderr.strip().splitlines()) == 1


def _wait_inert(pid: int, timeout: float = 20.0) -> None:
    """Until the process runs under a shim that refused its options."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            open_target(pid)
        except TargetNotShimmed as e:
            if "inert" in str(e):
                return
        except ScanError:
            pass  # not exec'ed yet
        assert time.monotonic() < deadline, f"pid {pid} never loaded its shim"
        time.sleep(0.002)


def test_cli_targets_lists_the_same_here_and_through_the_daemon(daemon, targets):
    with_options = targets.start(PROGRAMS / "globals.c", options="backtrace=4")
    inert = targets.start(PROGRAMS / "globals.c", options="no_such_option", wait_ready=False)
    without_shim = targets.start(PROGRAMS / "globals.c", preload=False)
    _wait_inert(inert.pid)  # it prints no READY line
    local = cli("targets", "--json")
    remote = cli("targets", "--json", "--remote", daemon.address)
    assert local.returncode == remote.returncode == 0, remote.stderr
    here, there = json.loads(local.stdout), json.loads(remote.stdout)
    mine = {with_options.pid, inert.pid, without_shim.pid}
    here = [t for t in here if t["pid"] in mine]
    assert here == [t for t in there if t["pid"] in mine]
    by_pid = {t["pid"]: t for t in here}
    assert without_shim.pid not in by_pid
    assert by_pid[with_options.pid]["options"] == "backtrace=4"
    assert by_pid[with_options.pid]["enabled"] is True
    assert by_pid[inert.pid]["enabled"] is False
    table = cli("targets").stdout.splitlines()
    assert table[0].split() == ["PID", "NAME", "SHIM", "OPTIONS", "COMMAND"]
    row = next(line.split() for line in table if line.split()[0] == str(with_options.pid))
    assert row[2:4] == ["active", "backtrace=4"]
    assert with_options.alive() and with_options.tracer() == 0


def test_contents_policy(daemons, targets):
    target = targets.start(PROGRAMS / "globals.c")
    strict = daemons.start()
    code, details = rpc_code(
        stub(strict.address).Scan, pb.ScanRequest(pid=target.pid, contents=True), timeout=30
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "contents" in details
    code, _ = rpc_code(stub(strict.address).Watch, pb.WatchRequest(contents=True), timeout=30)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    res = cli("scan", str(target.pid), "--contents", "--remote", strict.address)
    assert res.returncode == 2 and res.stdout == ""
    assert "contents are not allowed" in res.stderr

    lax = daemons.start("--allow-contents")
    report = scan_report(stub(lax.address), pid=target.pid, contents=True)
    assert [leak.HasField("contents") for leak in report.leaks] == [True]
    local = cli("scan", str(target.pid), "--contents")
    remote = cli("scan", str(target.pid), "--contents", "--remote", lax.address)
    assert remote.returncode == local.returncode == 1
    assert remote.stdout == local.stdout


def test_pid_gone_is_not_found(daemon):
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=10)
    code, details = rpc_code(stub(daemon.address).Scan, pb.ScanRequest(pid=proc.pid), timeout=60)
    assert code == grpc.StatusCode.NOT_FOUND, details
    assert str(proc.pid) in details
    local = cli("scan", str(proc.pid))
    remote = cli("scan", str(proc.pid), "--remote", daemon.address)
    assert remote.returncode == local.returncode == 2
    assert remote.stderr == local.stderr
    code, _ = rpc_code(stub(daemon.address).HeapDump, pb.HeapDumpRequest(pid=proc.pid), timeout=60)
    assert code == grpc.StatusCode.NOT_FOUND


def test_target_without_shim(daemon, targets):
    """Its glibc heap is walked (docs/glibc-heap.md); a snapshot that needs
    the shim's helper thread is a failed precondition."""
    target = targets.start(PROGRAMS / "globals.c", preload=False)
    report = scan_report(stub(daemon.address), pid=target.pid)
    assert report.leak_count == 1
    assert report.allocations == "glibc heap"
    fork = pb.ScanRequest(pid=target.pid, snapshot=pb.SNAPSHOT_FORK)
    code, details = rpc_code(stub(daemon.address).Scan, fork, timeout=60)
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert "shim" in details
    assert target.alive() and target.tracer() == 0


def test_invalid_arguments(daemon):
    code, _ = rpc_code(stub(daemon.address).Scan, pb.ScanRequest(pid=0), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = rpc_code(stub(daemon.address).Scan, pb.ScanRequest(pid=1, snapshot=7), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = rpc_code(stub(daemon.address).Scan, pb.ScanRequest(pid=1, sweep=9), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, details = rpc_code(
        stub(daemon.address).Scan, pb.ScanRequest(pid=1, mark_threads=17), timeout=10
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "mark_threads" in details


def cancel_after(daemon, target, stage: str, snapshot: int) -> bool:
    """Cancel a scan once it reports `stage`; False if it had already finished."""
    call = stub(daemon.address).Scan(
        pb.ScanRequest(pid=target.pid, snapshot=snapshot), timeout=RPC_TIMEOUT
    )
    for event in call:
        if event.HasField("progress") and event.progress.stage_name == stage:
            if not call.cancel():
                return False
            break
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.CANCELLED
    # The daemon saw the cancellation, or had just finished the scan.
    m = daemon.wait_for_log(rf"scan of pid {target.pid}( cancelled|: )")
    return "cancelled" in m.group(0)


def children(pid: int) -> list[int]:
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


@pytest.mark.parametrize("snapshot", [pb.SNAPSHOT_STOPPED, pb.SNAPSHOT_FORK])
def test_cancel_mid_scan_releases_target(daemon, targets, snapshot):
    # A big heap: the sweep takes a while. In "stopped" mode the target is
    # paused during the sweep, so the cancelled scan was holding it; in "fork"
    # mode a frozen copy-on-write child of it was held, and must be gone.
    target = targets.start(BIG_HEAP, "1000000")
    for _attempt in range(3):
        if cancel_after(daemon, target, "captured", snapshot):
            break
    else:
        pytest.fail("every scan finished before the cancellation reached the daemon")
    wait_untraced(target.pid)
    deadline = time.monotonic() + 20
    while children(target.pid):
        assert time.monotonic() < deadline, f"snapshot children left: {children(target.pid)}"
        time.sleep(0.05)
    assert target.alive()
    # It runs: a signal is handled at once (the program prints SIGUSR1).
    os.kill(target.pid, signal.SIGUSR1)
    assert target.read_line(timeout=20) == "SIGUSR1"
    # And the daemon still scans it afterwards.
    report = scan_report(stub(daemon.address), pid=target.pid)
    assert report.leak_count == 0


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
def test_copy_snapshot(daemon, targets):
    target = targets.start(PROGRAMS / "globals.c")
    report = scan_report(stub(daemon.address), pid=target.pid, snapshot=pb.SNAPSHOT_COPY)
    assert report.snapshot == "copy" and report.snapshot_note == ""
    assert report.leak_count == target.int("leak_count")
    wait_untracked(target.pid)


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
def test_concurrent_snapshot(daemon, targets):
    """SNAPSHOT_CONCURRENT reaches the scan: marked while running, both
    stops in the note."""
    target = targets.start(PROGRAMS / "globals.c")
    report = scan_report(stub(daemon.address), pid=target.pid, snapshot=pb.SNAPSHOT_CONCURRENT)
    assert report.snapshot == "concurrent" and report.snapshot_note.startswith("two stops")
    assert report.leak_count == target.int("leak_count")
    wait_untracked(target.pid)
    assert target.tracer() == 0


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
def test_cancel_during_the_copy_ends_the_tracking(daemon, targets):
    # Cancelled while the memory is copied, the target running and its
    # writes tracked: the scanner is gone and the helper stops tracking.
    target = targets.start(BIG_HEAP, "1000000")
    for _attempt in range(3):
        if cancel_after(daemon, target, "started", pb.SNAPSHOT_COPY):
            break
    else:
        pytest.fail("every scan finished before the cancellation reached the daemon")
    wait_untracked(target.pid)
    wait_untraced(target.pid)
    os.kill(target.pid, signal.SIGUSR1)
    assert target.read_line(timeout=20) == "SIGUSR1"


def _worker(daemon_pid: int) -> int:
    """The daemon's worker process, once it has started (the request is on
    its stdin, so one scan at a time is told apart by being the only one)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            found = children(daemon_pid)
        except OSError:
            found = []  # one of its threads ended while we looked
        for child in found:
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue  # gone: a worker that ended
            if b"unreachable.daemon.worker" in cmdline:
                return child
        assert time.monotonic() < deadline, "the daemon started no worker"
        time.sleep(0.001)


def test_deadline_aborts_scan(daemon, targets):
    """A deadline that passes while the scan runs ends it. The worker is held
    stopped, so the scan is still running when its deadline passes: a
    deadline that passes before the daemon has read the request ends the
    call in grpc, which never runs the handler (nothing to cancel or log)."""
    target = targets.start(BIG_HEAP)
    s = stub(daemon.address)
    call = s.Scan(pb.ScanRequest(pid=target.pid, snapshot=pb.SNAPSHOT_STOPPED), timeout=10)
    os.kill(_worker(daemon.proc.pid), signal.SIGSTOP)
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    daemon.wait_for_log(rf"scan of pid {target.pid} cancelled")
    wait_untraced(target.pid)
    assert target.alive()


def test_several_scans_at_once(daemon, targets):
    progs = [PROGRAMS / "globals.c", PROGRAMS / "graph.c", PROGRAMS / "globals.c"]
    started = [targets.start(p) for p in progs]
    # Three pids at once, and the first pid three times (serialized by the daemon).
    # Without the per-pid lock, overlapping scans of one pid would fail with
    # FAILED_PRECONDITION ("already traced").
    jobs = [t.pid for t in started] + [started[0].pid] * 2
    s = stub(daemon.address)
    with ThreadPoolExecutor(len(jobs)) as pool:
        reports = list(pool.map(lambda pid: scan_report(s, pid=pid), jobs))
    for pid, report in zip(jobs, reports, strict=True):
        target = next(t for t in started if t.pid == pid)
        assert report.pid == pid
        assert report.leak_count == target.int("leak_count")
        assert report.leak_bytes == target.int("leak_bytes")
    first = [r for r in reports if r.pid == started[0].pid]
    assert len({tuple(leak_set(r.leaks)) for r in first}) == 1
    for t in started:
        assert t.alive() and t.tracer() == 0


# --- Watch and the notify socket -----------------------------------------


def test_watch_receives_notify_scan(daemon, targets):
    exe = build(NOTIFY_CLIENT)
    target = targets.start(NOTIFY_CLIENT, str(daemon.notify_socket))
    by_pid = WatchThread(daemon.address, pid=target.pid)
    by_name = WatchThread(daemon.address, name=exe.name)
    every = WatchThread(daemon.address)
    try:
        target.send("SCAN")
        assert target.read_line() == "REPLY OK"
        for w in (by_pid, by_name, every):
            event = w.get()
            assert event.trigger == pb.TRIGGER_SIGNAL
            assert event.report.pid == target.pid
            assert (event.report.leak_count, event.report.leak_bytes) == (1, 300)
            assert event.summary.startswith("300 bytes in 1 allocation unreachable out of ")
            assert not any(leak.HasField("contents") for leak in event.report.leaks)
        daemon.wait_for_log(
            rf"signal scan: 300 bytes in 1 allocation unreachable .*pid {target.pid}"
        )
        assert target.alive()
        wait_untraced(target.pid)
    finally:
        for w in (by_pid, by_name, every):
            w.close()


def test_watch_filters(daemon, targets):
    target = targets.start(NOTIFY_CLIENT, str(daemon.notify_socket))
    other_pid = WatchThread(daemon.address, pid=1)
    other_name = WatchThread(daemon.address, name="no-such-program")
    mine = WatchThread(daemon.address, pid=target.pid)
    try:
        target.send("SCAN")
        assert target.read_line() == "REPLY OK"
        assert mine.get().report.pid == target.pid
        # The hub delivered to every subscriber before `mine` got its copy.
        assert other_pid.events.empty() and other_name.events.empty()
    finally:
        for w in (other_pid, other_name, mine):
            w.close()


def test_cli_watch_prints_report(daemon, targets):
    target = targets.start(NOTIFY_CLIENT, str(daemon.notify_socket))
    proc = subprocess.Popen(
        [*CLI, "watch", "--remote", daemon.address, "--pid", str(target.pid), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The CLI subscribes asynchronously: ask until a report shows up.
        import select

        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while not line:
            assert time.monotonic() < deadline, "no report from unreachable-cli watch"
            target.send("SCAN")
            assert target.read_line() in ("REPLY OK", "REPLY BUSY")
            if select.select([proc.stdout], [], [], 2.0)[0]:
                line = proc.stdout.readline()
        doc = json.loads(line)
        assert doc["trigger"] == "signal"
        assert doc["report"]["pid"] == target.pid
        assert doc["report"]["leak_bytes"] == 300
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_notify_refuses_other_pid(daemon, targets):
    victim = targets.start(PROGRAMS / "globals.c")
    liar = targets.start(NOTIFY_CLIENT, str(daemon.notify_socket), str(victim.pid))
    liar.send("SCAN")
    assert liar.read_line() == "REPLY ERR a process may only ask for a scan of itself"
    # A test client that is not the pid it names is refused too; garbage as well.
    for request, reply in (
        (f"SCAN {victim.pid}\n", b"ERR a process may only ask for a scan of itself\n"),
        ("HELLO\n", b"ERR expected 'SCAN <pid>'\n"),
        ("SCAN x\n", b"ERR bad pid 'x'\n"),
    ):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(daemon.notify_socket))
            s.sendall(request.encode())
            assert s.recv(200) == reply
    assert victim.tracer() == 0


def test_notify_from_python_client_scans_itself(daemon, targets, shim):
    # A shimmed Python process sends the request line itself.
    code = (
        "import os, socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(20)\n"
        f"s.connect({str(daemon.notify_socket)!r})\n"
        "s.sendall(f'SCAN {os.getpid()}\\n'.encode())\n"
        "print('READY', s.recv(100).decode().strip(), flush=True)\n"
        "sys.stdin.read()\n"
    )
    watch = WatchThread(daemon.address)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(os.environ, LD_PRELOAD=str(shim)),
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().decode().strip() == "READY OK"
            event = watch.get()
            assert event.report.pid == proc.pid
            assert event.trigger == pb.TRIGGER_SIGNAL
        finally:
            proc.kill()
            proc.wait(timeout=10)
    finally:
        watch.close()


# --- HeapDump and ListTargets --------------------------------------------


def test_heapdump_remote_equals_local(daemon, targets):
    target = targets.start(PROGRAMS / "globals.c", options="backtrace=8")
    reply = stub(daemon.address).HeapDump(pb.HeapDumpRequest(pid=target.pid), timeout=RPC_TIMEOUT)
    sizes = {r.size: r.num_allocations for r in reply.records}
    assert {100, 200, 300} <= set(sizes)
    assert reply.total_memory >= 600
    assert reply.total_memory == sum(r.size * r.num_allocations for r in reply.records)
    assert reply.allocation_count == sum(r.num_allocations for r in reply.records)
    assert reply.backtrace_size == 8
    assert any(r.frames for r in reply.records if r.size == 300)
    local = cli("heapdump", str(target.pid), "--json")
    remote = cli("heapdump", str(target.pid), "--json", "--remote", daemon.address)
    assert local.returncode == remote.returncode == 0, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    a.pop("pause_ms"), b.pop("pause_ms")
    assert a == b
    text = cli("heapdump", str(target.pid), "--remote", daemon.address)
    assert text.returncode == 0
    assert "z 0  sz      300  num    1  bt " in text.stdout
    parsed = parse_dump(text.stdout)
    assert parsed.version == "1.2" and parsed.total_memory == reply.total_memory
    assert sorted((r.size, r.num_allocations) for r in parsed.records) == sorted(
        (r.size, r.num_allocations) for r in reply.records
    )
    assert parsed.mappings and parsed.backtrace_size == 8
    assert target.tracer() == 0


def test_list_targets(daemon, targets):
    shimmed = targets.start(PROGRAMS / "globals.c", options="backtrace=4")
    plain = targets.start(PROGRAMS / "globals.c", preload=False)
    reply = stub(daemon.address).ListTargets(pb.ListTargetsRequest(), timeout=60)
    by_pid = {t.pid: t for t in reply.targets}
    assert shimmed.pid in by_pid and plain.pid not in by_pid
    t = by_pid[shimmed.pid]
    assert t.enabled
    assert "backtrace=4" in t.options
    assert "globals" in t.command and t.shim.endswith(".so")
    assert shimmed.tracer() == 0


# --- configuration --------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tcp", "0.0.0.0:0", "--insecure-tcp"], "loopback only"),
        (["--tcp", "127.0.0.1:0"], "needs --tls-cert and --tls-key"),
        (["--tls-cert", "x.pem"], "apply to --tcp"),
    ],
)
def test_refused_configurations(daemons, args, message):
    d = daemons.start(*args, wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log(message, timeout=10)


def test_plaintext_loopback_when_asked(daemons, targets):
    d = daemons.start("--tcp", "127.0.0.1:0", "--insecure-tcp", unix=False)
    target = targets.start(PROGRAMS / "globals.c")
    remote = cli("scan", str(target.pid), "--remote", f"127.0.0.1:{d.tcp_port}", "--insecure")
    assert remote.returncode == 1, remote.stderr
    assert "300 bytes in 1 unreachable allocation" in remote.stdout


def test_sigterm_stops_cleanly(daemons, tmp_path):
    # systemd Type=notify: READY=1 once serving, STOPPING=1 on SIGTERM.
    notify_path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sd:
        sd.bind(str(notify_path))
        sd.settimeout(60)
        d = daemons.start(env={"NOTIFY_SOCKET": str(notify_path)})
        assert b"READY=1" in sd.recv(4096)
        assert d.stop() == 0
        assert sd.recv(4096) == b"STOPPING=1"
    assert not d.socket.exists() and not d.notify_socket.exists()


def test_generated_code_is_current():
    pytest.importorskip("grpc_tools")
    script = Path(__file__).parent.parent.parent / "scripts" / "check_protos.sh"
    res = subprocess.run(
        ["sh", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_daemon_stopped_mid_scan_says_so(daemon, targets):
    """Stopping the daemon kills its scanners with SIGKILL: the reply said
    the OOM killer had, sending the user after a memory limit."""
    target = targets.start(BIG_HEAP, "1000000")
    call = stub(daemon.address).Scan(
        pb.ScanRequest(pid=target.pid, snapshot=pb.SNAPSHOT_STOPPED), timeout=RPC_TIMEOUT
    )
    for event in call:
        if event.HasField("progress") and event.progress.stage_name == "captured":
            break
    daemon.proc.send_signal(signal.SIGTERM)
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert (info.value.code(), info.value.details()) == (
        grpc.StatusCode.ABORTED,
        "the daemon is stopping: the scan was cut short",
    )
    wait_untraced(target.pid)
    assert target.alive()
