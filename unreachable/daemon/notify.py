"""The notify socket: shims ask for a scan of their own process (check_unreachable_on_signal).

Protocol, one request per connection on a unix STREAM socket:
    client -> daemon: `SCAN <pid>\\n`
    daemon -> client: `OK\\n` (scan queued), `BUSY\\n` then a line saying why
                      (`pending\\n`: one is already pending for this pid;
                      `user\\n`: the caller's user has as many pending as it
                      may), or `ERR <reason>\\n`; then the daemon closes. A
                      client reading one line (a shim older than the reason
                      line) sees the BUSY it knew.
The daemon checks with SO_PEERCRED that the peer is the process it asks about
(pid in the daemon's namespace, or the innermost NSpid for a peer inside a pid
namespace), so a peer can only have itself scanned. SO_PEERCRED is the pid
of whoever connected, which may have exited and left its pid to another
process while a child it forked kept the connection; so the peer's pidfd
(SO_PEERPIDFD) must still name a live process once its identity (pid, start
time) is read, and the scan runs only if that identity still holds. The
reply comes before the scan: the caller is never kept waiting while its
process is stopped.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import stat
import struct
from collections.abc import Callable
from functools import partial

from unreachable.daemon.config import ConfigError
from unreachable.daemon.matching import ProcessInfo, read_process
from unreachable.daemon.notify_limits import ConnectionGate, WarningBudget
from unreachable.daemon.sockets import created_as
from unreachable.process.status import innermost_pid

log = logging.getLogger("unreachabled.notify")
LINE_MAX = 64
READ_TIMEOUT = 5.0
_UCRED = struct.Struct("3i")
SO_PEERPIDFD = 77  # Linux 6.5; the socket module does not name it
# BUSY's second line says which limit: a shim tells its user "already pending"
# from "this user's share of the scans is taken, try later".
BUSY_PENDING = "BUSY\npending"
BUSY_USER = "BUSY\nuser"


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def peer_pidfd(sock: socket.socket) -> int | None:
    """A pidfd of the process that connected (None: a kernel before 6.5)."""
    try:
        return sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        return None


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


def _peer_identity(pid: int, pidfd: int | None) -> ProcessInfo | None:
    """The peer's identity read through its pid; None when the peer exited
    (its pid may since name another process). Read first, then the pidfd
    must still be alive: a live peer's pid named the peer all along."""
    info = read_process(pid)
    if pidfd is not None and not _alive(pidfd):
        return None
    return info


def parse_request(line: bytes) -> int:
    """The pid of `SCAN <pid>`; ValueError with a reason otherwise."""
    parts = line.decode("ascii", errors="replace").split()
    if len(parts) != 2 or parts[0] != "SCAN":
        raise ValueError("expected 'SCAN <pid>'")
    if not parts[1].isdigit() or int(parts[1]) <= 0:
        raise ValueError(f"bad pid {parts[1]!r}")
    return int(parts[1])


# Queues the scan of (pid, identity); False when one is already pending.
# done(ok, why) is called when it ends.
Request = Callable[[int, ProcessInfo, Callable[[bool, str], None]], bool]


class NotifyListener:
    """Accepts scan requests, at most `per_uid` pending for one user other
    than root (notify_limits.py)."""

    def __init__(self, path: str, mode: int, request: Request, per_uid: int) -> None:
        self.path = path
        self._mode = mode
        self._request = request
        self._server: asyncio.base_events.Server | None = None
        self._gate = ConnectionGate()
        self._scans = ConnectionGate(per_uid=per_uid, total=1 << 30)
        self._warnings = WarningBudget()

    def _warn(self, message: str, *args: object) -> None:
        if self._warnings.allow():
            log.warning(message + "%s", *args, self._warnings.take_dropped())

    async def start(self) -> None:
        _remove_stale_socket(self.path)
        # The mode comes from bind itself: a chmod of the path afterwards would
        # follow whatever another user had swapped in meanwhile.
        with created_as(self._mode):
            try:
                self._server = await asyncio.start_unix_server(
                    self._handle, path=self.path, limit=LINE_MAX
                )
            except OSError as e:
                raise ConfigError(f"cannot listen on {self.path}: {e.strerror or e}") from None
        log.info("notify socket %s (mode %04o)", self.path, self._mode)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            _remove_stale_socket(self.path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = peer_credentials(sock)[1]
        if not self._gate.enter(uid):
            # Closed at once, unread: a user holding connections open must
            # not hold the daemon's file descriptors with them.
            self._warn("notify: uid %d has too many requests waiting: refused", uid)
            writer.write(b"ERR too many requests waiting\n")
            writer.close()
            return
        try:
            reply = await self._answer(reader, sock)
            writer.write(reply.encode() + b"\n")
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
        except (OSError, TimeoutError):
            pass
        finally:
            self._gate.leave(uid)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, sock: socket.socket) -> str:
        peer_pid, uid, _gid = peer_credentials(sock)
        pidfd = peer_pidfd(sock)
        try:
            return await self._answer_peer(reader, peer_pid, uid, pidfd)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    async def _answer_peer(
        self, reader: asyncio.StreamReader, peer_pid: int, uid: int, pidfd: int | None
    ) -> str:
        try:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
        except TimeoutError:
            return "ERR timed out waiting for the request"
        except (ValueError, asyncio.LimitOverrunError):
            return "ERR request too long"
        try:
            pid = parse_request(line)
        except ValueError as e:
            self._warn("notify: bad request from pid %d: %s", peer_pid, e)
            return f"ERR {e}"
        if pid != peer_pid and pid != innermost_pid(peer_pid):
            self._warn(
                "notify: pid %d (uid %d) asked for a scan of pid %d: refused", peer_pid, uid, pid
            )
            return "ERR a process may only ask for a scan of itself"
        identity = _peer_identity(peer_pid, pidfd)
        if identity is None:
            self._warn("notify: pid %d (uid %d) exited before its request was read", peer_pid, uid)
            return "ERR the process that connected has exited"
        if uid != 0 and not self._scans.enter(uid):
            self._warn("notify: uid %d has as many scans pending as allowed: pid %d", uid, peer_pid)
            return BUSY_USER
        if not self._request(peer_pid, identity, partial(self._ended, peer_pid, uid)):
            if uid != 0:
                self._scans.leave(uid)
            return BUSY_PENDING
        log.info("notify: pid %d (uid %d) asked for a scan", peer_pid, uid)
        return "OK"

    def _ended(self, pid: int, uid: int, ok: bool, why: str) -> None:
        if uid != 0:
            self._scans.leave(uid)
        if not ok:
            self._warn("signal scan of pid %d failed: %s", pid, why)


def _remove_stale_socket(path: str) -> None:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
