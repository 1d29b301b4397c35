"""Where the native artefacts built by the package live.

importlib.resources, not __file__: with an editable install the Python
sources stay in the checkout while the built .so files live in site-packages.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHIM_NAME = "libunreachable_shim.so"


def package_file(name: str) -> Path:
    with resources.as_file(resources.files("unreachable") / name) as path:
        return Path(path)


def shim_path() -> Path:
    """Absolute path of the LD_PRELOAD shim."""
    return package_file(SHIM_NAME).resolve()


def include_dir() -> Path:
    """Directory holding the installed C headers (unreachable/abi.h, ...)."""
    return package_file("include").resolve()
