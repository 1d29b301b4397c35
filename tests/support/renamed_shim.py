"""A target started under a copy of the shim with another file name, as a
packager may install it (unreachable/capture/descriptor.py finds it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.targets import Target, TargetFactory, wait_for_helper


def start_renamed(
    targets: TargetFactory, shim: Path, directory: Path, program: Path, options: str = ""
) -> tuple[Target, Path]:
    """program started with LD_PRELOAD naming a copy of the shim called
    libmemhooks.so in directory, once its helper runs; and the copy's path."""
    renamed = directory / "libmemhooks.so"
    shutil.copyfile(shim, renamed)
    env = {"LD_PRELOAD": str(renamed)}
    if options:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    target = targets.start(program, preload=False, env=env, wait_helper=False)
    assert wait_for_helper(target.pid)
    return target, renamed
