"""deploy/unreachabled.service under the real systemd, booted as PID 1 of a private namespace.

The namespace (pid, mount, uts, ipc, cgroup; the network is the host's)
boots /lib/systemd/systemd over an overlay of / with a tmpfs upper layer
(boot_systemd.sh), with the deploy files installed as an operator would, a
test drop-in (short watchdog, no restart, the test's Python visible under
ProtectHome), and leaky.service: programs/timer_leak.c under the shim
through deploy/shim.conf. Checked: READY (the unit is active), a scheduled
scan finds the leak, the journal has its structured fields, the metrics
endpoint shows the bytes, growth is reported, the history CLI reads it, and
a daemon that stops pinging (SIGSTOP) is killed by the watchdog.

Skipped, with the reason, where the machine cannot do this: not root, no
systemd or unshare, no overlay or cgroup mounts. Whatever happens, the
namespace's PID 1 is killed (which ends every process in it) and the
cgroups made for it are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.monitor.conftest import PROGRAMS
from tests.monitor.test_scheduler import metric
from tests.support.cbuild import build

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent.parent / "deploy"
SYSTEMD = Path("/lib/systemd/systemd")
BOOT_WAIT = 60.0
WAIT = 180.0


def _skip_unless_possible() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (unshare, mount, cgroups)")
    if not SYSTEMD.exists():
        pytest.skip(f"systemd is not installed ({SYSTEMD})")
    for tool in ("unshare", "nsenter", "pivot_root", "systemd-sysusers"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if os.getpid() == 1 or Path("/run/systemd/system").exists():
        pass  # a host systemd is fine: ours runs in its own namespaces


def _cgroup_mounts() -> dict[str, str]:
    """/proc/self/cgroup's hierarchy key ("", "name=systemd", "cpu,cpuacct") -> mount point."""
    mounts: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _source, options = right.split()[:3]
            point = left.split()[4]
            if fstype == "cgroup2":
                mounts.setdefault("", point)
            elif fstype == "cgroup":
                names = [o for o in options.split(",") if o not in ("rw", "ro") and "=" not in o]
                named = [o for o in options.split(",") if o.startswith("name=")]
                mounts.setdefault(",".join(names + named), point)
    return mounts


def _make_cgroups(name: str) -> list[Path]:
    """A fresh child of this process's cgroup in every hierarchy (the namespace's root)."""
    mounts = _cgroup_mounts()
    made = []
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            mount = mounts.get(controllers)
            if mount is None:
                continue
            d = Path(mount + path.rstrip("/")) / name
            d.mkdir()
            made.append(d)
            if "cpuset" in controllers.split(","):  # a v1 cpuset starts empty: no task fits
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (d / knob).write_text((d.parent / knob).read_text())
    return made


def _remove_cgroups(dirs: list[Path]) -> None:
    deadline = time.monotonic() + 30
    for top in dirs:
        while top.exists():
            subdirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in [*subdirs, top]:
                try:
                    d.rmdir()
                except OSError:
                    pass
            if not top.exists() or time.monotonic() > deadline:
                break
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Machine:
    def __init__(self, pid1: int) -> None:
        self.pid1 = pid1

    def run(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nsenter", "-t", str(self.pid1), "-m", "-p", "-u", "-i", "-C", "-r", "-w", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def show(self, unit: str, prop: str) -> str:
        return self.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()

    def journal(self, *args: str) -> str:
        return self.run("journalctl", "--no-pager", *args).stdout

    def wait(self, what: str, check: Callable[[], object], timeout: float = WAIT) -> object:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                status = self.run(
                    "systemctl", "status", "--no-pager", "-n", "40", "unreachabled", "leaky"
                )
                raise AssertionError(
                    f"timed out waiting for {what}\n{status.stdout}{status.stderr}"
                )
            time.sleep(0.5)


def _stage(staging: Path, *, port: int, shim: Path, leaky: Path) -> None:
    etc = staging / "etc"
    units = etc / "systemd" / "system"
    units.mkdir(parents=True)
    shutil.copy(DEPLOY / "unreachabled.service", units)
    shutil.copy(DEPLOY / "unreachable.sysusers", staging / "unreachable.sysusers")
    # The installed console script, where systemd's PATH finds it.
    bin_dir = staging / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    script = Path(sys.executable).parent / "unreachabled"
    if not script.exists():
        pytest.skip(f"unreachabled is not installed next to {sys.executable}")
    shutil.copy(script, bin_dir / "unreachabled")
    # Test drop-in: a short watchdog, no restart (Result= stays), and the test's
    # Python (maybe under /root) visible despite ProtectHome.
    drop = units / "unreachabled.service.d"
    drop.mkdir()
    lines = ["[Service]", "WatchdogSec=4s", "Restart=no"]
    homes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, HERE)}
    hidden = sorted(str(p) for p in homes if p.parts[1:2] in (("root",), ("home",), ("run",)))
    if hidden:
        lines += ["ProtectHome=tmpfs", "BindReadOnlyPaths=" + " ".join(hidden)]
    (drop / "test.conf").write_text("\n".join(lines) + "\n")
    (etc / "unreachable").mkdir()
    (etc / "unreachable" / "unreachabled.toml").write_text(
        'socket = "/run/unreachable/unreachabled.sock"\n'
        'socket_group = "unreachable"\n'
        'notify_socket = "/run/unreachable/notify.sock"\n'
        "scan_interval = 2\n"
        "[[targets]]\n"
        'unit = "leaky.service"\n'
        "[thresholds]\n"
        "leak_bytes = 1\n"
        "growth_bytes_per_hour = 1000\n"
        "growth_scans = 3\n"
        "[metrics]\n"
        f'listen = "127.0.0.1:{port}"\n'
    )
    (units / "leaky.service").write_text(
        f"[Unit]\nDescription=leaks on a timer\n[Service]\nExecStart={leaky} 1000 50\n"
    )
    (units / "leaky.service.d").mkdir()
    dropin = (DEPLOY / "shim.conf").read_text()
    default = next(
        line.split("=", 2)[2]
        for line in dropin.splitlines()
        if line.startswith("Environment=LD_PRELOAD=")
    )
    (units / "leaky.service.d" / "unreachable.conf").write_text(dropin.replace(default, str(shim)))
    (units / "test.target").write_text(
        "[Unit]\nDescription=unreachable test\nWants=unreachabled.service leaky.service\n"
    )


def _skip_if_under_private_tmp() -> None:
    # The unit under test has PrivateTmp=yes and the booted root gets a fresh
    # /tmp, so a checkout or interpreter living under /tmp cannot be reached.
    for p in (HERE, Path(sys.prefix), Path(sys.executable).resolve()):
        if p.resolve().parts[1:2] == ("tmp",):
            pytest.skip(f"{p} lies under /tmp, which the booted systemd replaces")


@pytest.fixture
def machine(tmp_path: Path, shim: Path) -> Iterator[tuple[Machine, int]]:
    _skip_unless_possible()
    _skip_if_under_private_tmp()
    port = _free_port()
    leaky = build(PROGRAMS / "timer_leak.c")
    staging = tmp_path / "staging"
    _stage(staging, port=port, shim=shim, leaky=leaky)
    base = Path(tempfile.mkdtemp(prefix="ur-systemd-", dir="/var/tmp"))
    name = f"unreachable-test-{os.getpid()}-{int(time.monotonic() * 1000)}"
    try:
        cgroups = _make_cgroups(name)
    except OSError as e:
        base.rmdir()
        pytest.skip(f"cannot make cgroups for the namespace: {e}")
    log = tmp_path / "boot.log"
    proc = None
    pid1 = 0
    try:
        procs = [str(d / "cgroup.procs") for d in cgroups]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    "sh",
                    "-c",
                    'for f in "$@"; do echo $$ > "$f" || exit 77; done; '
                    "exec env container=unreachable-test unshare --pid --fork --mount --uts "
                    "--ipc --cgroup --propagation private "
                    f"/bin/sh {HERE / 'boot_systemd.sh'} {base} {staging}",
                    "sh",
                    *procs,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + BOOT_WAIT
        while not pid1:
            if proc.poll() is not None:
                text = log.read_text(errors="replace").strip()
                if proc.returncode == 77 or "Operation not permitted" in text:
                    pytest.skip(f"cannot boot systemd in a namespace here: {text[-300:]}")
                raise AssertionError(f"boot failed ({proc.returncode}): {text}")
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            try:
                kids = children.read_text().split()
            except OSError:
                kids = []
            for kid in kids:
                try:
                    if os.readlink(f"/proc/{kid}/exe").endswith("/systemd"):
                        pid1 = int(kid)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise AssertionError(f"systemd did not start: {log.read_text(errors='replace')}")
            time.sleep(0.1)
        m = Machine(pid1)
        m.wait(
            "systemd to run",
            lambda: (
                m.run("systemctl", "is-system-running").stdout.strip() in ("running", "degraded")
            ),
            BOOT_WAIT,
        )
        yield m, port
    finally:
        if pid1:
            try:
                os.kill(pid1, 9)  # ends every process of the namespace
            except ProcessLookupError:
                pass
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
            proc.wait(timeout=30)
        _remove_cgroups(cgroups)
        try:
            base.rmdir()
        except OSError:
            pass


def test_unit_under_real_systemd(machine):
    m, port = machine

    # READY: a Type=notify unit is active only after READY=1.
    m.wait(
        "unreachabled to be active",
        lambda: m.show("unreachabled.service", "ActiveState") == "active",
    )
    assert m.show("leaky.service", "ActiveState") == "active"
    # A scan the OOM killer takes (under MemoryMax=) must not stop the daemon.
    assert m.show("unreachabled.service", "OOMPolicy") == "continue"
    m.wait(
        "STATUS= naming the watched target",
        lambda: "watching 1 target" in m.show("unreachabled.service", "StatusText"),
    )
    leaky_pid = int(m.show("leaky.service", "MainPID"))

    # A scheduled scan found the leak; the journal has the structured fields.
    def scanned() -> str:
        out = m.journal("-u", "unreachabled.service", "-o", "verbose", "TARGET_UNIT=leaky.service")
        return out if "scheduled scan" in out and "LEAK_BYTES=" in out else ""

    verbose = m.wait("a scheduled scan in the journal", scanned)
    for field in (
        f"TARGET_PID={leaky_pid}",
        "TARGET_UNIT=leaky.service",
        "LEAK_COUNT=",
        "PAUSE_MS=",
        "SYSLOG_IDENTIFIER=unreachabled",
        "PRIORITY=4",
    ):
        assert field in verbose, field
    assert "LEAK_BYTES=0\n" not in verbose

    # Growth is reported (journal, with its call site).
    grow = m.wait(
        "growth in the journal",
        lambda: (lambda o: o if "leak growing" in o else "")(
            m.journal("-u", "unreachabled.service", "-o", "verbose", "TARGET_UNIT=leaky.service")
        ),
    )
    assert "LEAK_SITE=" in grow and "LEAK_GROWTH_BYTES_PER_HOUR=" in grow and "leak_one" in grow

    # The metrics endpoint (the namespace shares the host's network).
    def scraped() -> float:
        try:
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                .read()
                .decode()
            )
        except OSError:
            return 0.0
        return metric(text, "unreachable_leak_bytes", unit="leaky.service") or 0.0

    assert m.wait("leak bytes on /metrics", scraped) > 0

    # Plain log lines went through stderr with priorities.
    plain = m.journal(
        "-u", "unreachabled.service", "-o", "verbose", "-p", "info", "--grep", "ready"
    )
    assert "PRIORITY=6" in plain

    # The history in the StateDirectory, read by the CLI.
    res = m.run(
        sys.executable,
        "-m",
        "unreachable.cli.main",
        "history",
        "--unit",
        "leaky.service",
        "--json",
        "--db",
        "/var/lib/unreachable/history.sqlite",
    )
    assert res.returncode == 0, res.stderr
    scans = json.loads(res.stdout)["scans"]
    assert scans and all(s["unit"] == "leaky.service" for s in scans)
    assert max(s["leak_bytes"] for s in scans) > 0

    # The hardening left the scan working: the history proves it; the sockets' mode and group:
    res = m.run("stat", "-c", "%a %G", "/run/unreachable", "/run/unreachable/unreachabled.sock")
    assert res.stdout.split("\n")[:2] == ["750 unreachable", "660 unreachable"], (
        res.stdout + res.stderr
    )

    # A daemon that stops pinging is killed by the watchdog.
    main_pid = m.show("unreachabled.service", "MainPID")
    res = m.run("kill", "-STOP", main_pid)
    assert res.returncode == 0, res.stderr
    m.wait("the watchdog", lambda: m.show("unreachabled.service", "Result") == "watchdog", 60)

    # systemd logs "Watchdog timeout (limit 4s)!" first and "Failed with result
    # 'watchdog'" a moment later: either records the kill, in whichever case.
    def watchdog_logged() -> bool:
        out = m.journal("-u", "unreachabled.service", "--grep", "[Ww]atchdog")
        return "watchdog" in out.lower()  # not "-- No entries --"

    m.wait("the watchdog in the journal", watchdog_logged)
