"""Run scans and heap dumps in subprocesses, one pid at a time, many pids at once.

Each scan is a worker process, `python -P -m unreachable.daemon.worker
-` (daemon/worker.py: a JSON request on its stdin; JSON progress
lines, then the result or the error with its gRPC status on stdout),
started with asyncio.create_subprocess_exec (no fork without exec after grpc
has started). The ptrace work therefore never touches the daemon's threads,
and killing the subprocess is enough to abort a scan: the kernel detaches
the tracer's tracees when it dies, which releases the target at once. For
the same reason a scan that outgrows the daemon's memory limit is the OOM
killer's first choice, not the daemon (with the unit's OOMPolicy=continue
systemd then keeps the daemon running).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc

from unreachable.process.cgroup_memory import oom_victim_first

log = logging.getLogger("unreachabled.scans")

ProgressCallback = Callable[[str, float], Awaitable[None]]

_STATUS = {
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}
WORKER_MODULE = "unreachable.daemon.worker"
# A report is one line of JSON: as long as the scan's leaks make it.
_LINE_LIMIT = 1 << 40


class ScanFailed(Exception):
    """A scan could not be done: a gRPC status and a one-line message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def _ignore_progress(_stage: str, _elapsed_ms: float) -> None:
    return None


class ScanRunner:
    def __init__(
        self,
        *,
        timeout: float,
        max_concurrent: int,
        mark_threads: int = 0,
        suppressions: Sequence[str] = (),
    ) -> None:
        self._timeout = timeout
        self._suppressions = list(suppressions)  # files every scan applies
        self._mark_threads = mark_threads  # for scans that do not name theirs
        self._slots = asyncio.Semaphore(max_concurrent)
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}
        self._procs: set[asyncio.subprocess.Process] = set()
        self._stopping = False  # kill_all ran: a worker's death is the daemon's doing
        # Not for the scanner: the shim, and systemd's notify/watchdog (the daemon's own).
        skip = ("LD_PRELOAD", "UNREACHABLE_DEBUG", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC")
        env = {k: v for k, v in os.environ.items() if k not in skip}
        env["PYTHONUNBUFFERED"] = "1"
        self._env = env

    @contextlib.asynccontextmanager
    async def _pid_lock(self, pid: int) -> AsyncIterator[None]:
        lock, users = self._locks.get(pid, (asyncio.Lock(), 0))
        self._locks[pid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[pid]
            if users == 1:
                del self._locks[pid]
            else:
                self._locks[pid] = (lock, users - 1)

    def busy(self, pid: int) -> bool:
        return pid in self._locks

    async def scan(
        self,
        pid: int,
        *,
        contents: bool = False,
        limit: int = 100,
        snapshot: str = "auto",
        sweep: str = "auto",
        mark_threads: int = 0,
        baseline: str = "",
        progress: ProgressCallback = _ignore_progress,
    ) -> dict[str, Any]:
        """The report as report_to_dict() makes it; ScanFailed otherwise.
        mark_threads 0: the daemon's --mark-threads, else the CLI's default."""
        request: dict[str, Any] = {"command": "scan", "pid": pid, "limit": limit}
        request |= {"snapshot": snapshot, "sweep": sweep, "contents": contents}
        request["mark_threads"] = mark_threads or self._mark_threads
        request |= {"suppressions": self._suppressions, "baseline": baseline}
        return await self._run(pid, request, progress)

    async def why(self, pid: int, address: int, snapshot: str = "auto") -> dict[str, Any]:
        """`unreachable-cli why --json`'s report; ScanFailed otherwise."""
        request = {"command": "why", "pid": pid, "address": address, "snapshot": snapshot}
        return await self._run(pid, request, None)

    async def retainers(
        self, pid: int, site: str | None, limit: int = 10, snapshot: str = "auto"
    ) -> dict[str, Any]:
        """`unreachable-cli retainers --json`'s report; ScanFailed otherwise."""
        request = {"command": "retainers", "pid": pid, "site": site, "limit": limit}
        return await self._run(pid, request | {"snapshot": snapshot}, None)

    async def heap_dump(self, pid: int) -> dict[str, Any]:
        return await self._run(pid, {"command": "heapdump", "pid": pid}, None)

    async def _run(
        self, pid: int, request: dict[str, Any], progress: ProgressCallback | None
    ) -> dict[str, Any]:
        async with self._pid_lock(pid), self._slots:
            if progress is not None:
                await progress("started", 0.0)
            try:
                async with asyncio.timeout(self._timeout):
                    return await self._subprocess(request, progress)
            except TimeoutError:
                raise ScanFailed(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"pid {pid}: gave up after {self._timeout:g} s (--scan-timeout)",
                ) from None

    async def _subprocess(
        self, request: dict[str, Any], progress: ProgressCallback | None
    ) -> dict[str, Any]:
        text = json.dumps(request)
        log.debug("running the worker: %s", text)
        # -P: `-m` would put the working directory first on sys.path, and a
        # root daemon started in someone's directory would import their
        # argparse.py or unreachable/ instead of its own. cwd /: relative
        # PYTHONPATH entries cannot point into that directory either.
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-m",
            WORKER_MODULE,
            "-",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env,
            cwd="/",
            limit=_LINE_LIMIT,
        )
        oom_victim_first(proc.pid)
        self._procs.add(proc)
        last: dict[str, Any] | None = None
        try:
            await _send(proc, text)
            assert proc.stdout is not None and proc.stderr is not None
            stderr = asyncio.ensure_future(proc.stderr.read())
            try:
                async for raw in proc.stdout:
                    try:
                        msg = json.loads(raw)
                    except ValueError:
                        continue  # not the protocol: the exit status says what happened
                    if not isinstance(msg, dict):
                        continue
                    if "progress" in msg:
                        if progress is not None:
                            await progress(str(msg["progress"]), float(msg["elapsed_ms"]))
                    else:
                        last = msg
                text_err = (await stderr).decode(errors="replace")
            finally:
                stderr.cancel()
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()  # cancelled or timed out: the kernel releases the target now
                await asyncio.shield(proc.wait())
            self._procs.discard(proc)
        if code == 0 and last is not None and isinstance(last.get("result"), dict):
            result: dict[str, Any] = last["result"]
            return result
        if self._stopping and code < 0:
            # Killed by kill_all, not by the OOM killer its SIGKILL would name.
            raise ScanFailed(
                grpc.StatusCode.ABORTED, "the daemon is stopping: the scan was cut short"
            )
        raise _failure(code, last, [line for line in text_err.splitlines() if line])

    def kill_all(self) -> None:
        self._stopping = True
        for proc in list(self._procs):
            if proc.returncode is None:
                proc.kill()


def _failure(code: int, last: dict[str, Any] | None, text: list[str]) -> ScanFailed:
    if last is not None and "error" in last:
        status = _STATUS.get(str(last["error"]), grpc.StatusCode.INTERNAL)
        message = (str(last.get("message", "")).splitlines() or ["the scan failed"])[0]
        return ScanFailed(status, message)
    log.debug("worker stderr: %s", "\n".join(text))
    if code == -9:
        return ScanFailed(
            grpc.StatusCode.INTERNAL,
            "the scanner was killed (SIGKILL: the OOM killer, if the daemon has a memory limit)",
        )
    if code < 0:
        return ScanFailed(grpc.StatusCode.INTERNAL, f"the scanner died of signal {-code}")
    last_line = text[-1] if text else f"the scanner exited with status {code} without a result"
    return ScanFailed(grpc.StatusCode.INTERNAL, last_line)


async def _send(proc: asyncio.subprocess.Process, text: str) -> None:
    """The request on the worker's stdin, not in its argv: a client's string
    (a Retainers site) may be longer than one argument can be (128 KiB), and
    argv is readable by every local user in /proc/PID/cmdline."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode())
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker died at start: its exit status says why
    finally:
        proc.stdin.close()
