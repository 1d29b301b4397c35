"""native/mark/entry_order.c (a registry's entries put in address order by
both readers) under ASan+UBSan: tests/mark/c/entry_order_test.c."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import (
    NATIVE_DIR,
    UNIT_TEST_INCLUDE,
    build,
    native_sources,
    run_unit_test,
)


def test_entry_order_under_sanitizers() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "entry_order_test.c",
            *native_sources("mark", "entry_order.c", "radix_sort.c", "alloc.c"),
        ],
        name="entry_order_test",
        cflags=[f"-I{NATIVE_DIR / 'mark'}", f"-I{UNIT_TEST_INCLUDE}"],
        sanitize=True,
    )
    assert run_unit_test(exe).strip() == "ok entry_order"
