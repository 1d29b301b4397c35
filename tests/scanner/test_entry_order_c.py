"""native/mark/entry_order.c (a registry's entries put in address order by
both readers) under ASan+UBSan: tests/scanner/c/entry_order_test.c."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import REPO_DIR, UNIT_TEST_INCLUDE, build, run_unit_test

MARK = REPO_DIR / "native" / "mark"


def test_entry_order_under_sanitizers() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "entry_order_test.c",
            *(MARK / name for name in ("entry_order.c", "radix_sort.c", "alloc.c")),
        ],
        name="entry_order_test",
        cflags=[f"-I{MARK}", f"-I{UNIT_TEST_INCLUDE}"],
        sanitize=True,
    )
    assert run_unit_test(exe).strip() == "ok entry_order"
