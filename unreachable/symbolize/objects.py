"""One mapped ELF object: its symbols, its debug file, its line table, its caches.

Everything an object learns is kept twice: in memory (an LRU of objects keyed
by the file's identity, for the daemon's repeated scans) and on disk under
its build-id and the file's identity (unreachable.symbolize.cache), so a
second process symbolizing the same binaries only reads a few small JSON
files.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from unreachable.symbolize.cache import ObjectCache, file_digest, object_key
from unreachable.symbolize.config import SymbolConfig
from unreachable.symbolize.debuginfo import DebugFile, find_debug_file
from unreachable.symbolize.dwarf_lines import LineTable
from unreachable.symbolize.elf_file import ElfImage, NotElf, read_elf
from unreachable.symbolize.elf_symbols import ElfSymbols, symbols_from_images
from unreachable.symbolize.files import ANY_OWNER, FilePolicy, Mapped, UnsafeFile, stat_checked

# vaddr -> (function, offset, file, line); function already demangled
Resolved = tuple[str, int, str, int]

_LRU_SIZE = 64
_objects: OrderedDict[tuple[object, ...], SymbolObject | None] = OrderedDict()
_lock = threading.RLock()


class SymbolObject:
    def __init__(
        self,
        image: ElfImage,
        obj_path: str,
        root: str,
        config: SymbolConfig,
        deadline: float | None = None,
        refused: list[str] | None = None,
    ) -> None:
        self.image = image
        self.debug: DebugFile | None = find_debug_file(
            image, obj_path, config.debug_dirs, root, image.policy, deadline, refused
        )
        if self.debug is not None:
            # The debug file by its identity too: the target's root may hold
            # one with the right build-id and made-up symbols.
            variant = f"d{file_digest(self.debug.image)}"
        elif image.has_dwarf_lines:
            variant = "self"
        else:
            variant = "nodebug"
        key = object_key(image)
        self.cache = ObjectCache(config.cache_dir, f"{key}-{variant}")
        self._symbols: ElfSymbols | None = None
        self._lines: LineTable | None = None
        lines_image = (
            self.debug.image
            if self.debug is not None and self.debug.image.has_dwarf_lines
            else image
            if image.has_dwarf_lines
            else None
        )
        self._lines_source = lines_image.path if lines_image is not None else ""
        self._lines_identity = lines_image.identity if lines_image is not None else ()
        loaded = self.cache.load("resolved")
        self.resolved: dict[int, Resolved] = {}
        if isinstance(loaded, dict):
            for k, v in loaded.items():
                if isinstance(v, list) and len(v) == 4:
                    try:
                        self.resolved[int(k)] = (str(v[0]), int(v[1]), str(v[2]), int(v[3]))
                    except ValueError:
                        continue
        self._dirty = False

    @property
    def has_lines(self) -> bool:
        return bool(self._lines_source)

    def symbols(self) -> ElfSymbols:
        if self._symbols is None:
            syms = ElfSymbols.from_json(self.cache.load("symbols"))
            if syms is None:
                images = [self.image] + ([self.debug.image] if self.debug else [])
                syms = symbols_from_images(*images)
                self.cache.save("symbols", syms.to_json())
            self._symbols = syms
        return self._symbols

    def line_of(self, vaddr: int) -> tuple[str, int] | None:
        if not self._lines_source:
            return None
        if self._lines is None:
            self._lines = LineTable(
                self._lines_source, self.cache, self.image.policy, self._lines_identity
            )
        return self._lines.lookup(vaddr)

    def lookup_raw(self, vaddr: int) -> tuple[str, int, str, int]:
        """Mangled function, offset, file, line of the call whose return address is vaddr."""
        # Frames are return addresses: look up the call instruction before them.
        hit = self.symbols().lookup(vaddr - 1)
        name, off = (hit[0], hit[1] + 1) if hit else ("", 0)
        line = self.line_of(vaddr - 1)
        file, lineno = line if line else ("", 0)
        return name, off, file, lineno

    def remember(self, vaddr: int, value: Resolved) -> None:
        self.resolved[vaddr] = value
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            self.cache.save("resolved", {str(k): list(v) for k, v in self.resolved.items()})
            self._dirty = False
        if self._lines is not None:
            self._lines.close()  # the decoded units stay in memory; the file reopens on need


def get_object(
    path: str,
    obj_path: str,
    root: str,
    config: SymbolConfig,
    policy: FilePolicy = ANY_OWNER,
    deadline: float | None = None,
    refused: list[str] | None = None,
    mapped: Mapped = None,
) -> SymbolObject | None:
    """The object for the file opened at `path` (known in its process as obj_path),
    if it and its debug file pass `policy` and it is the file mapped
    (files.check_mapped; refusals are added to `refused`).
    OutOfTime when looking for its debug file runs past `deadline`; the half-done
    object is then not remembered."""
    try:
        st = stat_checked(path, policy, mapped)
    except UnsafeFile as e:
        if refused is not None:
            refused.append(str(e))
        return None
    except OSError:
        return None
    key = (path, obj_path, root, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, config, policy)
    with _lock:
        if key in _objects:
            _objects.move_to_end(key)
            return _objects[key]
        try:
            obj: SymbolObject | None = SymbolObject(
                read_elf(path, policy, mapped), obj_path, root, config, deadline, refused
            )
        except UnsafeFile as e:
            if refused is not None:
                refused.append(str(e))
            obj = None
        except (OSError, NotElf, ValueError):
            obj = None
        _objects[key] = obj
        while len(_objects) > _LRU_SIZE:
            _objects.popitem(last=False)
        return obj


def clear_memory_cache() -> None:
    """Forget every object held in memory (the on-disk cache stays)."""
    with _lock:
        _objects.clear()
