"""unreachabled's `baseline` setting: its background scans report only the
allocation sites that are new or grew, on Watch, in the journal and in the
metrics (tests/triage/programs/sites.c: 175 bytes in 4 leaks, then on
"grow" 96 more from cache_insert and 100 from new_site)."""

from __future__ import annotations

import json
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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UNREACHABLE_SUPPRESSIONS"}
    return subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=env,
    )


TIMINGS = ("pause_ms", "hold_ms", "scan_ms", "snapshot", "snapshot_note", "sweep", "sweep_note")


def test_remote_scan_against_the_daemons_baseline_prints_a_local_one(daemons, targets, tmp_path):
    """scan --remote --daemon-baseline: the daemon compares with the baseline
    it keeps for the process and the reply carries the comparison (new and
    grown sites, the baseline's totals, each entry's delta), so the client
    prints what a local scan --baseline of the same file prints."""
    target = targets.start(SITES, options="backtrace=16")
    saved = tmp_path / "saved.json"
    assert _cli("scan", str(target.pid), "--json", "--limit", "1000", "-o", str(saved)).returncode
    target.send("grow")
    assert target.read_line().startswith("GROWN")
    config = tmp_path / "d.toml"
    config.write_text(f'baseline = "{saved}"\nhistory = ""\n')
    d = daemons.start("--config", str(config))
    pid = str(target.pid)
    remote = _cli("scan", pid, "--remote", d.address, "--daemon-baseline")
    local = _cli("scan", pid, "--baseline", str(saved))
    assert (remote.returncode, local.returncode) == (1, 1), remote.stderr + local.stderr
    assert remote.stdout == local.stdout
    assert remote.stdout.splitlines()[:3] == [
        "  196 bytes in 3 unreachable allocations",
        "  ABI: 'x86_64'",
        f"  new or grown since {saved}: 2 sites; baseline 175 bytes in 4 allocations,"
        " now 371 bytes in 7 allocations",
    ]
    assert "   new site: 100 bytes in 1 allocation" in remote.stdout.splitlines()
    remote = _cli("scan", pid, "--remote", d.address, "--daemon-baseline", "--json")
    local = _cli("scan", pid, "--baseline", str(saved), "--json")
    docs = [json.loads(res.stdout) for res in (remote, local)]
    for doc in docs:
        for key in TIMINGS:
            doc.pop(key)
    assert docs[0] == docs[1]
    assert [
        (s["new"], s["delta_count"], s["delta_bytes"]) for s in docs[0]["baseline"]["sites"]
    ] == [
        (False, 2, 96),
        (True, 1, 100),
    ]
    # Without the flag the daemon's scan is whole, as before.
    whole = _cli("scan", pid, "--remote", d.address)
    assert whole.stdout.splitlines()[0] == "  371 bytes in 7 unreachable allocations"


def test_daemon_baseline_refused_when_the_daemon_keeps_none(daemons, targets, tmp_path):
    target = targets.start(SITES, options="backtrace=16")
    d = daemons.start()
    res = _cli("scan", str(target.pid), "--remote", d.address, "--daemon-baseline")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"unreachable-cli: error: pid {target.pid} has no baseline: neither its [[targets]]"
        " entry nor the daemon's configuration names one"
    ]
    res = _cli("scan", str(target.pid), "--daemon-baseline")
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "unreachable-cli: error: --daemon-baseline asks unreachabled: it needs --remote"
    ]


def _start_named(name: str, sockdir: Path, shim: Path) -> subprocess.Popen[bytes]:
    exe = sockdir / name
    shutil.copy(build(SITES), exe)
    proc = subprocess.Popen(
        [str(exe)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(free_env(), LD_PRELOAD=str(shim), UNREACHABLE_MALLOC_OPTIONS="backtrace=16"),
    )
    assert read_line(proc).startswith("READY")
    return proc


def test_each_target_its_own_baseline(daemons, journal, sockdir, shim, tmp_path):
    """[[targets]] entries with their own baseline: one a saved scan, one none
    (""), beside the daemon's "first" for the rest. Watch, the journal and
    the metrics count each process's growth against its own."""
    tag = os.getpid() % 100000
    names = {"saved": f"ts{tag}", "none": f"tn{tag}", "first": f"tf{tag}"}
    procs = {k: _start_named(name, sockdir, shim) for k, name in names.items()}
    try:
        saved = tmp_path / "saved.json"
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(procs["saved"].pid)]
            + ["--json", "--limit", "1000", "-o", str(saved)],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert res.returncode == 1, res.stderr
        grower = procs["saved"]
        assert grower.stdin is not None
        grower.stdin.write(b"grow\n")
        grower.stdin.flush()
        assert read_line(grower).startswith("GROWN")
        config = tmp_path / "d.toml"
        config.write_text(
            'scan_interval = 1\nbaseline = "first"\nhistory = ""\n'
            f'[[targets]]\nname = "{names["saved"]}"\nbaseline = "saved.json"\n'
            f'[[targets]]\nname = "{names["none"]}"\nbaseline = ""\n'
            f'[[targets]]\nname = "{names["first"]}"\n'
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
        stub = pb_grpc.UnreachableStub(grpc.insecure_channel(d.address))
        watch = {
            k: iter(stub.Watch(pb.WatchRequest(pid=p.pid), timeout=WAIT)) for k, p in procs.items()
        }
        # Against saved.json from the first scan: the growth, with the comparison.
        event = next(watch["saved"])
        assert (event.report.leak_count, event.report.leak_bytes) == (3, 196)
        b = event.report.baseline
        assert (b.file, b.leak_count, b.leak_bytes, b.now_count, b.now_bytes) == (
            str(saved),
            4,
            175,
            7,
            371,
        )
        assert [(s.is_new, s.count - s.old_count, s.bytes - s.old_bytes) for s in b.sites] == [
            (False, 2, 96),
            (True, 1, 100),
        ]
        assert {event.report.leaks[i].baseline_site for i in range(3)} == {0, 1}
        # baseline = "": every scan whole, though the daemon's setting is "first".
        for _ in range(2):
            event = next(watch["none"])
            assert (event.report.leak_count, event.report.leak_bytes) == (4, 175)
            assert not event.report.HasField("baseline")
        # No baseline of its own: the daemon's "first".
        first, second = next(watch["first"]), next(watch["first"])
        assert (first.report.leak_count, first.report.leak_bytes) == (4, 175)
        assert (second.report.leak_count, second.report.leak_bytes) == (0, 0)
        assert second.report.baseline.now_bytes == 175
        logged = parse_journal(
            journal.wait_for(
                lambda m: (
                    f"TARGET_PID={procs['saved'].pid}\n".encode() in m and b"LEAK_BYTES=" in m
                ),
                WAIT,
            )
        )
        assert (logged["LEAK_COUNT"], logged["LEAK_BYTES"]) == ("3", "196")
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        )
        assert metric(text, "unreachable_leak_bytes", command=names["saved"]) == 196
        assert metric(text, "unreachable_leak_bytes", command=names["none"]) == 175
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_a_targets_bad_baseline_stops_the_daemon(daemons, tmp_path):
    config = tmp_path / "d.toml"
    config.write_text('[[targets]]\nname = "app"\nbaseline = "gone.json"\n')
    d = daemons.start("--config", str(config), wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log(
        rf"\[\[targets\]\] name='app': baseline: {tmp_path}/gone.json: cannot read", timeout=10
    )


def test_watch_prints_the_suppressions_and_the_baseline_as_a_local_scan(
    daemons, sockdir, shim, tmp_path
):
    """unreachable-cli watch prints a background report the daemon set known
    leaks aside in ('Suppressions used') and compared with a baseline (the
    line under the totals, each entry's delta) as scan --suppressions
    --baseline prints it here."""
    name = f"tw{os.getpid() % 100000}"
    proc = _start_named(name, sockdir, shim)
    try:
        supp = tmp_path / "app.supp"
        supp.write_text("leak:^load_config$\n")
        saved = tmp_path / "saved.json"
        pid = str(proc.pid)
        assert _cli("scan", pid, "--json", "--limit", "1000", "-o", str(saved)).returncode == 1
        assert proc.stdin is not None
        proc.stdin.write(b"grow\n")
        proc.stdin.flush()
        assert read_line(proc).startswith("GROWN")
        config = tmp_path / "d.toml"
        config.write_text(
            f'scan_interval = 1\nhistory = ""\nsuppressions = "{supp}"\n'
            f'[[targets]]\nname = "{name}"\nbaseline = "{saved}"\n'
        )
        d = daemons.start("--config", str(config))
        watch = subprocess.Popen(
            [sys.executable, "-m", "unreachable.cli.main", "watch", "--remote", d.address]
            + ["--timeout", "60"]
            + ["--pid", pid],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert watch.stdout is not None
            lines = [watch.stdout.readline()]  # the time and summary line
            # The report ends with the Suppressions used block and a blank line.
            while line := watch.stdout.readline():
                lines.append(line)
                if line == "\n" and lines[-2] == "-" * 53 + "\n":
                    break
        finally:
            watch.kill()
            watch.wait()
        local = _cli("scan", pid, "--suppressions", str(supp), "--baseline", str(saved))
        assert local.returncode == 1, local.stderr
        assert "".join(lines[1:]) == local.stdout
        assert local.stdout.splitlines()[:3] == [
            "  196 bytes in 3 unreachable allocations",
            "  ABI: 'x86_64'",
            f"  new or grown since {saved}: 2 sites; baseline 175 bytes in 4 allocations,"
            " now 340 bytes in 6 allocations",
        ]
        assert local.stdout.splitlines()[-6:-1] == [
            "-" * 53,
            "Suppressions used:",
            "  count      bytes template",
            "      1         31 ^load_config$",
            "-" * 53,
        ]
    finally:
        proc.kill()
        proc.wait()
