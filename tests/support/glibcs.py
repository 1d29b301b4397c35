"""Other glibc releases than this machine's, for the glibc heap walk's tests:
Debian's and Ubuntu's libc6, libc6-dev, libc6-dbg and libgcc-s1 unpacked under
tests/.glibc/SUITE/root by scripts/fetch-test-glibcs.sh (scripts/install.sh --test runs it). A
program is built against one (its crt files, libc.so and headers; the
kernel's headers are this machine's) with that release's loader as its
interpreter and its library directory as its run path, so it runs on that
glibc alone, started as any program is."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cbuild import REPO_DIR

GLIBC_DIR = REPO_DIR / "tests" / ".glibc"
FETCH = REPO_DIR / "scripts" / "fetch-test-glibcs.sh"
# Debian or Ubuntu suite -> its glibc
SUITES = {
    "bullseye": "2.31",
    "jammy": "2.35",
    "noble": "2.39",
    "trixie": "2.41",
    "questing": "2.42",
    "resolute": "2.43",
}


@dataclass(frozen=True)
class Glibc:
    suite: str
    version: str  # the package's: 2.31-13+deb11u11
    root: Path

    @property
    def libdir(self) -> Path:
        """Where the loader and libc.so.6 are (/lib before merged /usr)."""
        return self.loader.parent

    @property
    def libc(self) -> Path:
        return (self.libdir / "libc.so.6").resolve()

    @property
    def loader(self) -> Path:
        return (self.root / "lib64" / "ld-linux-x86-64.so.2").resolve()

    @property
    def debug_dir(self) -> Path:
        return self.root / "usr" / "lib" / "debug"

    def flags(self) -> tuple[list[str], list[str]]:
        """(cflags, ldflags) for tests.support.cbuild.build."""
        dev = self.root / "usr/lib/x86_64-linux-gnu"
        cflags = [
            f"--sysroot={self.root}",
            f"-B{dev}/",
            f"-L{dev}",
            f"-L{self.libdir}",
            f"-isystem{self.root}/usr/include",
            "-idirafter/usr/include/x86_64-linux-gnu",
            "-idirafter/usr/include",
        ]
        # -lrt: timer_create is librt's before 2.34. RPATH, not RUNPATH: it
        # also holds for libc's own dlopen of libgcc_s (pthread_exit), whose
        # copy here needs no newer glibc than the release.
        ldflags = [
            f"-Wl,--dynamic-linker={self.loader}",
            f"-Wl,-rpath={self.libdir}",
            "-Wl,--disable-new-dtags",
            "-lrt",
        ]
        return cflags, ldflags


@functools.cache
def _fetch(suite: str) -> None:
    """Once a session: fetch what is not there (again, when the archive was
    unreachable before)."""
    if not (GLIBC_DIR / suite / "version").exists():
        subprocess.run(["bash", str(FETCH), suite], check=True, timeout=900)


def glibc(suite: str) -> Glibc:
    """The unpacked release, fetched now if it is not there; skips the test
    when its archive could not be reached (with the fetch's reason)."""
    _fetch(suite)
    d = GLIBC_DIR / suite
    if not (d / "version").exists():
        reason = (d / "unavailable").read_text().strip()
        pytest.skip(f"glibc {SUITES[suite]} ({suite}) not fetched: {reason}")
    return Glibc(suite, (d / "version").read_text().strip(), d / "root")
