"""Pointers in flight: bytes queued in the target's pipes and unix sockets.

Threads hand work to each other through a pipe or a socketpair (an event
loop's wakeup pipe carrying a pointer, pdns_recursor's ThreadMSG): between
the write and the read, the only pointer to the work item is in the
kernel's buffer, and a scan of memory alone reports the item leaked. The
queued bytes are read in the pause without being consumed, and the 8-byte
values in them join the registers' values:

- a pipe's content is duplicated with tee(2) into a pipe of the scanner's
  own, sized to the target's pipe (tee links the target's buffers, it takes
  nothing out of them), and read from there;
- a unix socket's receive queue is peeked (MSG_PEEK) through a duplicate of
  the target's descriptor (pidfd_getfd), walking it with SO_PEEK_OFF, whose
  value is put back as it was.

The descriptors are duplicated before the stop (a readlink each, as for
epoll) and read in the pause, while nothing can change the queues; a pipe
or socket created after the listing is missed. Duplicates are the same
open files as the target's: nothing is read with a blocking call and no
flag of theirs is changed. A pipe the target holds only the write end of
is opened for reading through /proc/PID/fd instead.

pidfd_getfd is not in systemd's @system-service set; a scanner under a
seccomp filter that refuses it reads pipes only (opened through
/proc/PID/fd, as a write end's reader is).

Which offsets: a datagram (SOCK_DGRAM, SOCK_SEQPACKET) starts a message, so
its words are read at offsets aligned from the message's start, as memory's
are. A byte stream's read position says nothing of where the writer's
records began (a reader that took a 9-byte record leaves every later
pointer off by one), so a stream's 8-byte values are taken at every byte
offset, as for JIT code; only those inside the heap's bounds are kept
(roots/heap_words.py).

Each duplicate is a descriptor of the scanner's until the pause: a target
holding thousands of pipes and sockets would take them all (a scan then
failed with EMFILE starting its stopper). So the scanner raises its soft
RLIMIT_NOFILE to the hard limit and keeps FDS_RESERVED of it free; the
queues past that are not read, and the report's snapshot_note says how many
(a block whose only pointer is queued in one of them may be reported leaked).

In the pause each queue costs one FIONREAD (most are empty), a non-empty
one a tee or a few peeks (~10 us). At most QUEUED_MAX_BYTES are read per
scan; past that the rest of the queues is not read, and the note counts the
ones that held bytes.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import struct
import termios
import threading
from dataclasses import dataclass, field

from unreachable import _native
from unreachable.process.status import thread_seccomp

QUEUED_MAX_BYTES = 64 << 20
PEEK_CHUNK = 256 << 10  # a unix datagram is at most the sender's sndbuf (~208 KiB)
FDS_RESERVED = 256  # the scan's own files, pipes and children after the listing
_SPLICE_F_NONBLOCK = 2
_F_GETPIPE_SZ = 1032
_F_SETPIPE_SZ = 1031
_SO_PEEK_OFF = 42


@dataclass(slots=True, eq=False, repr=False)
class _Queue:
    """One pipe or unix socket of the target, as the scanner holds it."""

    fd: int  # the scanner's duplicate (or reader) of the target's pipe or socket
    pipe: bool
    stream: bool


@dataclass(slots=True, eq=False, repr=False)
class InFlight:
    """The target's pipes and unix sockets, and what they held in the pause."""

    queues: list[_Queue] = field(default_factory=list)
    pipe_streams: list[bytes] = field(default_factory=list)
    socket_streams: list[bytes] = field(default_factory=list)
    socket_messages: list[bytes] = field(default_factory=list)
    over_limit: int = 0  # pipes and unix sockets left out: no descriptor to spare
    over_budget: int = 0  # queues holding bytes, not read: QUEUED_MAX_BYTES reached

    @property
    def note(self) -> str:
        """What was not read, for the report ("" when everything was)."""
        parts = []
        if self.over_limit:
            parts.append(
                f"{self.over_limit} of the target's pipe and unix socket descriptors not read"
                " (the scanner's open-file limit)"
            )
        if self.over_budget:
            parts.append(
                f"{self.over_budget} queues of pipes or unix sockets not read"
                f" (past {QUEUED_MAX_BYTES >> 20} MiB of queued bytes)"
            )
        if not parts:
            return ""
        return "; ".join(parts) + ": a block only they point to is reported as a leak"

    @classmethod
    def before_stop(cls, pid: int, links: dict[int, str]) -> InFlight:
        """links: the target's descriptors and what /proc/PID/fd says of each."""
        found = cls()
        room = _descriptors_free()
        pidfd = _pidfd(pid)
        pipes: dict[str, list[int]] = {}
        # Only unix sockets are duplicated: a server's thousands of TCP
        # connections are left alone.
        unix = _unix_socket_inodes(pid) if pidfd is not None else set()
        try:
            for fd, link in sorted(links.items()):
                pipe = link.startswith("pipe:")
                if not pipe and not (link.startswith("socket:") and link[8:-1] in unix):
                    continue
                if pipe and link in pipes:
                    pipes[link].append(fd)  # one more end of a pipe taken: no descriptor
                elif len(found.queues) + len(pipes) >= room:
                    found.over_limit += 1
                elif pipe:
                    pipes[link] = [fd]
                elif pidfd is not None:
                    found._add_socket(pidfd, fd)
            for fds in pipes.values():
                found._add_pipe(pid, pidfd, fds)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return found

    def _add_pipe(self, pid: int, pidfd: int | None, fds: list[int]) -> None:
        """One reader of the pipe the target holds as fds: a duplicate of a
        read end, or, holding none, one opened through /proc."""
        held = [(pidfd, fd) for fd in fds] if pidfd is not None else []
        for target_pidfd, fd in held:
            dup = _getfd(target_pidfd, fd)
            if dup >= 0 and fcntl.fcntl(dup, fcntl.F_GETFL) & os.O_ACCMODE != os.O_WRONLY:
                self.queues.append(_Queue(dup, True, True))
                return
            if dup >= 0:
                os.close(dup)
        try:
            reader = os.open(f"/proc/{pid}/fd/{fds[0]}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return  # closed since the listing
        self.queues.append(_Queue(reader, True, True))

    def _add_socket(self, pidfd: int, fd: int) -> None:
        # Imported for a target with a unix socket only (it and the modules
        # it imports took 2.5 ms of every scan's start-up).
        import socket

        dup = _getfd(pidfd, fd)
        if dup < 0:
            return
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            return
        family, kind = s.family, s.type
        s.detach()  # dup stays open, ours
        if family != socket.AF_UNIX or kind not in (
            socket.SOCK_STREAM,
            socket.SOCK_DGRAM,
            socket.SOCK_SEQPACKET,
        ):
            os.close(dup)
            return
        self.queues.append(_Queue(dup, False, kind == socket.SOCK_STREAM))

    def read_in_pause(self, budget: int = QUEUED_MAX_BYTES) -> None:
        """What each queue holds now, nothing consumed. Closes the duplicates."""
        try:
            for q in self.queues:
                if not _queued(q.fd):
                    continue  # most are empty: one ioctl each (~1 us), no more
                if budget <= 0:
                    self.over_budget += 1
                    continue
                if q.pipe:
                    data = _tee(q.fd, budget)
                    if data:
                        self.pipe_streams.append(data)
                    budget -= len(data)
                else:
                    messages = _peek(q.fd, budget)
                    budget -= sum(len(m) for m in messages)
                    if q.stream and messages:
                        self.socket_streams.append(b"".join(messages))
                    elif messages:
                        self.socket_messages.extend(messages)
        finally:
            self.close()

    def close(self) -> None:
        for q in self.queues:
            os.close(q.fd)
        self.queues.clear()


def _unix_socket_inodes(pid: int) -> set[str]:
    """The inodes of the unix sockets of the target's network namespace."""
    try:
        with open(f"/proc/{pid}/net/unix", errors="surrogateescape") as f:
            next(f, None)
            return {fields[6] for line in f if len(fields := line.split()) > 6}
    except OSError:
        return set()


def _pidfd(pid: int) -> int | None:
    if not _getfd_allowed():
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None  # not a thread-group leader (its main thread exited): pipes only


@functools.cache
def _getfd_allowed() -> bool:
    """Whether this process may call pidfd_getfd. It is in systemd's @debug
    group, not @system-service: a scanner under a SystemCallFilter= without
    it would die of SIGSYS on the first socket. Under any seccomp filter the
    call is tried first by a child, which only makes it and exits."""
    if thread_seccomp(os.getpid(), threading.get_native_id()) == 0:
        return True
    child = os.fork()
    if child == 0:
        try:
            _native.pidfd_getfd(-1, 0)
        except OSError as e:
            os._exit(0 if e.errno == errno.EBADF else 1)
        os._exit(1)
    _, status = os.waitpid(child, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _descriptors_free() -> int:
    """How many duplicates this scan may hold: the soft limit, raised to the
    hard one, less FDS_RESERVED and what is open now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return max(0, soft - FDS_RESERVED - len(os.listdir("/proc/self/fd")))


def _getfd(pidfd: int, fd: int) -> int:
    try:
        return _native.pidfd_getfd(pidfd, fd)
    except OSError:
        return -1


def _queued(fd: int) -> int:
    """Bytes waiting (a datagram socket's: its first datagram's)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


def _tee(source: int, budget: int) -> bytes:
    """The pipe's content, copied into a pipe of ours and read from there;
    the source keeps it all."""
    try:
        size = fcntl.fcntl(source, _F_GETPIPE_SZ)
    except OSError:
        return b""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        try:
            # As many slots as the source has: tee links whole buffers.
            fcntl.fcntl(w, _F_SETPIPE_SZ, size)
        except OSError:
            pass  # over fs.pipe-max-size without the privilege: what fits
        try:
            n = _native.tee(source, w, min(size, budget), _SPLICE_F_NONBLOCK)
        except OSError:
            return b""  # empty (EAGAIN), or not a pipe after all
        if n <= 0:
            return b""
        chunks, left = [], n
        while left > 0:
            chunk = os.read(r, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(r)
        os.close(w)


def _peek(fd: int, budget: int) -> list[bytes]:
    """The socket's receive queue, peeked message by message (a stream's in
    chunks); its SO_PEEK_OFF is restored."""
    import socket  # as in _add_socket: the queues hold a socket

    s = socket.socket(fileno=os.dup(fd))
    try:
        try:
            before = struct.unpack("i", s.getsockopt(socket.SOL_SOCKET, _SO_PEEK_OFF, 4))[0]
            s.setsockopt(socket.SOL_SOCKET, _SO_PEEK_OFF, 0)
        except OSError:
            return []  # no peek offset: not read (a plain peek sees one message only)
        out: list[bytes] = []
        try:
            while budget > 0:
                try:
                    data = s.recv(min(PEEK_CHUNK, budget), socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EINVAL, errno.ENOTCONN):
                        raise
                    break
                if not data:
                    break
                out.append(data)
                budget -= len(data)
        except OSError:
            pass
        finally:
            s.setsockopt(socket.SOL_SOCKET, _SO_PEEK_OFF, before)
        return out
    finally:
        s.close()
