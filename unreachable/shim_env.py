"""The environment a program needs to run under the shim.

One place builds it, so `unreachable-cli run`, the benchmarks and the docs'
systemd drop-in agree on what "running under the shim" means.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

OPTIONS_ENV = "UNREACHABLE_MALLOC_OPTIONS"
TUNABLES_ENV = "GLIBC_TUNABLES"
# glibc's own switch (2.35+): its malloc madvise()s the brk heap for
# transparent huge pages and grows it in 2 MiB steps. A fork snapshot then
# copies one page-table entry per 2 MiB instead of 512 (docs/pause.md).
HUGE_PAGE_TUNABLE = "glibc.malloc.hugetlb=1"
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def with_tunable(tunables: str, tunable: str) -> str:
    """Add NAME=VALUE to a GLIBC_TUNABLES string unless NAME is set already:
    a value the user chose wins."""
    name = tunable.split("=", 1)[0]
    present = [t for t in tunables.split(":") if t]
    if any(t.split("=", 1)[0] == name for t in present):
        return tunables
    return ":".join([*present, tunable])


def shim_environment(
    base: Mapping[str, str],
    shim: str | Path,
    options: str | None = None,
    huge_pages: bool = False,
) -> dict[str, str]:
    """BASE with the shim preloaded first (other preloads kept after it)."""
    env = dict(base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim}:{preload}" if preload else str(shim)
    if options is not None:
        env[OPTIONS_ENV] = options
    if huge_pages:
        env[TUNABLES_ENV] = with_tunable(env.get(TUNABLES_ENV, ""), HUGE_PAGE_TUNABLE)
    return env


def huge_pages_unavailable() -> str | None:
    """Why --huge-pages does less than it says here, or None.

    glibc honours the tunable for its brk heap only when the kernel's THP
    mode is "madvise"; with "always" the kernel backs aligned heap ranges by
    itself, with "never" nothing does. The shim's collapsing of glibc's
    per-thread arenas (MADV_COLLAPSE) works in every mode of a kernel with
    transparent huge pages (Linux 6.1+).
    """
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        return "this kernel has no transparent huge pages: --huge-pages changes nothing"
    if "[never]" in setting:
        return (
            f"transparent huge pages are disabled ({THP_SETTING}: never): glibc's brk heap "
            "stays on 4 KiB pages; only its per-thread arenas are collapsed onto huge pages"
        )
    if "[always]" in setting:
        return (
            f"the kernel backs glibc's brk heap with huge pages where it can by itself "
            f"({THP_SETTING}: always); --huge-pages still collapses glibc's per-thread arenas"
        )
    return None
