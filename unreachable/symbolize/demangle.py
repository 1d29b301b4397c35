"""Demangle C++ (and Rust) names with binutils' c++filt, in one batch, in a subprocess.

A subprocess isolates crashes on hostile names (demanglers overflow their
stack on crafted input) and one batch costs ~7 us a name. If the batch
fails, it is split in halves until the offending names are isolated; they
stay mangled. Symbol version suffixes (``@GLIBC_2.2.5``, ``@@GLIBCXX_3.4``)
are stripped first, and names longer than MAX_NAME are not demangled.
"""

from __future__ import annotations

import shutil
import subprocess

MAX_NAME = 8192
TIMEOUT_S = 30


def strip_version(name: str) -> str:
    return name.split("@", 1)[0]


def _demanglable(name: str) -> bool:
    return (
        name.startswith(("_Z", "_R"))
        and len(name) <= MAX_NAME
        and not any(c.isspace() for c in name)
    )


def _run(cxxfilt: str, names: list[str]) -> list[str] | None:
    try:
        out = subprocess.run(
            [cxxfilt],
            input="\n".join(names) + "\n",
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if len(out) == len(names) else None


def _batch(cxxfilt: str, names: list[str], table: dict[str, str], depth: int = 0) -> None:
    out = _run(cxxfilt, names)
    if out is not None:
        table.update(zip(names, out, strict=True))
        return
    if len(names) == 1 or depth > 16:
        return  # this name breaks c++filt: it stays mangled
    mid = len(names) // 2
    _batch(cxxfilt, names[:mid], table, depth + 1)
    _batch(cxxfilt, names[mid:], table, depth + 1)


def demangle_all(names: set[str] | list[str]) -> dict[str, str]:
    """name -> demangled name (or the name without its version suffix)."""
    plain = {n: strip_version(n) for n in names}
    mangled = sorted({p for p in plain.values() if _demanglable(p)})
    table: dict[str, str] = {}
    cxxfilt = shutil.which("c++filt")
    if mangled and cxxfilt:
        _batch(cxxfilt, mangled, table)
    return {n: table.get(p, p) or p for n, p in plain.items()}
