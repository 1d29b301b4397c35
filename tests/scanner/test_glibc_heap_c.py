"""native/scanner/glibc_heap.c over a synthetic glibc 2.36 heap, under
ASan+UBSan (tests/scanner/c/glibc_heap_test.c): the live chunks of two
arenas and a chunk mmap'ed alone, minus tcache, fastbin and bin; each check
refusing a broken heap; random damage refused or walked, never a crash."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import (
    NATIVE_DIR,
    UNIT_TEST_INCLUDE,
    build,
    native_sources,
    run_unit_test,
)

SCANNER = NATIVE_DIR / "scanner"


def test_glibc_heap_walk_under_sanitizers() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "glibc_heap_test.c",
            *native_sources("scanner", "glibc_heap.c"),
        ],
        name="glibc_heap_test",
        cflags=[f"-I{SCANNER}", f"-I{UNIT_TEST_INCLUDE}"],
        sanitize=True,
    )
    assert run_unit_test(exe).strip() == "ok glibc_heap"
