"""Text a process chose, made safe to print one line per item.

A target names itself (its comm, its command line), its files (the paths
in its maps) and its functions (its ELF's symbol names and DWARF file
names), and each may hold any byte but NUL: a newline there made a line of
its own in a log, a generated suppression file (`leak:*` from a command
line suppressed every leak) or a report; an escape sequence reached the
terminal of whoever read it. Control characters (C0, DEL, C1) and Unicode's
line separators and direction overrides are written as `\\xNN` / `\\uNNNN`.
"""

from __future__ import annotations

_SEPARATORS = (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    c: f"\\u{c:04x}" for c in _SEPARATORS
}


def printable(text: str) -> str:
    """text with every character that could end its line or steer a
    terminal written as an escape (tabs included)."""
    return text.translate(_ESCAPES)
