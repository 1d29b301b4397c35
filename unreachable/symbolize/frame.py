"""One frame of a backtrace, the record every report carries, apart from
the symbolizer that makes it (symbolize/frames.py): a scan whose leaks have
no backtrace imports the record only, not the symbolizer's modules."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a backtrace, resolved as far as the files allowed."""

    pc: int
    map: str
    rel_pc: int
    function: str
    offset: int
    file: str = ""
    line: int = 0


def frame_to_dict(frame: Frame) -> dict[str, int | str]:
    """A frame as JSON reports, heap dumps and diffs write it."""
    return dataclasses.asdict(frame)
