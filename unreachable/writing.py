"""Write a command's result to stdout or to a file, text or binary alike.

Below cli/ because triage's --print-suppressions writes too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from unreachable.errors import InvalidArgument


def write_output(data: str | bytes, path: str | None) -> None:
    if path:
        try:
            with open(path, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        except OSError as e:
            raise InvalidArgument(f"cannot write {path}: {e.strerror or e}") from None
        return
    if isinstance(data, bytes):
        if sys.stdout.isatty():
            raise InvalidArgument("pprof and lmu-records output is binary: use -o FILE or a pipe")
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    sys.stdout.write(data)
    sys.stdout.flush()


def write_chunks(chunks: Iterable[str], path: str | None) -> None:
    """Text written as it is produced (a big heap dump's view never sits in memory)."""
    if not path:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return
    try:
        with open(path, "w") as f:
            for chunk in chunks:
                f.write(chunk)
    except OSError as e:
        raise InvalidArgument(f"cannot write {path}: {e.strerror or e}") from None
