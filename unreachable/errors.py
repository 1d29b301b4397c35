"""Errors a scan reports to its user, each with one line and an exit code.

The CLI prints str(error) on one line and exits with `exit_code`; the daemon
maps `grpc_status` onto its reply. Anything else escaping is a bug.
"""

from __future__ import annotations

import errno

EXIT_NO_LEAKS = 0
EXIT_LEAKS = 1
EXIT_FAILED = 2


class ScanError(Exception):
    """A scan could not be done; the message is one line for the user."""

    exit_code = EXIT_FAILED
    grpc_status = "INTERNAL"


class TargetNotFound(ScanError):
    grpc_status = "NOT_FOUND"


class TargetPermissionDenied(ScanError):
    grpc_status = "PERMISSION_DENIED"


class TargetNotShimmed(ScanError):
    grpc_status = "FAILED_PRECONDITION"


class TargetUnscannable(ScanError):
    """Zombie, kernel thread, ourselves, already traced, or vanished mid-scan."""

    grpc_status = "FAILED_PRECONDITION"


class InvalidArgument(ScanError):
    grpc_status = "INVALID_ARGUMENT"


class ScannerOutOfMemory(ScanError):
    """The scanner's own memory limit cannot hold the sweep this target needs."""

    grpc_status = "RESOURCE_EXHAUSTED"


class MarkReadsTooMuch(ScanError):
    """The mark, reading the target through a cache smaller than the heap,
    would read its memory over and over (the heap's order defeats the cache).
    why: that, without the advice to fork (auto takes its next plan)."""

    grpc_status = "RESOURCE_EXHAUSTED"

    def __init__(self, why: str) -> None:
        super().__init__(f"{why}; scan with --snapshot fork")
        self.why = why


def mark_reads_too_much(e: OSError) -> MarkReadsTooMuch | None:
    """What a mark's ERANGE means (a reader loaded its bound: 4 times what
    the mark touches, native/scanner/sweep.c), or None for another error."""
    if e.errno != errno.ERANGE:
        return None
    return MarkReadsTooMuch(
        f"{e.strerror}: the heap's order defeats the scanner's cache of the target's memory"
    )
