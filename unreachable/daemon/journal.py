"""Logging for systemd: `<N>` priority prefixes on stderr, structured fields to journald.

Every record goes to stderr as `<N>unreachabled: LEVEL: message` (journald
turns the prefix into PRIORITY=N; on a terminal the prefix is left out).
Records that carry fields (`log.info(..., extra=fields(TARGET_PID=...))`)
are also sent as one datagram in journald's native protocol to the journal
socket when it exists (MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_* and the
fields), so `journalctl -o verbose` and `journalctl TARGET_UNIT=x.service`
see them. When stderr is itself connected to the journal ($JOURNAL_STREAM),
such a record is not written to stderr again.

A record's arguments are what a target named (its comm, the files it maps,
a scan's error quoting them) and are written with printable()'s `\\xNN`
escapes, on stderr and in MESSAGE alike: a newline there would start a log
line of the target's choosing, an escape sequence would reach the terminal
reading the log. The format strings are the daemon's own and keep their
lines, as a traceback does (each of its lines escaped).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import struct
import sys
import traceback
from collections.abc import Mapping
from typing import Any, TextIO

from unreachable.printable import printable

IDENTIFIER = "unreachabled"
FIELDS_ATTR = "journal_fields"
PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}
_KEY = re.compile(r"^[A-Z0-9][A-Z0-9_]{0,63}$")


def fields(**values: Any) -> dict[str, dict[str, Any]]:
    """`extra=` for a log call: journal fields, upper-case names; None values are left out."""
    return {FIELDS_ATTR: {k: v for k, v in values.items() if v is not None}}


def priority(levelno: int) -> int:
    for level in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO):
        if levelno >= level:
            return PRIORITY[level]
    return PRIORITY[logging.DEBUG]


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value == value else "nan"
    return str(value)


def encode_fields(entries: dict[str, Any]) -> bytes:
    """journald's native format: KEY=VALUE lines, or KEY, length and raw bytes for multi-line."""
    out = bytearray()
    for key, value in entries.items():
        if not _KEY.match(key):
            raise ValueError(f"not a journal field name: {key!r}")
        data = _text(value).encode("utf-8", errors="replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


def _escaped(value: Any) -> Any:
    return value if isinstance(value, (int, float)) else printable(str(value))


def message(record: logging.LogRecord) -> str:
    """The record's message with its arguments escaped, and its traceback."""
    text, args = str(record.msg), record.args
    if isinstance(args, Mapping) and args:
        text %= {k: _escaped(v) for k, v in args.items()}
    elif isinstance(args, tuple) and args:
        text %= tuple(map(_escaped, args))
    if record.exc_info:
        trace = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        text += "\n" + "\n".join(map(printable, trace.split("\n")))
    return text


def stream_is_journal(stream: TextIO) -> bool:
    """True when `stream` is the journal stream systemd connected ($JOURNAL_STREAM=dev:ino)."""
    dev, sep, ino = os.environ.get("JOURNAL_STREAM", "").partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (OSError, ValueError, AttributeError):
        return False


class JournalHandler(logging.Handler):
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        journal_socket: str = "",
        prefix: bool | None = None,
    ) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stderr
        self.journal_socket = journal_socket
        self.prefix = (not _isatty(self.stream)) if prefix is None else prefix
        self.stream_is_journal = stream_is_journal(self.stream)
        self._sock: socket.socket | None = None

    def line(self, record: logging.LogRecord) -> str:
        text = f"{IDENTIFIER}: {record.levelname}: {message(record)}"
        if self.prefix:
            n = priority(record.levelno)
            # journald reads the prefix of each line separately.
            text = "\n".join(f"<{n}>{part}" for part in text.split("\n"))
        return text

    def entry(self, record: logging.LogRecord) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "MESSAGE": message(record),
            "PRIORITY": priority(record.levelno),
            "SYSLOG_IDENTIFIER": IDENTIFIER,
            "CODE_FILE": record.pathname,
            "CODE_LINE": record.lineno,
            "CODE_FUNC": record.funcName,
            "LOGGER": record.name,
        }
        entry.update(getattr(record, FIELDS_ATTR, {}))
        return entry

    def send(self, record: logging.LogRecord) -> bool:
        """Send the record to the journal socket; False when there is none or it failed."""
        if not self.journal_socket or not os.path.exists(self.journal_socket):
            return False
        try:
            data = encode_fields(self.entry(record))
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(data, self.journal_socket)
            return True
        except (OSError, ValueError):
            return False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sent = hasattr(record, FIELDS_ATTR) and self.send(record)
            if sent and self.stream_is_journal:
                return
            self.stream.write(self.line(record) + "\n")
            self.stream.flush()
        except Exception:  # noqa: BLE001 - logging must never take the daemon down
            self.handleError(record)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        super().close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def setup_logging(level: str, journal_socket: str) -> JournalHandler:
    handler = JournalHandler(journal_socket=journal_socket)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
