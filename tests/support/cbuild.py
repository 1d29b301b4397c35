"""Compile the C programs that tests run, once per source change.

Tests drive real C programs (targets under the shim, C unit tests of the
native code), so every test module needs the same small build step: compile a
source to tests/.build/, reusing the binary while its inputs are unchanged.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from functools import cache
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent
BUILD_DIR = TESTS_DIR / ".build"
REPO_DIR = TESTS_DIR.parent
NATIVE_DIR = REPO_DIR / "native"
INCLUDE_DIR = NATIVE_DIR / "include"

WARNINGS = ["-Wall", "-Wextra", "-Werror"]
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]


def build(
    sources: list[Path] | Path,
    *,
    name: str | None = None,
    cflags: list[str] | None = None,
    ldflags: list[str] | None = None,
    cxx: bool = False,
    sanitize: bool = False,
    shared: bool = False,
) -> Path:
    """Compile `sources` (C, or C++ with cxx=True) and return the output path.

    The output is keyed by a hash of the sources' contents, the headers of
    every include directory (native/include, each -I in cflags, the sources' own) and the
    flags, so a changed input rebuilds and an unchanged one is reused.
    """
    srcs = [sources] if isinstance(sources, Path) else list(sources)
    flags = ["-g", "-O1", "-D_GNU_SOURCE", f"-I{INCLUDE_DIR}", *WARNINGS, *(cflags or [])]
    if sanitize:
        flags += SANITIZERS
    if shared:
        flags += ["-shared", "-fPIC"]
    libs = ["-pthread", "-ldl", *(ldflags or [])]
    digest = hashlib.sha256()
    for src in srcs:
        digest.update(src.read_bytes())
    # A source's own directory too, and that of each header it names by a
    # relative path (`#include "../../scan/programs/scenario.h"`).
    include_dirs = [
        INCLUDE_DIR,
        *(Path(f[2:]) for f in flags if f.startswith("-I")),
        *(src.parent for src in srcs),
        *(dir for src in srcs for dir in _quoted_include_dirs(src)),
    ]
    for directory in dict.fromkeys(include_dirs):
        for header in sorted(directory.rglob("*.h")):
            digest.update(header.read_bytes())
    digest.update(" ".join(flags + libs + [str(cxx)]).encode())
    stem = name or srcs[0].stem
    suffix = ".so" if shared else ""
    out = BUILD_DIR / f"{stem}-{digest.hexdigest()[:12]}{suffix}"
    if out.exists():
        return out
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    compiler = "g++" if cxx else "gcc"
    tmp = out.with_name(out.name + ".tmp")
    cmd = [compiler, *flags, "-o", str(tmp), *map(str, srcs), *libs]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"compile failed: {' '.join(cmd)}\n{result.stderr}")
    tmp.rename(out)
    return out


def _quoted_include_dirs(src: Path) -> list[Path]:
    """The directories of the headers src includes by a path with a directory."""
    names = re.findall(r'^\s*#\s*include\s+"([^"]+/[^"]+)"', src.read_text(), re.MULTILINE)
    return [(src.parent / name).resolve().parent for name in names]


# unit_test.h: CHECK and a seeded random source for the C unit tests.
UNIT_TEST_INCLUDE = TESTS_DIR / "support" / "c"
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}


def run_unit_test(exe: Path, timeout: float = 120) -> str:
    """Run a C unit test (built with sanitize=True: leaks are reported too)
    and fail with its output unless it exits 0; returns its stdout."""
    result = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=timeout, env=SANITIZER_ENV
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# Which CMake list holds each native component's sources: the mark core is a
# list variable compiled into both libraries; the others are the libraries.
_CMAKE_LISTS = {
    "mark": "UR_MARK_SOURCES",
    "mark_child": "UR_MARK_CHILD_SOURCES",
    "scanner": "_native",
    "shim": "unreachable_shim",
}
_CMAKE_KEYWORDS = {"SHARED", "STATIC", "MODULE", "OBJECT", "WITH_SOABI"}


@cache
def cmake_sources(component: str) -> tuple[Path, ...]:
    """The C sources CMake builds native/<component> from, read from
    native/CMakeLists.txt and native/<component>/CMakeLists.txt.

    C unit tests take their sources from here, so that a file added, split or
    renamed in CMake is what the tests compile too, with no second list to
    keep in step.
    """
    variables = {"CMAKE_CURRENT_SOURCE_DIR": str(NATIVE_DIR)}
    lists: dict[str, list[str]] = {}

    def expand(words: list[str], here: Path) -> list[str]:
        out: list[str] = []
        for word in words:
            if word in _CMAKE_KEYWORDS:
                continue
            name = re.fullmatch(r"\$\{(\w+)\}", word)
            if name and name.group(1) in lists:
                out += lists[name.group(1)]
                continue
            word = re.sub(r"\$\{(\w+)\}", lambda m: variables[m.group(1)], word)
            out.append(str(here / word))
        return out

    def read(cmake: Path) -> None:
        here = cmake.parent
        text = re.sub(r"#[^\n]*", "", cmake.read_text())
        variables["CMAKE_CURRENT_SOURCE_DIR"] = str(here)
        for command, args in re.findall(r"(\w+)\s*\(([^)]*)\)", text):
            words = args.split()
            if command == "set" and len(words) == 2:
                variables[words[0]] = expand(words[1:], here)[0]
            elif command == "set" and len(words) > 2:
                lists[words[0]] = [w for w in expand(words[1:], here) if w.endswith(".c")]
            elif command in ("add_library", "Python_add_library") and words:
                lists[words[0]] = [w for w in expand(words[1:], here) if w.endswith(".c")]

    read(NATIVE_DIR / "CMakeLists.txt")
    for sub in ("shim", "scanner"):
        read(NATIVE_DIR / sub / "CMakeLists.txt")
    key = _CMAKE_LISTS[component]
    return tuple(Path(source).resolve() for source in lists[key])


def native_sources(component: str, *names: str) -> list[Path]:
    """Some of native/<component>'s sources, each checked against CMake's list
    (a unit test of a few files must not build one CMake no longer does)."""
    known = {source.name: source for source in cmake_sources(component)}
    missing = [name for name in names if name not in known]
    if missing:
        raise LookupError(f"not among native/{component}'s CMake sources: {', '.join(missing)}")
    return [known[name] for name in names]
