"""unreachable-cli shim-path: where the LD_PRELOAD shim (or its headers) is."""

from __future__ import annotations

import argparse

from unreachable._paths import include_dir, shim_path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "shim-path",
        help="print the absolute path of the LD_PRELOAD shim",
        description="Print the absolute path of the LD_PRELOAD shim (libunreachable_shim.so) "
        "for LD_PRELOAD= lines, or with --include the directory of its C headers "
        "(unreachable/memunreachable.h, unreachable/malloc_debug.h) for -I.",
    )
    p.add_argument(
        "--include", action="store_true", help="print the directory of the C headers instead"
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    print(include_dir() if args.include else shim_path())
    return 0
