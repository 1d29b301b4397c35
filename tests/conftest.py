from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.targets import TargetFactory
from unreachable.symbolize import objects

TESTS_DIR = Path(__file__).resolve().parent


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


# Tests that read symbols in this process, and compare what they see: each
# gets a symbol cache of its own. Elsewhere the user's cache stays, so that
# the scans the other tests run do not each parse libc's tables again.
ISOLATED_SYMBOL_CACHES = ("analysis", "heapdump", "symbolize")


@pytest.fixture(autouse=True)
def _isolated_symbol_caches(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    """No such test reads or writes the user's symbol cache or sees another test's objects."""
    if request.path.relative_to(TESTS_DIR).parts[0] not in ISOLATED_SYMBOL_CACHES:
        yield
        return
    monkeypatch.setenv("UNREACHABLE_CACHE_DIR", str(tmp_path_factory.mktemp("symcache")))
    objects.clear_memory_cache()
    yield
    objects.clear_memory_cache()


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
