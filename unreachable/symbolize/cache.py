"""The on-disk symbol cache: small JSON files per ELF object, keyed by build-id and file.

Layout: ``<cache_dir>/symbols/v2/<key[:2]>/<key[2:]>/<name>.json``. The key is
the build-id and the file's identity (plus a variant naming the debug file
used, see objects.py), so an upgraded library gets a fresh entry, a file
claiming another's build-id gets its own, and a second scan of the same
binaries reads back what the first one computed instead of parsing ELF and
DWARF.

JSON rather than pickle or marshal: the directory may be shared, and reading
it must never execute or crash anything. Every failure is a cache miss.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from unreachable.symbolize.elf_file import ElfImage

FORMAT = "v2"
_SAFE = re.compile(r"^[0-9A-Za-z._-]+$")


def object_key(image: ElfImage) -> str:
    """The cache key of an ELF object: its build-id and the file's identity.

    A build-id alone is a claim the file makes: a target's own file can carry
    a system library's, and its entries would then name that library's
    frames in every later report (a root daemon's cache serves every
    target). The identity is the one file read (fstat of the open file:
    device, inode, size, mtime and ctime, the last of which no user sets),
    so a file can only ever read back what was learnt from itself."""
    return f"{image.build_id or 'nobid'}-{file_digest(image)}"


def file_digest(image: ElfImage) -> str:
    """16 hex digits naming the file `image` was read from."""
    ident = "\0".join(str(v) for v in image.identity) if image.identity else image.path
    return _sha1_hex(ident.encode())[:16]


def _sha1_hex(data: bytes) -> str:
    """SHA-1, the same digest as hashlib's: from CPython's own module where
    the build has it. hashlib loads OpenSSL's libcrypto (4-18 ms of every
    scan's fold, which keys each mapped file's cached vtables so); _sha1 is
    ~1 ms. Imported here, not at the top: a scan imports this module."""
    try:
        from _sha1 import sha1  # type: ignore[import-not-found]
    except ImportError:  # a build whose hashlib has only OpenSSL's
        from hashlib import sha1
    return str(sha1(data, usedforsecurity=False).hexdigest())


class ObjectCache:
    def __init__(self, cache_dir: str | None, key: str) -> None:
        self.dir = (
            os.path.join(cache_dir, "symbols", FORMAT, key[:2], key[2:])
            if cache_dir and _SAFE.match(key) and len(key) > 2
            else None
        )

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def load(self, name: str) -> Any:
        if self.dir is None:
            return None
        try:
            with open(os.path.join(self.dir, name + ".json"), "rb") as f:
                return json.loads(f.read())
        except (OSError, ValueError):
            return None

    def save(self, name: str, value: Any) -> None:
        if self.dir is None:
            return
        path = os.path.join(self.dir, name + ".json")
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(self.dir, mode=0o755, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump(value, f, separators=(",", ":"))
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass
