"""Build and run the malloc_debug option programs under the shim."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from tests.support.cbuild import build
from tests.support.targets import Target

PROGRAMS = Path(__file__).resolve().parent / "programs"
# The programs use memory after free() on purpose.
CFLAGS = ["-Wno-use-after-free", "-Wno-free-nonheap-object"]
DIVIDER = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"
FRAME = re.compile(r"^          #(\d\d)  pc ([0-9a-f]{16})  (\S.*?)(?: \((\S+)\+(\d+)\))?$")
TAG = "malloc_debug: "


def exe(name: str) -> Path:
    return build(PROGRAMS / name, cflags=CFLAGS)


def env_for(shim: Path, options: str | None, extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    env.pop("UNREACHABLE_MALLOC_OPTIONS", None)
    env["LD_PRELOAD"] = str(shim)
    if options is not None:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    env.update(extra or {})
    return env


def run(name: str, *args: str, shim: Path, options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(exe(name)), *args],
        env=env_for(shim, options),
        capture_output=True,
        text=True,
        timeout=120,
    )


def md_lines(stderr: str) -> list[str]:
    """The malloc_debug lines of stderr, without the tag."""
    return [line[len(TAG) :] for line in stderr.splitlines() if line.startswith(TAG)]


def reports(stderr: str) -> list[list[str]]:
    """Error reports: the lines between two divider lines."""
    out: list[list[str]] = []
    cur: list[str] | None = None
    for line in md_lines(stderr):
        if line == DIVIDER:
            if cur is None:
                cur = []
            else:
                out.append(cur)
                cur = None
        elif cur is not None:
            cur.append(line)
    assert cur is None, f"unterminated report: {cur}"
    return out


def split_backtrace(lines: list[str], title: str) -> tuple[list[str], list[re.Match[str]]]:
    """(lines before `title`, its frame lines) ; the frames must be numbered from 0."""
    i = lines.index(title)
    frames = []
    for line in lines[i + 1 :]:
        m = FRAME.match(line)
        if not m:
            break
        assert int(m.group(1)) == len(frames), line
        frames.append(m)
    assert frames, f"no frames after {title!r}: {lines}"
    return lines[:i], frames


def values(stdout: str) -> dict[str, str]:
    """`key value` lines the programs print."""
    out = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value
    return out


class Proc(Target):
    """A program started with stdin/stdout pipes and stderr in a file."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr_path: Path) -> None:
        super().__init__(proc)
        self.stderr_path = stderr_path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_stderr(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.stderr(), re.M)
            if m:
                return m
            assert time.monotonic() < deadline, f"no {pattern!r} in stderr:\n{self.stderr()}"
            time.sleep(0.02)

    def finish(self, timeout: float = 60.0) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)


class ProcFactory:
    def __init__(self, shim: Path, tmp: Path) -> None:
        self.shim = shim
        self.tmp = tmp
        self.started: list[Proc] = []

    def start(
        self, name: str | Path, *args: str, options: str, env: dict[str, str] | None = None
    ) -> Proc:
        path = exe(name) if isinstance(name, str) else build(name)
        err = self.tmp / f"stderr-{len(self.started)}.txt"
        with open(err, "wb") as f:
            proc = subprocess.Popen(
                [str(path), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=f,
                env=env_for(self.shim, options, env),
            )
        p = Proc(proc, err)
        self.started.append(p)
        return p

    def cleanup(self) -> None:
        for p in self.started:
            p.stop()


def wait_file(path: Path, predicate=lambda text: True, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        if path.exists():
            text = path.read_text()
            if predicate(text):
                return text
        assert time.monotonic() < deadline, f"{path} never became complete"
        time.sleep(0.02)
