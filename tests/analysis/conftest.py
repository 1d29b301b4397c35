from __future__ import annotations

import pytest

from unreachable.symbolize import objects


@pytest.fixture(autouse=True)
def _isolated_symbol_caches(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's symbol cache or sees another test's objects."""
    monkeypatch.setenv("UNREACHABLE_CACHE_DIR", str(tmp_path_factory.mktemp("symcache")))
    objects.clear_memory_cache()
    yield
    objects.clear_memory_cache()
