"""Bounds on what the world-writable notify socket may cost the daemon.

Every local user may connect, and a connection is held until its request
line or READ_TIMEOUT: without a bound, one user holding a thousand
connections took every file descriptor of the daemon (its scans then failed
with EMFILE), and a stream of bad requests wrote a warning each. A user's
processes asking each for a scan of itself (a fork loop) queued a scan each
and took every scan slot, other users' scans waiting behind them: a user
other than root has at most half the slots' worth of them queued or running
(pending_per_uid), and their failures are warnings under the same budget.
"""

from __future__ import annotations

import time
from collections import Counter

PER_UID = 8  # connections one user may have waiting at once
TOTAL = 64  # and all users together
WARNINGS_PER_MINUTE = 10


def pending_per_uid(max_concurrent_scans: int) -> int:
    """Scans one user's processes may have queued or running through the
    notify socket: half the daemon's slots, so that one user never holds
    them all."""
    return max(1, max_concurrent_scans // 2)


class ConnectionGate:
    """Counts, per uid, the connections waiting for their request line (or,
    as NotifyListener's scan gate, the scans asked for and not ended)."""

    def __init__(self, per_uid: int = PER_UID, total: int = TOTAL) -> None:
        self._per_uid = per_uid
        self._total = total
        self._open: Counter[int] = Counter()

    def enter(self, uid: int) -> bool:
        """False when uid, or everyone, already has as many as allowed."""
        if self._open[uid] >= self._per_uid or self._open.total() >= self._total:
            return False
        self._open[uid] += 1
        return True

    def leave(self, uid: int) -> None:
        self._open[uid] -= 1
        if self._open[uid] <= 0:
            del self._open[uid]


class WarningBudget:
    """At most `per_minute` warnings a minute; the ones left out are counted
    and named in the next one let through."""

    def __init__(self, per_minute: int = WARNINGS_PER_MINUTE) -> None:
        self._per_minute = per_minute
        self._window = 0.0
        self._used = 0
        self.dropped = 0

    def allow(self) -> bool:
        now = time.monotonic()
        if now - self._window >= 60.0:
            self._window, self._used = now, 0
        if self._used < self._per_minute:
            self._used += 1
            return True
        self.dropped += 1
        return False

    def take_dropped(self) -> str:
        """' (N more not logged)' for the warnings dropped since the last one."""
        n, self.dropped = self.dropped, 0
        return f" ({n} more not logged)" if n else ""
