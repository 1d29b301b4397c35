"""Why and Retainers over the daemon: the same reports as the local commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

PROGRAM = Path(__file__).parent.parent / "scan" / "programs" / "retention.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
RPC_TIMEOUT = 120.0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180)


def _same(local: subprocess.CompletedProcess[str], remote: subprocess.CompletedProcess[str]):
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    a.pop("pause_ms"), b.pop("pause_ms")
    assert a == b
    return b


def test_why_and_retainers_remote_equal_local(daemon, targets):
    t = targets.start(PROGRAM, options="backtrace=8")
    pid = str(t.pid)
    why = _same(
        cli("why", pid, t.info["c3_value"], "--json"),
        cli("why", pid, t.info["c3_value"], "--json", "--remote", daemon.address),
    )
    assert why["root"]["symbol"] == "g_cache" and len(why["chain"]) == 4
    leak = _same(
        cli("why", pid, t.info["leaked"], "--json"),
        cli("why", pid, t.info["leaked"], "--json", "--remote", daemon.address),
    )
    assert leak["leak"] == t.int("leak")
    held = _same(
        cli("retainers", pid, "--json", "--site", "cache_put"),
        cli("retainers", pid, "--json", "--site", "cache_put", "--remote", daemon.address),
    )
    assert [(r["kind"], r["site_bytes"]) for r in held["roots"]] == [("global", 560)]
    text = cli("retainers", pid, "--limit", "3", "--remote", daemon.address)
    assert text.returncode == 0 and "Retained by allocation site:" in text.stdout
    assert t.tracer() == 0


def test_concurrent_snapshot_is_refused_without_a_reference_graph(daemon, targets):
    """--snapshot concurrent keeps no reference graph: why and retainers
    refuse it in one line, exit 2, locally and over the daemon, and the
    daemon refuses the request's SNAPSHOT_CONCURRENT itself; the target is
    never stopped."""
    t = targets.start(PROGRAM)
    pid = str(t.pid)
    for remote in ([], ["--remote", daemon.address]):
        for args in (["why", pid, t.info["leaked"]], ["retainers", pid]):
            res = cli(*args, "--snapshot", "concurrent", *remote)
            assert res.returncode == 2, res
            assert res.stderr.count("\n") == 1 and "keeps no reference graph" in res.stderr
    stub = pb_grpc.UnreachableStub(grpc.insecure_channel(daemon.address))
    leaked = int(t.info["leaked"], 16)
    for call in (
        lambda: stub.Why(
            pb.WhyRequest(pid=t.pid, address=leaked, snapshot=pb.SNAPSHOT_CONCURRENT),
            timeout=RPC_TIMEOUT,
        ),
        lambda: stub.Retainers(
            pb.RetainersRequest(pid=t.pid, snapshot=pb.SNAPSHOT_CONCURRENT), timeout=RPC_TIMEOUT
        ),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "keeps no reference graph" in info.value.details()
    assert t.alive() and t.tracer() == 0


def test_why_bad_address_over_the_daemon(daemon, targets):
    t = targets.start(PROGRAM)
    stub = pb_grpc.UnreachableStub(grpc.insecure_channel(daemon.address))
    with pytest.raises(grpc.RpcError) as info:
        stub.Why(pb.WhyRequest(pid=t.pid, address=0x10), timeout=RPC_TIMEOUT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == f"0x10 is not inside any live allocation of process {t.pid}"
    res = cli("why", str(t.pid), "0x10", "--remote", daemon.address)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "is not inside any live allocation" in res.stderr
    with pytest.raises(grpc.RpcError) as info:
        stub.Retainers(pb.RetainersRequest(pid=t.pid, site="**"), timeout=RPC_TIMEOUT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_site_longer_than_an_argument_is_answered(daemon, targets):
    """A Retainers site of 200,000 characters (an exec argument holds 128
    KiB) is a pattern like any other: no site matches, the reply is a
    report, and the daemon logs no traceback."""
    t = targets.start(PROGRAM)
    stub = pb_grpc.UnreachableStub(grpc.insecure_channel(daemon.address))
    reply = stub.Retainers(pb.RetainersRequest(pid=t.pid, site="x" * 200_000), timeout=RPC_TIMEOUT)
    assert json.loads(reply.json)["pid"] == t.pid
    assert not any("Traceback" in line for line in daemon.log)
    assert t.alive() and t.tracer() == 0
