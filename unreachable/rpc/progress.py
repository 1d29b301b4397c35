"""A one-line progress bar on a terminal's stderr (no dependency: six fixed stages)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

STEPS = ("started", "attached", "captured", "allocations", "marked", "folded", "done")
WIDTH = 24


class StageBar:
    def __init__(self, stream: TextIO, label: str) -> None:
        self._stream = stream
        self._label = label
        self._shown = False

    def update(self, stage: str, elapsed_ms: float) -> None:
        step = STEPS.index(stage) + 1 if stage in STEPS else 0
        filled = WIDTH * step // len(STEPS)
        bar = "#" * filled + "-" * (WIDTH - filled)
        self._stream.write(f"\r\x1b[K{self._label} [{bar}] {stage} {elapsed_ms:.0f} ms")
        self._stream.flush()
        self._shown = True

    def note(self, started: float) -> Callable[[str], None]:
        """A local scan's progress callback: its stages, timed from `started`
        (time.monotonic())."""
        return lambda stage: self.update(stage, (time.monotonic() - started) * 1000)

    def close(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False
