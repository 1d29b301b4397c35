"""The on-disk symbol cache is keyed by the file, not by the build-id it
claims: a target's file carrying a system library's build-id (and its own
debug file beside it) can neither give its names to that library's frames
in a later report nor take the library's for its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cbuild import build
from unreachable.process.maps import Mapping
from unreachable.symbolize import objects
from unreachable.symbolize.cache import object_key
from unreachable.symbolize.elf_file import read_elf
from unreachable.symbolize.frames import Symbolizer

SOURCE = Path(__file__).resolve().parent / "programs" / "named_function.c"
BUILD_ID = "--build-id=0x5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed"
BASE = 0x7F0000000000


def library(function: str) -> Path:
    return build(
        SOURCE, shared=True, cflags=[f"-DFUNCTION={function}"], ldflags=[f"-Wl,{BUILD_ID}"]
    )


def name_at(path: Path, function: str, cache_dir: Path) -> str:
    """The name a fresh symbolizer gives a return address just inside
    `function` of the library at `path` (mapped at BASE, as a dump names it)."""
    image = read_elf(str(path))
    value = next(v for v, _, _, name in image.function_symbols(".symtab") if name == function)
    maps = [Mapping(BASE, BASE + (1 << 20), "r-xp", 0, 0, str(path))]
    objects.clear_memory_cache()  # only the disk cache is shared, as between two scans
    sym = Symbolizer(None, maps, cache_dir=str(cache_dir), debug_dirs=[])
    return sym.symbolize_pcs([BASE + value + 1])[0].function


def test_a_file_claiming_another_files_build_id_keeps_its_own_names(tmp_path):
    genuine, forged = library("genuine_library_function"), library("forged_target_function")
    assert read_elf(str(genuine)).build_id == read_elf(str(forged)).build_id
    # The target's file first: its entries must not name the library's frames.
    assert name_at(forged, "forged_target_function", tmp_path) == "forged_target_function"
    assert name_at(genuine, "genuine_library_function", tmp_path) == "genuine_library_function"
    # And the other way round, in the same cache.
    assert name_at(forged, "forged_target_function", tmp_path) == "forged_target_function"


def test_the_same_file_reads_its_entries_back(tmp_path):
    """The cache still serves a second scan of the same file."""
    genuine = library("genuine_library_function")
    assert name_at(genuine, "genuine_library_function", tmp_path) == "genuine_library_function"
    entries = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    assert entries
    assert name_at(genuine, "genuine_library_function", tmp_path) == "genuine_library_function"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json")) == entries


def _debug_dir(directory: Path, library_file: Path, build_id: str) -> Path:
    """A debug directory holding library_file's debug part under .build-id."""
    dest = directory / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    dest.parent.mkdir(parents=True)
    subprocess.run(
        ["objcopy", "--only-keep-debug", str(library_file), str(dest)],
        check=True,
        capture_output=True,
    )
    return directory


def test_a_debug_file_claiming_the_build_id_keeps_its_own_names(tmp_path):
    """One stripped library, two debug files with its build-id: the system's,
    and one a target's root holds (made-up names). Each symbolization gets
    the names of the debug file it was given, whichever came first."""
    genuine, forged = library("genuine_library_function"), library("forged_target_function")
    stripped = tmp_path / "libstripped.so"
    subprocess.run(
        ["objcopy", "--strip-all", str(genuine), str(stripped)], check=True, capture_output=True
    )
    build_id = read_elf(str(stripped)).build_id
    system = _debug_dir(tmp_path / "system", genuine, build_id)
    target_root = _debug_dir(tmp_path / "target", forged, build_id)
    value = next(
        v
        for v, _, _, name in read_elf(str(genuine)).function_symbols(".symtab")
        if name == "genuine_library_function"
    )
    maps = [Mapping(BASE, BASE + (1 << 20), "r-xp", 0, 0, str(stripped))]
    cache = tmp_path / "cache"

    def name_with(debug_dir: Path) -> str:
        objects.clear_memory_cache()
        sym = Symbolizer(None, maps, cache_dir=str(cache), debug_dirs=[str(debug_dir)])
        return sym.symbolize_pcs([BASE + value + 1])[0].function

    assert name_with(target_root) == "forged_target_function"
    assert name_with(system) == "genuine_library_function"


def test_the_key_is_the_sha1_of_the_files_identity(tmp_path):
    """The key is hashed without hashlib (OpenSSL's libcrypto at every scan):
    the same SHA-1 digest, so entries written by earlier versions stay found."""
    import hashlib

    lib = build(Path(__file__).parent.parent / "scan" / "programs" / "graph.c")
    image = read_elf(str(lib))
    ident = "\0".join(str(v) for v in image.identity).encode()
    digest = hashlib.sha1(ident, usedforsecurity=False).hexdigest()[:16]
    assert object_key(image) == f"{image.build_id}-{digest}"
