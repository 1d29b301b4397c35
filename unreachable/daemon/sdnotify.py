"""sd_notify without libsystemd: READY=1 / STOPPING=1 / STATUS= to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


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
