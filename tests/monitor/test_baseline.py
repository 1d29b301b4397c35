"""unreachabled's `baseline` setting: its background scans report only the
allocation sites that are new or grew, on Watch, in the journal and in the
metrics (tests/triage/programs/sites.c: 175 bytes in 4 leaks, then on
"grow" 96 more from cache_insert and 100 from new_site)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc

from tests.monitor.conftest import free_env, parse_journal
from tests.monitor.test_scheduler import metric
from tests.support.cbuild import build
from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

SITES = Path(__file__).parent.parent / "triage" / "programs" / "sites.c"
WAIT = 120.0


def read_line(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], WAIT)
    assert ready, "the program said nothing"
    return proc.stdout.readline().decode()


def test_first_scan_is_the_baseline_then_only_growth(daemons, journal, sockdir, shim, tmp_path):
    name = f"bl{os.getpid() % 100000}"  # a name no other process has
    exe = sockdir / name
    shutil.copy(build(SITES), exe)
    target = subprocess.Popen(
        [str(exe)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(free_env(), LD_PRELOAD=str(shim), UNREACHABLE_MALLOC_OPTIONS="backtrace=16"),
    )
    try:
        assert read_line(target).startswith("READY")
        config = tmp_path / "d.toml"
        config.write_text(
            f'scan_interval = 1\nbaseline = "first"\nhistory = ""\n[[targets]]\nname = "{name}"\n'
        )
        d = daemons.start(
            "--config",
            str(config),
            "--metrics",
            "127.0.0.1:0",
            "--journal-socket",
            str(journal.path),
        )
        port = int(d.wait_for_log(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        channel = grpc.insecure_channel(d.address)
        watch = pb_grpc.UnreachableStub(channel).Watch(
            pb.WatchRequest(pid=target.pid), timeout=WAIT
        )
        events = iter(watch)
        first = next(events)
        assert (first.report.leak_count, first.report.leak_bytes) == (4, 175)
        second = next(events)
        assert (second.report.leak_count, second.report.leak_bytes, len(second.report.leaks)) == (
            0,
            0,
            0,
        )
        assert target.stdin is not None
        target.stdin.write(b"grow\n")
        target.stdin.flush()
        assert read_line(target).startswith("GROWN")
        for event in events:
            if event.report.leak_count:
                break
        assert (event.report.leak_count, event.report.leak_bytes) == (3, 196)
        assert sorted(leak.size for leak in event.report.leaks) == [48, 48, 100]
        logged = parse_journal(
            journal.wait_for(
                lambda m: b"LEAK_BYTES=196\n" in m and f"TARGET_PID={target.pid}\n".encode() in m,
                WAIT,
            )
        )
        assert logged["LEAK_COUNT"] == "3"
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        )
        assert metric(text, "unreachable_leak_bytes", command=name) == 196
    finally:
        target.kill()
        target.wait()


def test_a_saved_scan_as_the_baseline(daemons, sockdir, shim, tmp_path):
    name = f"bs{os.getpid() % 100000}"
    exe = sockdir / name
    shutil.copy(build(SITES), exe)
    target = subprocess.Popen(
        [str(exe)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(free_env(), LD_PRELOAD=str(shim), UNREACHABLE_MALLOC_OPTIONS="backtrace=16"),
    )
    try:
        assert read_line(target).startswith("READY")
        saved = tmp_path / "saved.json"
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid), "--json"],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert res.returncode == 1, res.stderr
        saved.write_text(res.stdout)
        assert target.stdin is not None
        target.stdin.write(b"grow\n")
        target.stdin.flush()
        assert read_line(target).startswith("GROWN")
        config = tmp_path / "d.toml"
        config.write_text(
            'scan_interval = 1\nbaseline = "saved.json"\nhistory = ""\n'
            f'[[targets]]\nname = "{name}"\n'
        )
        d = daemons.start("--config", str(config))
        channel = grpc.insecure_channel(d.address)
        watch = pb_grpc.UnreachableStub(channel).Watch(
            pb.WatchRequest(pid=target.pid), timeout=WAIT
        )
        event = next(iter(watch))  # the first scan already compares
        assert (event.report.leak_count, event.report.leak_bytes) == (3, 196)
    finally:
        target.kill()
        target.wait()


def test_a_bad_baseline_file_stops_the_daemon(daemons, tmp_path):
    config = tmp_path / "d.toml"
    config.write_text('baseline = "missing.json"\n')
    d = daemons.start("--config", str(config), wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log(rf"baseline: {tmp_path}/missing.json: cannot read", timeout=10)
