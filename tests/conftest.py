from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.targets import TargetFactory


@pytest.fixture(scope="session")
def shim() -> Path:
    from unreachable._paths import shim_path

    path = shim_path()
    assert path.exists(), f"shim not built: {path} (pip install -e .)"
    return path


@pytest.fixture
def targets(shim: Path) -> Iterator[TargetFactory]:
    factory = TargetFactory(shim)
    yield factory
    factory.cleanup()


# Tests that need the machine to allow something a sandbox may forbid (real
# systemd as PID 1 of a namespace, Yama). CI logs say how many of them ran.
MACHINE_DEPENDENT = {
    "systemd integration": "tests/monitor/test_systemd.py",
    "Yama ptrace_scope": "tests/memunreachable/test_memunreachable.py::test_non_root_under_yama",
}


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    del exitstatus, config
    for label, prefix in MACHINE_DEPENDENT.items():
        ran = skipped = 0
        for key in ("passed", "failed", "skipped", "error"):
            for report in terminalreporter.stats.get(key, []):
                nodeid = getattr(report, "nodeid", "")
                if not nodeid.startswith(prefix) or getattr(report, "when", "call") == "teardown":
                    continue
                if key == "skipped":
                    skipped += 1
                elif getattr(report, "when", "call") == "call":
                    ran += 1
        terminalreporter.write_line(f"{label} tests: {ran} ran, {skipped} skipped")
