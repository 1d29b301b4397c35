from __future__ import annotations

import os

from unreachable.symbolize import config


def test_cache_dir_defaults(monkeypatch):
    monkeypatch.delenv("UNREACHABLE_CACHE_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert config.default_cache_dir() == "/var/cache/unreachable"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert config.default_cache_dir() == "/xdg/unreachable"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/home/u")
    assert config.default_cache_dir() == "/home/u/.cache/unreachable"
    monkeypatch.setenv("UNREACHABLE_CACHE_DIR", "/state/symbols")
    assert config.default_cache_dir() == "/state/symbols"
    monkeypatch.setenv("UNREACHABLE_CACHE_DIR", "off")
    assert config.default_cache_dir() is None


def test_debug_dirs(monkeypatch):
    monkeypatch.delenv("UNREACHABLE_DEBUG_DIRS", raising=False)
    assert config.default_debug_dirs() == ("/usr/lib/debug",)
    monkeypatch.setenv("UNREACHABLE_DEBUG_DIRS", "/a:/b::")
    assert config.default_debug_dirs() == ("/a", "/b")
