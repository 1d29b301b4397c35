"""The Watch hub: reports published by signal-triggered and scheduled scans fan out here.

Each subscriber has a bounded queue; a subscriber that does not keep up loses
the oldest reports rather than slowing the daemon down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from unreachable.v1 import unreachable_pb2 as pb

log = logging.getLogger("unreachabled.watch")
QUEUE_SIZE = 64


@dataclass(frozen=True, slots=True)
class Published:
    event: pb.WatchEvent
    names: frozenset[str]  # comm and basename(argv[0]) of the scanned process


@dataclass(eq=False, slots=True)
class Subscription:
    pid: int
    name: str
    queue: asyncio.Queue[Published] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    dropped: int = 0

    def wants(self, item: Published) -> bool:
        if self.pid and item.event.report.pid != self.pid:
            return False
        return not self.name or self.name in item.names


class WatchHub:
    def __init__(self) -> None:
        self._subs: set[Subscription] = set()

    @contextlib.contextmanager
    def subscribe(self, pid: int = 0, name: str = "") -> Iterator[Subscription]:
        sub = Subscription(pid, name)
        self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def publish(self, event: pb.WatchEvent, argv0: str = "") -> None:
        names = {event.name} if event.name else set()
        if argv0:
            names.add(os.path.basename(argv0))
        item = Published(event, frozenset(names))
        for sub in list(self._subs):
            if not sub.wants(item):
                continue
            if sub.queue.full():
                sub.queue.get_nowait()
                sub.dropped += 1
                log.warning("a Watch subscriber is slow: dropped %d report(s)", sub.dropped)
            sub.queue.put_nowait(item)
