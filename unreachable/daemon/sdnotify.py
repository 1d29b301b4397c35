"""sd_notify without libsystemd: READY=1, STOPPING=1, STATUS= and WATCHDOG=1 to $NOTIFY_SOCKET.

The watchdog pings run on the event loop, every WATCHDOG_USEC/2, and only
when WATCHDOG_PID (if set) is this process: a loop that stops turning stops
the pings, and systemd kills the daemon (WatchdogSec= in the unit).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

log = logging.getLogger("unreachabled.sdnotify")


def sd_notify(state: str) -> bool:
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(path)
            s.sendall(state.encode())
        return True
    except OSError:
        return False


def watchdog_interval(environ: dict[str, str] | None = None) -> float | None:
    """Seconds between pings (half of WATCHDOG_USEC), or None when no watchdog is for us."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6


async def run_watchdog(interval: float) -> None:
    """Ping until cancelled."""
    log.debug("watchdog: pinging every %.3g s", interval)
    while True:
        sd_notify("WATCHDOG=1")
        await asyncio.sleep(interval)


class Status:
    """STATUS= for `systemctl status`: how many targets, and the last scan."""

    def __init__(self) -> None:
        self.targets = 0
        self.last = ""

    def text(self) -> str:
        s = "" if self.targets == 1 else "s"
        text = f"watching {self.targets} target{s}"
        return f"{text}; last scan: {self.last}" if self.last else text

    def update(self, *, targets: int | None = None, last: str | None = None) -> None:
        if targets is not None:
            self.targets = targets
        if last is not None:
            self.last = last
        sd_notify(f"STATUS={self.text()}")
