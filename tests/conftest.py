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
