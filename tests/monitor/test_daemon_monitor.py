"""A real unreachabled with scheduled scans: sd_notify and journal on real sockets,
metrics over HTTP, growth on Watch, history read by the CLI."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import grpc

from tests.monitor.conftest import PROGRAMS, free_env, parse_journal
from tests.monitor.test_scheduler import metric
from tests.support.cbuild import build
from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

WAIT = 120.0


def cli_watch_until_growth(address: str, pid: int, extra: list[str]) -> str:
    """The first line `unreachable-cli watch` prints about a growing leak."""
    argv = [sys.executable, "-m", "unreachable.cli.main", "watch", "--pid", str(pid)]
    proc = subprocess.Popen([*argv, "--remote", address, *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + WAIT
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([proc.stdout], [], [], left)[0]:
                break
            line = proc.stdout.readline()
            assert line, f"watch exited with {proc.wait()}"
            if line.startswith("  growing: ") or '"growth": [{' in line:
                return line.rstrip("\n")
        raise AssertionError("no growth printed")
    finally:
        proc.kill()
        proc.wait()


def test_daemon_monitors_a_leaking_process(daemons, journal, notify, sockdir, shim, tmp_path):
    # A copy of the program under a name no other process has.
    name = f"lk{os.getpid() % 100000}"
    exe = sockdir / name
    shutil.copy(build(PROGRAMS / "timer_leak.c"), exe)
    target = subprocess.Popen(
        [str(exe), "1000", "20"],
        stdout=subprocess.DEVNULL,
        env=dict(free_env(), LD_PRELOAD=str(shim), UNREACHABLE_MALLOC_OPTIONS="backtrace=16"),
    )
    plain = subprocess.Popen([str(exe), "10", "1000"], stdout=subprocess.DEVNULL, env=free_env())
    config = tmp_path / "d.toml"
    config.write_text(
        f'scan_interval = 1\nhistory = "{tmp_path}/h.sqlite"\n'
        f'[[targets]]\nname = "{name}"\n'
        "[thresholds]\ngrowth_bytes_per_hour = 1000\ngrowth_scans = 3\nleak_bytes = 1\n"
    )
    try:
        env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000"}
        d = daemons.start(
            "--config",
            str(config),
            "--metrics",
            "127.0.0.1:0",
            "--journal-socket",
            str(journal.path),
            env=env,
        )
        port = int(d.wait_for_log(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        channel = grpc.insecure_channel(d.address)
        watch = pb_grpc.UnreachableStub(channel).Watch(
            pb.WatchRequest(pid=target.pid), timeout=WAIT
        )

        ready = notify.wait_for(lambda m: m.startswith(b"READY=1"), WAIT)
        assert b"STATUS=watching 0 targets" in ready
        notify.wait_for(lambda m: m.startswith(b"STATUS=watching 1 target;"), WAIT)
        notify.wait_for(lambda m: notify.received.count(b"WATCHDOG=1") >= 3, WAIT)

        # the unshimmed one, reported once
        warn = parse_journal(journal.wait_for(lambda m: b"cannot be scanned" in m, WAIT))
        assert warn["TARGET_PID"] == str(plain.pid) and warn["PRIORITY"] == "4"

        # a scheduled scan: journal fields, above the leak threshold
        scan = parse_journal(
            journal.wait_for(
                lambda m: b"scheduled scan" in m and f"TARGET_PID={target.pid}\n".encode() in m,
                WAIT,
            )
        )
        assert scan["PRIORITY"] == "4" and int(scan["LEAK_BYTES"]) > 0
        assert int(scan["LEAK_COUNT"]) > 0 and float(scan["PAUSE_MS"]) >= 0
        assert scan["TARGET_COMMAND"] == name and scan["SYSLOG_IDENTIFIER"] == "unreachabled"

        # growth: logged, then published on Watch
        grow = parse_journal(journal.wait_for(lambda m: b"leak growing" in m, WAIT))
        assert grow["PRIORITY"] == "4" and "leak_one" in grow["MESSAGE"]
        assert float(grow["LEAK_GROWTH_BYTES_PER_HOUR"]) > 1000
        for event in watch:
            if event.growth:
                break
        assert event.trigger == pb.TRIGGER_SCHEDULED and event.name == name
        assert event.growth[0].site == grow["LEAK_SITE"]
        watch.cancel()
        channel.close()
        # The CLI prints the growth it receives, in text and in JSON.
        for extra in ([], ["--json"]):
            growing = cli_watch_until_growth(d.address, target.pid, extra)
            assert grow["LEAK_SITE"] in growing
            if extra:
                assert json.loads(growing)["growth"][0]["site"] == grow["LEAK_SITE"]
            else:
                assert growing.startswith("  growing: ") and "bytes/hour" in growing

        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        )
        assert metric(text, "unreachable_leak_bytes", command=name, unit="") > 0
        assert metric(text, "unreachable_leak_growth_bytes_per_hour", command=name) > 1000
        assert metric(text, "unreachable_scans_total", result="leaks") >= 3

        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "unreachable.cli.main",
                "history",
                "--db",
                f"{tmp_path}/h.sqlite",
                "--pid",
                str(target.pid),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        scans = json.loads(res.stdout)["scans"]
        assert len(scans) >= 3 and all(s["name"] == name for s in scans)
        assert scans[-1]["sites"][0]["bytes"] > scans[0]["sites"][0]["bytes"]

        target.kill()
        target.wait()
        d.wait_for_log(rf"{name}\[{target.pid}\] exited: no longer watched", WAIT)
        # plain lines carry journald priority prefixes (stderr is not a terminal)
        assert any(re.match(r"<6>unreachabled: INFO: ready \(pid", line) for line in d.log)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        notify.wait_for(lambda m: m == b"STOPPING=1", WAIT)
    finally:
        for p in (target, plain):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_no_watchdog_pings_for_another_pid(daemons, notify):
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"}
    d = daemons.start(env=env)
    notify.wait_for(lambda m: m.startswith(b"READY=1"), WAIT)
    time.sleep(0.5)  # several ping periods (not a timing assertion: no ping may come at all)
    assert b"WATCHDOG=1" not in notify.received
    d.stop()
