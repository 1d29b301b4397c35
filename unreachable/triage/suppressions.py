"""Suppressions in LeakSanitizer's format (docs/cli.md, "Suppressions").

A file holds one rule per line, `leak:PATTERN`; blank lines and lines whose
first non-blank character is `#` are skipped, leading blanks and trailing
blanks are trimmed, as LSan's parser does. PATTERN is matched the way LSan's
TemplateMatch matches: a substring, `*` any run of characters, `^` first
anchors at the start, `$` anchors at the end, each segment taken at its first
occurrence without backtracking, so a file written for LSan suppresses here
what it suppresses there. A rule is tried against every frame of an entry's
backtrace, innermost first: the frame's module path, then its function, then
its source file; the first rule that matches any of them wins.

Leaks without a backtrace have nothing to name, so a rule can instead match
a block: `leak:size=N` or `leak:size=N-M` (inclusive), optionally followed by
`,contents=HEX`, a prefix of the block's first 32 bytes. To LSan such a line
is a pattern no function, module or file is named like (no C identifier or
usual path holds `size=`), so a file mixing both kinds still works there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from unreachable.errors import InvalidArgument
from unreachable.model.report import LeakEntry, ScanReport, export_weights, leak_counts
from unreachable.printable import printable
from unreachable.symbolize.frame import Frame
from unreachable.triage import SUPPRESSIONS_ENV

ENV = SUPPRESSIONS_ENV
CONTENTS_BYTES = 32
UNKNOWN_MODULE = "<unknown module>"  # what LSan matches for a pc in no module
_BLOCK = re.compile(r"size=(\d+)(?:-(\d+))?(?:,contents=([0-9a-fA-F]*))?")


class SuppressionError(InvalidArgument):
    """A suppression file cannot be read or has a bad line ("FILE:LINE: what")."""


def template_match(templ: str, text: str) -> bool:
    """LeakSanitizer's TemplateMatch (sanitizer_common.cpp), step for step."""
    if not text:
        return False
    start = templ.startswith("^")
    if start:
        templ = templ[1:]
    asterisk = False
    pos = 0
    while templ:
        if templ[0] == "*":
            templ = templ[1:]
            start = False
            asterisk = True
            continue
        if templ[0] == "$":
            return pos == len(text) or asterisk
        if pos == len(text):
            return False
        ends = [i for i in (templ.find("*"), templ.find("$")) if i >= 0]
        cut = min(ends) if ends else len(templ)
        segment, templ = templ[:cut], templ[cut:]
        found = text.find(segment, pos)
        if found < 0:
            return False
        if start and found != pos:
            return False
        pos = found + len(segment)
        start = False
        asterisk = False
    return True


@dataclass(frozen=True, slots=True)
class Rule:
    """One suppression rule (leak:PATTERN or leak:size=...)."""

    pattern: str  # as written after "leak:"
    source: str  # file name, or the environment variable's name
    line: int
    # A block rule (size=...): sizes it matches and a contents prefix.
    min_size: int | None = None
    max_size: int | None = None
    contents: bytes | None = None

    @property
    def is_block(self) -> bool:
        return self.min_size is not None

    def matches_block(self, leak: LeakEntry) -> bool:
        assert self.min_size is not None and self.max_size is not None
        if not self.min_size <= leak.size <= self.max_size:
            return False
        if self.contents:
            return leak.contents is not None and leak.contents.startswith(self.contents)
        return True


def parse(text: str, source: str) -> list[Rule]:
    rules = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t").rstrip(" \t\r")
        if not line or line.startswith("#"):
            continue
        kind, sep, pattern = line.partition(":")
        if not sep or not kind or any(c in kind for c in " \t"):
            raise SuppressionError(f"{source}:{number}: not a suppression: expected leak:PATTERN")
        if kind != "leak":
            raise SuppressionError(
                f"{source}:{number}: unknown suppression type {kind!r} (only leak: is supported)"
            )
        rules.append(_rule(pattern, source, number))
    return rules


def _rule(pattern: str, source: str, number: int) -> Rule:
    if not pattern.startswith("size="):
        return Rule(pattern, source, number)
    m = _BLOCK.fullmatch(pattern)
    if m is None:
        raise SuppressionError(
            f"{source}:{number}: bad block rule {pattern!r}: expected size=N[-M][,contents=HEX]"
        )
    low = int(m[1])
    high = int(m[2]) if m[2] is not None else low
    if high < low:
        raise SuppressionError(f"{source}:{number}: size range {low}-{high} is empty")
    contents = None
    if m[3] is not None:
        if len(m[3]) % 2 or len(m[3]) > 2 * CONTENTS_BYTES:
            raise SuppressionError(
                f"{source}:{number}: contents must be whole bytes in hex, at most "
                f"{CONTENTS_BYTES} of them"
            )
        contents = bytes.fromhex(m[3])
    return Rule(pattern, source, number, low, high, contents)


def load(paths: Iterable[str]) -> list[Rule]:
    rules: list[Rule] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
        except OSError as e:
            raise SuppressionError(f"{path}: cannot read: {e.strerror or e}") from None
        rules += parse(text, path)
    return rules


def match(rules: Sequence[Rule], leak: LeakEntry) -> Rule | None:
    """The rule that suppresses this entry, as LSan walks a stack: frame by
    frame from the innermost, each frame's module, function and file against
    every rule in order; block rules after, on the block itself."""
    frame_rules = [r for r in rules if not r.is_block]
    for frame in leak.backtrace:
        for subject in _subjects(frame):
            for rule in frame_rules:
                if template_match(rule.pattern, subject):
                    return rule
    for rule in rules:
        if rule.is_block and rule.matches_block(leak):
            return rule
    return None


def _subjects(frame: Frame) -> tuple[str, str, str]:
    return (frame.map or UNKNOWN_MODULE, frame.function, frame.file)


@dataclass(slots=True)
class RuleUse:
    """What one rule set aside."""

    rule: Rule
    count: int = 0  # allocations suppressed (each entry's blocks and those it references)
    bytes: int = 0


@dataclass(slots=True)
class Suppressed:
    """What suppressions took out of a report."""

    count: int = 0
    bytes: int = 0
    used: list[RuleUse] = field(default_factory=list)  # rules that matched, in file order
    leaks: list[tuple[LeakEntry, Rule]] = field(default_factory=list)  # at most the limit


def weighted(report: ScanReport) -> list[tuple[LeakEntry, int, int]]:
    """Every entry with what it weighs (its blocks, its similar leaks and the
    blocks they reference: model.report.export_weights, which adds up to
    the totals)."""
    weights = export_weights(
        [leak_counts(leak) for leak in report.leaks], report.leak_count, report.leak_bytes
    )
    return [(leak, c, b) for leak, (c, b) in zip(report.leaks, weights.entries, strict=True)]


def apply(report: ScanReport, rules: Sequence[Rule], limit: int) -> ScanReport:
    """Take the suppressed entries (and everything they reference) out of the
    report's entries and totals, into report.suppressed. The report must
    carry every entry; at most `limit` of each kind are kept."""
    uses = {rule: RuleUse(rule) for rule in rules}
    kept: list[LeakEntry] = []
    out = Suppressed()
    for leak, count, size in weighted(report):
        rule = match(rules, leak) if rules else None
        if rule is None:
            kept.append(leak)
            continue
        uses[rule].count += count
        uses[rule].bytes += size
        out.count += count
        out.bytes += size
        out.leaks.append((leak, rule))
    out.used = [use for use in uses.values() if use.count]
    report.leaks = kept
    report.leak_count -= out.count
    report.leak_bytes -= out.bytes
    if (prior := report.suppressed) is not None:
        # Rules applied where the report was made (a daemon's): theirs first.
        out.count += prior.count
        out.bytes += prior.bytes
        out.used = prior.used + out.used
        out.leaks = prior.leaks + out.leaks
    out.leaks = out.leaks[:limit]
    report.suppressed = out
    return report


# -- writing rules for the current leaks (--print-suppressions) ---------------------------

# Libraries whose functions allocate on behalf of their caller (strdup,
# operator new, the loader): a rule naming them would suppress every leak
# made through them, so a generated rule names the first frame outside them.
_RUNTIME = re.compile(r"/(libc|libstdc\+\+|libgcc_s|ld-linux[^/]*|libunreachable_shim)[.-][^/]*$")

# A program's or library's own allocation wrapper (libdb's __os_malloc,
# postfix's mymalloc, xstrdup, g_malloc0, sqlite3_malloc64, CRYPTO_zalloc,
# a class's operator new) serves every caller of its object, so it is no
# more a site than malloc is: told by its bare name's ending, any case.
_WRAPPER = re.compile(r"(?<!de)(alloc|allocate|(str|mem)n?dup)(\d*)(_n|_\d+)?$|^operator new", re.I)
_LIBRARY = re.compile(r"\.so(\.[0-9.]+)?$")


def _is_wrapper(function: str) -> bool:
    bare = function.split("(", 1)[0]
    while (shorter := re.sub(r"<[^<>]*>", "", bare)) != bare:
        bare = shorter  # template arguments may hold "::" of their own
    return bool(_WRAPPER.search(bare.rsplit("::", 1)[-1].lstrip("_")))


def _site(own: Sequence[Frame]) -> Frame | None:
    """The frame that identifies where a leak was allocated: the innermost
    one outside allocation wrappers and, when the wrappers are a library's,
    outside that library (libdb's db_create allocates through __os_calloc
    and __os_malloc on behalf of whoever called it: the call into the
    library is the site). None when the backtrace ends first."""
    at = 0
    while at < len(own) and own[at].function and _is_wrapper(own[at].function):
        at += 1
    if 0 < at and _LIBRARY.search(library := own[at - 1].map):
        while at < len(own) and own[at].map == library:
            at += 1
    return own[at] if at < len(own) else None


def rule_for(leak: LeakEntry) -> str:
    """One rule that suppresses this entry, naming its allocation site
    (_site, outside the C and C++ runtimes) as an exact function name. The
    block's size and contents when that frame has no name (a stripped
    program's leak through strdup or through a library: the runtime's or
    library's name would set aside every later leak made through it), is
    main (every leak of the main thread passes through it), or is past the
    backtrace's end; also when there is no backtrace. A module path when no
    frame is named; the innermost named frame when every frame is the
    runtimes'."""
    named = [f for f in leak.backtrace if f.function]
    if not named:
        modules = [f.map for f in leak.backtrace if f.map]
        return f"^{modules[0]}$" if modules else _block_rule(leak)
    own = [f for f in leak.backtrace if not _RUNTIME.search(f.map)]
    if not own:
        return f"^{named[0].function}$"
    site = _site(own)
    if site is not None and site.function and site.function != "main":
        return f"^{site.function}$"
    return _block_rule(leak)


def _block_rule(leak: LeakEntry) -> str:
    rule = f"size={leak.size}"
    contents = _before_addresses(leak.contents or b"")
    if contents:
        rule += f",contents={contents.hex()}"
    return rule


# Where a user-space pointer can point on x86_64 and aarch64 (48-bit
# addresses), from where a program without PIE is loaded: fewer counters
# and sizes look like one than from mmap_min_addr.
_ADDRESS_LOW, _ADDRESS_HIGH = 0x400000, 1 << 48
_TEXT = frozenset(range(0x20, 0x7F)) | {0, 9, 10, 13}


def _before_addresses(contents: bytes) -> bytes:
    """The contents up to their first aligned word that looks like an
    address. A pointer moves with ASLR and differs from block to block of
    the same site (nghttpx leaks a BIO_METHOD at each reload, its name
    pointer a new one each time), so a rule holding one would suppress that
    block alone. A word of text is not taken for one."""
    for at in range(0, len(contents) - 7, 8):
        word = contents[at : at + 8]
        value = int.from_bytes(word, "little")
        if _ADDRESS_LOW <= value < _ADDRESS_HIGH and not set(word) <= _TEXT:
            return contents[:at]
    return contents


def generate(report: ScanReport, entries: Sequence[tuple[LeakEntry, int, int]]) -> str:
    """A suppression file for these entries (weighted()), one rule per
    distinct pattern, each after comments saying what it suppresses."""
    groups: dict[str, list[tuple[LeakEntry, int, int]]] = {}
    for entry in entries:
        groups.setdefault(rule_for(entry[0]), []).append(entry)
    lines = [
        f"# unreachable-cli scan --print-suppressions: pid {report.pid} ({report.command})",
        "# LeakSanitizer's format: LSAN_OPTIONS=suppressions=FILE reads it too.",
    ]
    for pattern, members in groups.items():
        count = sum(c for _, c, _ in members)
        size = sum(b for _, _, b in members)
        lines.append("")
        lines.append(f"# {size} bytes in {count} allocation{'' if count == 1 else 's'}")
        first = members[0][0]
        for frame in first.backtrace[:8]:
            where = frame.function or f"{os.path.basename(frame.map)}+0x{frame.rel_pc:x}"
            lines.append(f"#   {where}" + (f" {frame.file}:{frame.line}" if frame.file else ""))
        lines.append(f"leak:{pattern}")
    # The command line, names and patterns are the target's: one line each.
    return "\n".join(printable(line) for line in lines) + "\n"


def format_used(suppressed: Suppressed) -> list[str]:
    """LSan's block (PrintMatchedSuppressions), printed when a rule matched."""
    if not suppressed.used:
        return []
    dashes = "-" * 53
    return [
        dashes,
        "Suppressions used:",
        "  count      bytes template",
        *(f"{u.count:7d} {u.bytes:10d} {u.rule.pattern}" for u in suppressed.used),
        dashes,
    ]
