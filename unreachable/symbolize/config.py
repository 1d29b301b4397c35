"""Where symbolization looks for separate debug files and keeps its cache.

Environment (read when a Symbolizer is created, so tests and the daemon can
set them):

- ``UNREACHABLE_CACHE_DIR``: the on-disk symbol cache; empty or ``off``
  disables it. Default ``$XDG_CACHE_HOME/unreachable`` (``~/.cache/unreachable``),
  or ``/var/cache/unreachable`` when running as root.
- ``UNREACHABLE_DEBUG_DIRS``: colon-separated global debug directories, as
  gdb's ``debug-file-directory``. Default ``/usr/lib/debug``.
- ``UNREACHABLE_SYMBOL_BUDGET``: seconds one symbolization (one scan, one
  heap dump) may spend opening and reading files; frames it has not reached
  then stay raw. Default 30; ``0`` or ``off``: no limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
# A cold symbolization of big C++ programs with full DWARF takes a few
# seconds; 30 s is far past that and well inside the daemon's scan timeout.
DEFAULT_SYMBOL_BUDGET = 30.0


def default_cache_dir() -> str | None:
    env = os.environ.get("UNREACHABLE_CACHE_DIR")
    if env is not None:
        return None if env.strip() in ("", "off", "0", "none") else env
    if os.geteuid() == 0:
        return "/var/cache/unreachable"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "unreachable")


def default_debug_dirs() -> tuple[str, ...]:
    env = os.environ.get("UNREACHABLE_DEBUG_DIRS")
    if env is None:
        return DEFAULT_DEBUG_DIRS
    return tuple(d for d in env.split(":") if d)


def parse_budget(text: str) -> float | None:
    """Seconds (> 0), or None for "no limit" ("0", "off", "none"); ValueError."""
    if text.strip().lower() in ("0", "off", "none", "inf"):
        return None
    value = float(text)
    if not 0 < value < 1e6:
        raise ValueError(f"symbol budget must be between 0 and 1e6 seconds, not {text!r}")
    return value


def default_symbol_budget() -> float | None:
    env = os.environ.get("UNREACHABLE_SYMBOL_BUDGET")
    if env is None:
        return DEFAULT_SYMBOL_BUDGET
    try:
        return parse_budget(env)
    except ValueError:
        return DEFAULT_SYMBOL_BUDGET


@dataclass(frozen=True, slots=True)
class SymbolConfig:
    """Where symbolization caches what it read, and looks for debug files."""

    cache_dir: str | None  # None: no on-disk cache
    debug_dirs: tuple[str, ...]

    @classmethod
    def from_env(cls) -> SymbolConfig:
        return cls(default_cache_dir(), default_debug_dirs())
