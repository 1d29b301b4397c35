from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.malloc_debug.support import ProcFactory


@pytest.fixture
def procs(shim: Path, tmp_path: Path) -> Iterator[ProcFactory]:
    factory = ProcFactory(shim, tmp_path)
    yield factory
    factory.cleanup()
