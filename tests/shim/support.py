"""Build the shim test programs and run them with the shim preloaded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.cbuild import REPO_DIR, UNIT_TEST_INCLUDE, build, native_sources

PROGRAMS = Path(__file__).resolve().parent / "programs"
SHIM_SRC = REPO_DIR / "native" / "shim"
# Tests check memory after free on purpose (is the pointer still registered?).
CFLAGS = ["-Wno-use-after-free"]


def program(name: str, *, cxx: bool = False, ldflags: list[str] | None = None) -> Path:
    return build(PROGRAMS / name, cflags=CFLAGS, cxx=cxx, ldflags=ldflags)


def unit(name: str, *shim_sources: str) -> Path:
    """A program compiled together with shim sources (each one CMake builds
    the shim from), under ASan/UBSan."""
    srcs = [PROGRAMS / name, *native_sources("shim", *shim_sources)]
    return build(srcs, cflags=[f"-I{SHIM_SRC}", f"-I{UNIT_TEST_INCLUDE}"], sanitize=True)


def run(
    exe: Path,
    *args: str,
    shim: Path | None,
    options: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    drop = ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    if options is not None:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    return subprocess.run(
        [str(exe), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def run_ok(exe: Path, *args: str, shim: Path | None, options: str | None = None) -> str:
    result = run(exe, *args, shim=shim, options=options)
    assert result.returncode == 0, (
        f"{exe.name} {' '.join(args)} exited {result.returncode}\n"
        f"stdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result.stdout
