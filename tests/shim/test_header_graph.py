"""The shim's and the mark's modules form no include cycle.

A module is a stem: x.h with x.c. Module A depends on module B when a file
of A includes "B.h". A cycle (shim.h holding the state every file needs
while shim.c includes every feature; heap_walker.h and ref_graph.c including
each other) means no module can be read, built or tested without all the
others; the graph must stay a DAG. Two rules keep the include lines honest:
a header declares only what its own .c defines (a header declaring another
file's function hides a dependency from the graph), and state.h, which every
module includes, includes nothing of the shim's.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.cbuild import REPO_DIR

NATIVE = REPO_DIR / "native"
# Where a quoted include is looked for, in order, as the build's -I says:
# the including file's own folder, then the mark (the shim compiles it in).
SEARCH = {"shim": ["shim", "mark"], "mark": ["mark"]}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)\s*")


def include_graph(native: Path) -> dict[str, set[str]]:
    """Module ("shim/x") -> the modules whose headers its files include."""
    graph: dict[str, set[str]] = {}
    for folder, search in SEARCH.items():
        for path in sorted((native / folder).glob("*.[ch]")):
            module = f"{folder}/{path.stem}"
            deps = graph.setdefault(module, set())
            for name in INCLUDE.findall(COMMENT.sub("", path.read_text())):
                for where in search:
                    if (native / where / name).is_file():
                        dep = f"{where}/{Path(name).stem}"
                        if dep != module:
                            deps.add(dep)
                        break
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# Prototypes and extern objects at file scope of a header (not static inline).
FUNCTION = re.compile(r"^(?!static|typedef|#|\s)[^;{}()=]*?\b(\w+)\s*\([^;{}]*\)\s*;", re.M)
EXTERN = re.compile(r"^extern\b[^;(]*?\b(\w+)\s*;", re.M)


def borrowed_declarations(native: Path) -> list[str]:
    """Functions and objects a header declares that its own .c does not define."""
    wrong = []
    for folder in SEARCH:
        for header in sorted((native / folder).glob("*.h")):
            text = ATTRIBUTE.sub("", COMMENT.sub("", header.read_text()))
            source = header.with_suffix(".c")
            defined = source.read_text() if source.is_file() else ""
            defined = ATTRIBUTE.sub("", COMMENT.sub("", defined))
            for name in FUNCTION.findall(text):
                if name.startswith("_"):  # glibc's (__libc_malloc), _Static_assert
                    continue
                if not re.search(rf"^[^\s#].*\b{name}\s*\([^;]*?\)\s*\{{", defined, re.M):
                    wrong.append(f"{folder}/{header.name}: {name}()")
            for name in EXTERN.findall(text):
                if not re.search(rf"^(?!extern)[^\s#(]*\b.*\b{name}\b\s*(=|;|\[)", defined, re.M):
                    wrong.append(f"{folder}/{header.name}: {name}")
    return wrong


def test_no_include_cycle_in_the_shim_or_the_mark() -> None:
    assert cycles(include_graph(NATIVE)) == []


def test_a_header_declares_only_what_its_source_defines() -> None:
    assert borrowed_declarations(NATIVE) == []


def test_the_shared_state_header_is_a_leaf() -> None:
    state = (NATIVE / "shim" / "state.h").read_text()
    assert INCLUDE.findall(COMMENT.sub("", state)) == ["unreachable/abi.h"]


def test_the_checks_see_a_cycle_and_a_borrowed_declaration(tmp_path: Path) -> None:
    for folder in SEARCH:
        (tmp_path / folder).mkdir()
    shim = tmp_path / "shim"
    (shim / "a.h").write_text("void a(void);\n")
    (shim / "a.c").write_text('#include "a.h"\n#include "b.h"\nvoid a(void) {}\n')
    (shim / "b.h").write_text("void b(void);\nvoid c(void);\nextern int d;\n")
    (shim / "b.c").write_text('#include "b.h"\n#include "a.h"\nvoid b(void) {}\n')
    assert cycles(include_graph(tmp_path)) == [["shim/a", "shim/b"]]
    assert borrowed_declarations(tmp_path) == ["shim/b.h: c()", "shim/b.h: d"]
