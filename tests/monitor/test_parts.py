"""Configuration, matching, journal records and sd_notify, against real sockets and /proc."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import tomllib

import pytest

from tests.monitor.conftest import SCAN_PROGRAMS, parse_journal
from unreachable.daemon import main as daemon_main
from unreachable.daemon.config import Config, ConfigError, TargetSpec, values_from_toml
from unreachable.daemon.journal import JournalHandler, encode_fields, fields
from unreachable.daemon.matching import (
    cgroup_path,
    matching,
    parse_stat,
    read_process,
    still_running,
    unit_from_cgroup,
)
from unreachable.daemon.schedule import discover
from unreachable.daemon.sdnotify import Status, run_watchdog, sd_notify, watchdog_interval


def load(text: str) -> Config:
    config = Config(**values_from_toml(tomllib.loads(text), "test.toml"))
    config.validate()
    return config


# -- configuration --


def test_toml_tables_and_flat_keys():
    c = load(
        """
        socket = "/tmp/x.sock"
        socket_mode = "0600"
        scan_interval = 60
        [[targets]]
        name = "app"
        [[targets]]
        unit = "web@*.service"
        cgroup = "/system.slice"
        [thresholds]
        leak_bytes = 10
        growth_bytes_per_hour = 5
        growth_scans = 4
        [metrics]
        listen = "127.0.0.1:0"
        [history]
        path = "/tmp/h.sqlite"
        days = 2
        """
    )
    assert c.socket_mode == 0o600 and c.scan_interval == 60.0
    assert c.targets == [
        TargetSpec(name="app"),
        TargetSpec(unit="web@*.service", cgroup="/system.slice"),
    ]
    assert (c.leak_bytes_threshold, c.growth_bytes_per_hour, c.growth_scans) == (10, 5.0, 4)
    assert (c.metrics, c.history, c.history_days) == ("127.0.0.1:0", "/tmp/h.sqlite", 2.0)
    assert load('history = ""\nmetrics = "[::1]:9"').history == ""


@pytest.mark.parametrize(
    "text, message",
    [
        ("bogus = 1", "unknown setting 'bogus'"),
        ("[thresholds]\nbogus = 1", "thresholds.bogus"),
        ("[[targets]]\nhost = 'x'", "unknown key"),
        ("[[targets]]\n", "needs name, unit or cgroup"),
        ("[metrics]\nlisten = '0.0.0.0:9465'", "loopback only"),
        ("scan_interval = 'often'", "expected float"),
        ("[thresholds]\ngrowth_scans = 1", "growth_scans >= 2"),
        ("mark_threads = 17", "mark_threads is 0"),
    ],
)
def test_bad_settings_are_one_line_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        load(text)


def test_command_line_wins_and_old_flags_still_work(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text(
        'scan_interval = 60\nsocket = "/tmp/a.sock"\n[metrics]\nlisten = "127.0.0.1:1"\n'
    )
    c = daemon_main.load_config(
        [
            "--config",
            str(path),
            "--scan-interval",
            "5",
            "--metrics",
            "127.0.0.1:2",
            "--socket-mode",
            "0640",
        ]
    )
    assert (c.scan_interval, c.metrics, c.socket, c.socket_mode) == (
        5.0,
        "127.0.0.1:2",
        "/tmp/a.sock",
        0o640,
    )


def test_history_defaults_to_the_state_directory(monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/unreachable")
    assert Config().history_path() == "/var/lib/unreachable/history.sqlite"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert Config().history_path() == ""


# -- matching --


@pytest.mark.parametrize(
    "cgroup, unit",
    [
        ("/system.slice/nginx.service", "nginx.service"),
        ("/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service"),
        ("/system.slice/foo.service/worker", "foo.service"),
        ("/user.slice/user-1000.slice/session-3.scope", "session-3.scope"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service", "user@1000.service"),
        ("/", ""),
        ("/docker/0123abcd", ""),
        ("/unreachable-test-1/system.slice/leaky.service", "leaky.service"),
        ("", ""),
    ],
)
def test_unit_from_cgroup(cgroup, unit):
    assert unit_from_cgroup(cgroup) == unit


def test_cgroup_path_prefers_the_unified_hierarchy_and_falls_back_to_name_systemd():
    assert cgroup_path("0::/system.slice/a.service\n") == "/system.slice/a.service"
    hybrid = "9:name=systemd:/system.slice/b.service\n4:memory:/x\n0::/\n"
    assert cgroup_path(hybrid) == "/system.slice/b.service"


def test_parse_stat_copes_with_parentheses_in_comm():
    fields_ = ["S", "42"] + ["0"] * 17 + ["12345"] + ["0"] * 10
    assert parse_stat(f"7 (a) (b)) {' '.join(fields_)}") == (42, 12345)


def test_spec_matching():
    spec = TargetSpec(name="worker-*", unit="app*.service", cgroup="/system.slice")
    assert spec.matches(("worker-1", "python3"), "app1.service", "/system.slice/app1.service")
    assert spec.matches(("python3", "worker-2"), "app1.service", "/system.slice/app1.service")
    assert not spec.matches(("other", ""), "app1.service", "/system.slice/app1.service")
    assert not spec.matches(("worker-1",), "", "/system.slice/app1.service")
    assert not spec.matches(("worker-1",), "app1.service", "/system.slicer/app1.service")
    assert TargetSpec(cgroup="/system.slice/").matches((), "", "/system.slice")


def test_real_processes_by_name_and_cgroup(targets):
    t = targets.start(SCAN_PROGRAMS / "globals.c")
    info = read_process(t.pid)
    assert info is not None and info.ppid == os.getpid()
    assert info.name.startswith("globals") and info.argv0.startswith("globals-")
    assert still_running(info.key) and not still_running((info.pid, info.start_time + 1))
    specs = [
        TargetSpec(name="nothing-like-it"),
        TargetSpec(name="globals-*", cgroup=info.cgroup or "/"),
    ]
    assert matching(specs, info) == specs[1]
    # discover(): the shimmed one is a candidate; a matching process without the shim
    # is one too, marked as unscannable.
    plain = subprocess.Popen(["sleep", "60"])
    try:
        found = {
            c.info.pid: c
            for c in discover([TargetSpec(name="globals-*"), TargetSpec(name="sleep")], -1)
        }
        assert found[t.pid].unscannable == ""
        assert "does not run under the shim" in found[plain.pid].unscannable
        everything = {c.info.pid for c in discover([], -1)}
        assert t.pid in everything and plain.pid not in everything
        # the daemon's own scan subprocesses are left out, its other children are not
        assert t.pid in {c.info.pid for c in discover([], os.getpid())}
    finally:
        plain.kill()
        plain.wait()
    assert read_process(plain.pid) is None


# -- journal --


def test_encode_fields_plain_and_binary():
    data = encode_fields({"MESSAGE": "two\nlines", "PRIORITY": 4, "PAUSE_MS": 0.25})
    assert data.startswith(b"MESSAGE\n" + (9).to_bytes(8, "little") + b"two\nlines\n")
    assert parse_journal(data) == {"MESSAGE": "two\nlines", "PRIORITY": "4", "PAUSE_MS": "0.25"}
    with pytest.raises(ValueError):
        encode_fields({"lower": 1})


def _record(level: int, msg: str, **extra) -> logging.LogRecord:
    logger = logging.getLogger("unreachabled.test")
    return logger.makeRecord(logger.name, level, __file__, 1, msg, (), None, extra=extra or None)


def test_stderr_lines_carry_priority_prefixes():
    out = io.StringIO()
    h = JournalHandler(out, prefix=True)
    h.emit(_record(logging.WARNING, "a\nb"))
    h.emit(_record(logging.INFO, "c"))
    h.emit(_record(logging.DEBUG, "d"))
    h.emit(_record(logging.ERROR, "e"))
    assert out.getvalue().splitlines() == [
        "<4>unreachabled: WARNING: a",
        "<4>b",
        "<6>unreachabled: INFO: c",
        "<7>unreachabled: DEBUG: d",
        "<3>unreachabled: ERROR: e",
    ]
    plain = io.StringIO()
    JournalHandler(plain, prefix=False).emit(_record(logging.INFO, "c"))
    assert plain.getvalue() == "unreachabled: INFO: c\n"


def test_a_records_arguments_are_escaped_its_format_kept(journal):
    """What a target named (an argument) cannot start a line or reach the
    terminal, on stderr or in MESSAGE; the daemon's own format keeps its lines."""
    out = io.StringIO()
    h = JournalHandler(out, journal_socket=str(journal.path), prefix=True)
    logger = logging.getLogger("unreachabled.test")
    args = ("x\n<3>forged\x1b[2J", 7)
    h.emit(logger.makeRecord(logger.name, logging.INFO, __file__, 1, "%s: %d\nend", args, None))
    assert out.getvalue().splitlines() == [
        "<6>unreachabled: INFO: x\\x0a<3>forged\\x1b[2J: 7",
        "<6>end",
    ]
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 1, "%s", ("a\nb",), None, extra=fields(LEAK_BYTES=1)
    )
    h.emit(record)
    got = parse_journal(journal.wait_for(lambda d: b"LEAK_BYTES" in d, timeout=10))
    assert got["MESSAGE"] == "a\\x0ab"
    h.close()


def test_structured_records_go_to_the_journal_socket(journal):
    out = io.StringIO()
    h = JournalHandler(out, journal_socket=str(journal.path), prefix=True)
    h.emit(_record(logging.INFO, "plain"))  # no fields: stderr only
    h.emit(
        _record(
            logging.WARNING,
            "scan: 300 bytes",
            **fields(
                TARGET_PID=12,
                TARGET_UNIT="a.service",
                LEAK_BYTES=300,
                LEAK_COUNT=1,
                PAUSE_MS=0.5,
                NONE=None,
            ),
        )
    )
    got = parse_journal(journal.wait_for(lambda d: b"LEAK_BYTES" in d, timeout=10))
    assert got["MESSAGE"] == "scan: 300 bytes" and got["PRIORITY"] == "4"
    assert got["SYSLOG_IDENTIFIER"] == "unreachabled"
    assert (
        got["TARGET_PID"],
        got["TARGET_UNIT"],
        got["LEAK_BYTES"],
        got["LEAK_COUNT"],
        got["PAUSE_MS"],
    ) == ("12", "a.service", "300", "1", "0.5")
    assert "NONE" not in got
    assert all(b"plain" not in d for d in journal.received)
    # stderr is not the journal here ($JOURNAL_STREAM unset): both lines are on it
    assert "<4>unreachabled: WARNING: scan: 300 bytes" in out.getvalue()
    h.close()


def test_no_journal_socket_means_stderr_only(tmp_path):
    out = io.StringIO()
    h = JournalHandler(out, journal_socket=str(tmp_path / "absent.sock"), prefix=False)
    h.emit(_record(logging.INFO, "x", **fields(LEAK_BYTES=1)))
    assert out.getvalue() == "unreachabled: INFO: x\n"


def test_stderr_that_is_the_journal_gets_no_duplicate(journal, tmp_path, monkeypatch):
    with open(tmp_path / "stream", "w") as stream:
        st = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        h = JournalHandler(stream, journal_socket=str(journal.path), prefix=True)
        h.emit(_record(logging.INFO, "structured", **fields(LEAK_BYTES=1)))
        h.emit(_record(logging.INFO, "unstructured"))
        h.close()
    assert (tmp_path / "stream").read_text() == "<6>unreachabled: INFO: unstructured\n"
    journal.wait_for(lambda d: b"MESSAGE=structured" in d, timeout=10)


# -- sd_notify --


def test_sd_notify_and_status_reach_the_socket(notify, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    assert sd_notify("READY=1")
    status = Status()
    status.update(targets=2)
    status.update(last="app[1] at 10:00:00: 300 bytes in 1 leaks")
    notify.wait_for(lambda d: d == b"READY=1", timeout=10)
    got = notify.wait_for(lambda d: b"last scan" in d, timeout=10)
    assert got == b"STATUS=watching 2 targets; last scan: app[1] at 10:00:00: 300 bytes in 1 leaks"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not sd_notify("READY=1")


def test_abstract_notify_socket():
    import socket

    name = f"unreachable-test-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(10)
    try:
        os.environ["NOTIFY_SOCKET"] = "@" + name
        assert sd_notify("STOPPING=1")
        assert s.recv(100) == b"STOPPING=1"
    finally:
        os.environ.pop("NOTIFY_SOCKET", None)
        s.close()


def test_watchdog_interval_only_for_our_pid():
    me = str(os.getpid())
    assert watchdog_interval({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": me}) == 2.0
    assert watchdog_interval({"WATCHDOG_USEC": "4000000"}) == 2.0
    assert watchdog_interval({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({}) is None


def test_watchdog_pings_repeat(notify, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))

    async def go():
        task = asyncio.create_task(run_watchdog(0.01))
        try:
            await asyncio.get_running_loop().run_in_executor(
                None,
                lambda: notify.wait_for(lambda _d: notify.received.count(b"WATCHDOG=1") >= 3, 30),
            )
        finally:
            task.cancel()

    asyncio.run(go())


def test_daemon_main_help_runs():
    res = subprocess.run(
        [sys.executable, "-m", "unreachable.daemon.main", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "--metrics" in res.stdout and "--history" in res.stdout
