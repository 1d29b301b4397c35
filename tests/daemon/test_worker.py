"""The daemon's scan worker (python -m unreachable.daemon.worker), run as
the daemon runs it: its protocol on stdout, a real target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from unreachable.report.schema import report_from_json

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
WORKER = [sys.executable, "-P", "-m", "unreachable.daemon.worker"]
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def worker(*args: str) -> tuple[int, list[dict[str, Any]], str]:
    """Exit status, the JSON lines on stdout (each must be one), stderr."""
    res = subprocess.run([*WORKER, *args], capture_output=True, text=True, timeout=180, cwd="/")
    return res.returncode, [json.loads(line) for line in res.stdout.splitlines()], res.stderr


def test_scan_reports_progress_then_the_result(targets):
    target = targets.start(PROGRAMS / "alloc_funcs.c")
    request = {"command": "scan", "pid": target.pid, "contents": True, "limit": 3}
    code, lines, stderr = worker(json.dumps(request))
    assert code == 0, stderr
    *progress, last = lines
    stages = [p["progress"] for p in progress]
    assert "marked" in stages and stages[-1] == "done", stages
    assert all(set(p) == {"progress", "elapsed_ms"} for p in progress)
    assert set(last) == {"result"}
    report = report_from_json(last["result"])
    assert report.pid == target.pid
    assert report.leak_count == 9 and report.leak_bytes == target.int("leak_bytes")
    assert len(report.leaks) == 3 and all(leak.contents for leak in report.leaks)


def test_heapdump_why_and_retainers(targets):
    target = targets.start(PROGRAMS / "alloc_funcs.c")
    code, lines, stderr = worker(json.dumps({"command": "heapdump", "pid": target.pid}))
    assert code == 0, stderr
    assert lines[-1]["result"]["pid"] == target.pid and lines[-1]["result"]["records"]
    code, lines, stderr = worker(json.dumps({"command": "retainers", "pid": target.pid}))
    assert code == 0, stderr
    assert lines[-1]["result"]["pid"] == target.pid
    # An address in no live block: the CLI's error, as INVALID_ARGUMENT.
    code, lines, _ = worker(json.dumps({"command": "why", "pid": target.pid, "address": 8}))
    assert code == 2 and len(lines) == 1
    assert lines[0]["error"] == "INVALID_ARGUMENT", lines


def test_errors_carry_their_grpc_status():
    with open("/proc/sys/kernel/pid_max") as f:
        no_such_pid = int(f.read())
    code, lines, _ = worker(json.dumps({"command": "scan", "pid": no_such_pid}))
    assert code == 2
    assert lines == [{"error": "NOT_FOUND", "message": lines[0]["message"]}]
    assert str(no_such_pid) in lines[0]["message"]


def test_bad_requests_are_invalid_argument():
    for request in (
        "not json",
        json.dumps({"command": "format-disk", "pid": 1}),
        json.dumps({"command": "scan", "pid": "1"}),
        json.dumps({"command": "scan", "pid": 1, "limit": "all"}),
        json.dumps({"command": "scan", "pid": 1, "frobnicate": True}),
    ):
        code, lines, stderr = worker(request)
        assert code == 2, request
        assert len(lines) == 1 and lines[0]["error"] == "INVALID_ARGUMENT", (request, lines)
        assert "Traceback" not in stderr
    code, lines, _ = worker()
    assert code == 2 and lines[0]["error"] == "INVALID_ARGUMENT"


def test_the_cli_has_no_hidden_worker_flag():
    res = subprocess.run(
        [*CLI, "scan", "1", "--json", "--progress-json"], capture_output=True, text=True
    )
    assert res.returncode == 2
    assert "unrecognized arguments: --progress-json" in res.stderr
