"""deploy/: every unit and drop-in passes `systemd-analyze verify` with no output at all.

verify exits 0 on unknown keys and only warns, so any output is a failure.
It runs with --root on a scratch tree holding the system's unit files, the
deploy files where an operator installs them, and stubs for the programs
they start (the unit finds `unreachabled` in systemd's fixed PATH).
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from unreachable.daemon.config import Config, values_from_toml

DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (scripts/install.sh installs systemd)")
    if not SYSTEM_UNITS.is_dir():
        pytest.skip(f"no {SYSTEM_UNITS}")
    r = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, r / "usr/lib/systemd/system", symlinks=True)
    etc = r / "etc/systemd/system"
    etc.mkdir(parents=True)
    bin_dir = r / "usr/local/bin"
    bin_dir.mkdir(parents=True)
    for stub in ("unreachabled", "myapp"):
        (bin_dir / stub).write_text("#!/bin/sh\n")
        (bin_dir / stub).chmod(0o755)
    shutil.copy(DEPLOY / "unreachabled.service", etc)
    (etc / "myapp.service").write_text("[Service]\nExecStart=/usr/local/bin/myapp\n")
    (etc / "myapp.service.d").mkdir()
    shutil.copy(DEPLOY / "shim.conf", etc / "myapp.service.d" / "unreachable.conf")
    return r


def verify(root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_units_verify_without_any_output(root: Path) -> None:
    res = verify(root, "unreachabled.service", "myapp.service")
    assert res.stdout == "" and res.stderr == "", res.stdout + res.stderr
    assert res.returncode == 0


def test_verify_would_see_a_bad_key_in_the_drop_in(root: Path) -> None:
    # The check above means something only if verify reads the drop-in.
    conf = root / "etc/systemd/system/myapp.service.d/unreachable.conf"
    conf.write_text(conf.read_text() + "NoSuchSetting=1\n")
    res = verify(root, "myapp.service")
    assert "NoSuchSetting" in res.stderr


def test_unit_settings_the_issue_requires() -> None:
    text = (DEPLOY / "unreachabled.service").read_text()
    lines = {line.strip() for line in text.splitlines()}
    for want in (
        "Type=notify",
        "RuntimeDirectory=unreachable",
        "RuntimeDirectoryMode=0750",
        "Group=unreachable",
        "StateDirectory=unreachable",
        "Environment=GRPC_ENABLE_FORK_SUPPORT=0",
        "Environment=UNREACHABLE_CACHE_DIR=%S/unreachable/symbols",
        "CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "SystemCallFilter=@system-service ptrace pidfd_getfd",
        # the stop's tracer thread at realtime priority 1 (docs/pause.md)
        "RestrictRealtime=no",
        "LimitRTPRIO=1",
        "ExecStart=unreachabled --config /etc/unreachable/unreachabled.toml",
    ):
        assert want in lines, want
    assert any(line.startswith("WatchdogSec=") for line in lines)
    for breaks_ptrace in ("ProtectProc=", "ProcSubset=", "PrivateUsers=", "PrivatePIDs="):
        assert not any(line.startswith(breaks_ptrace) for line in lines)
    assert not list(DEPLOY.glob("*.socket"))


def test_example_config_loads() -> None:
    path = DEPLOY / "unreachabled.toml"
    config = Config(**values_from_toml(tomllib.loads(path.read_text()), str(path)))
    config.validate()
    assert {t.unit for t in config.targets} >= {"myapp.service"}
    assert any(t.name for t in config.targets) and any(t.cgroup for t in config.targets)
    assert config.metrics.startswith("127.0.0.1:")
    assert config.leak_bytes_threshold > 0 and config.growth_bytes_per_hour > 0


def test_sysusers_file_declares_the_group() -> None:
    assert "g unreachable" in (DEPLOY / "unreachable.sysusers").read_text()
