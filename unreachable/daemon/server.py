"""The gRPC server: the Unreachable service, health, reflection, and the listeners.

Listeners: a unix socket (mode and group set before anyone can connect: the
docker.sock model, since grpcio exposes no peer credentials), optionally TCP
with TLS or mTLS, plaintext TCP only on loopback and only when asked for; and
the notify socket for shims.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import logging
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from unreachable.daemon.config import BASELINE_FIRST, Config, ConfigError
from unreachable.daemon.history import MEMORY, History
from unreachable.daemon.malformed import RefuseMalformed
from unreachable.daemon.matching import read_process
from unreachable.daemon.metrics import Metrics
from unreachable.daemon.monitor import Monitor
from unreachable.daemon.notify import NotifyListener
from unreachable.daemon.notify_limits import pending_per_uid
from unreachable.daemon.producer import ReportProducer
from unreachable.daemon.scans import ScanFailed, ScanRunner
from unreachable.daemon.schedule import Scheduler
from unreachable.daemon.sdnotify import Status, run_watchdog, sd_notify, watchdog_interval
from unreachable.daemon.sockets import created_as, safe_socket_path
from unreachable.daemon.targets import list_targets
from unreachable.daemon.watch import WatchHub
from unreachable.report.text import format_summary
from unreachable.rpc.client import MAX_MESSAGE
from unreachable.rpc.convert import (
    SNAPSHOTS,
    STAGES,
    SWEEPS,
    heapdump_from_dict,
    report_from_dict,
    report_to_model,
    strip_contents,
)
from unreachable.sweep.child import MAX_MARK_THREADS
from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from unreachable.daemon.malformed import Context

log = logging.getLogger("unreachabled")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Unreachable"].full_name
CONTENTS_REFUSED = "leak contents are not allowed by this server (unreachabled --allow-contents)"


@contextlib.asynccontextmanager
async def _deadline(context: Context, work: str) -> AsyncIterator[None]:
    """Abort the work when the client's deadline passes, even if grpc lets it run.

    Either our timer or grpc's own cancellation may fire first; both are logged
    the same way so an operator sees one line whichever won."""
    remaining = context.time_remaining()
    try:
        if remaining is None:
            yield
            return
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                yield
        except TimeoutError:
            log.info("%s cancelled (deadline passed)", work)
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
    except asyncio.CancelledError:
        log.info("%s cancelled (client gone or deadline passed)", work)
        raise


class UnreachableService(pb_grpc.UnreachableServicer):
    def __init__(
        self,
        config: Config,
        runner: ScanRunner,
        hub: WatchHub,
        producer: ReportProducer | None = None,
    ) -> None:
        self._config = config
        self._runner = runner
        self._hub = hub
        self._producer = producer  # keeps the baselines ScanRequest.baseline asks for

    async def _baseline(self, pid: int, context: Context) -> str:
        """The baseline file the daemon keeps for pid; aborts when it keeps none."""
        info = read_process(pid)
        if info is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no process with pid {pid}")
        assert info is not None
        path = self._producer.baseline_for(info) if self._producer is not None else ""
        if not path:
            setting = self._producer.baseline_setting(info) if self._producer is not None else ""
            why = (
                'its first background scan, which becomes it (baseline = "first"), has not run'
                if setting == BASELINE_FIRST
                else "neither its [[targets]] entry nor the daemon's configuration names one"
            )
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"pid {pid} has no baseline: {why}"
            )
        return path

    async def _check_pid(self, pid: int, context: Context) -> None:
        if pid <= 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a pid: {pid}")

    async def Scan(  # noqa: N802 - the RPC's name
        self, request: pb.ScanRequest, context: Context
    ) -> None:
        await self._check_pid(request.pid, context)
        if request.contents and not self._config.allow_contents:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, CONTENTS_REFUSED)
        if request.snapshot not in SNAPSHOTS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown snapshot mode")
        if request.sweep not in SWEEPS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown sweep mode")
        if request.mark_threads > MAX_MARK_THREADS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"mark_threads must be 0 (the default) to {MAX_MARK_THREADS}",
            )
        limit = request.limit if request.HasField("limit") else 100
        baseline = await self._baseline(request.pid, context) if request.baseline else ""

        async def progress(stage: str, elapsed_ms: float) -> None:
            event = pb.ScanProgress(
                stage=STAGES.get(stage, pb.SCAN_STAGE_UNSPECIFIED),
                stage_name=stage,
                elapsed_ms=elapsed_ms,
            )
            await context.write(pb.ScanEvent(progress=event))

        log.info("scan of pid %d asked by %s", request.pid, context.peer())
        try:
            async with _deadline(context, f"scan of pid {request.pid}"):
                report = await self._runner.scan(
                    request.pid,
                    contents=request.contents,
                    limit=limit,
                    snapshot=SNAPSHOTS[request.snapshot],
                    sweep=SWEEPS[request.sweep],
                    mark_threads=request.mark_threads,
                    baseline=baseline,
                    progress=progress,
                )
        except ScanFailed as e:
            log.info("scan of pid %d: %s: %s", request.pid, e.code.name, e.message)
            await context.abort(e.code, e.message)
        proto = report_from_dict(report)
        log.info("scan of pid %d: %s", request.pid, format_summary(report_to_model(proto)))
        await context.write(pb.ScanEvent(report=proto))

    async def Watch(  # noqa: N802
        self, request: pb.WatchRequest, context: Context
    ) -> None:
        if request.contents and not self._config.allow_contents:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, CONTENTS_REFUSED)
        with self._hub.subscribe(request.pid, request.name) as sub:
            # Headers go out once subscribed: a client that waits for them
            # cannot miss a report produced after that.
            await context.send_initial_metadata((("unreachable-subscribed", "1"),))
            while True:
                item = await sub.queue.get()
                event = item.event
                if not request.contents:
                    stripped = strip_contents(event.report)
                    if stripped is not event.report:
                        event = pb.WatchEvent()
                        event.CopyFrom(item.event)
                        event.report.CopyFrom(stripped)
                await context.write(event)

    async def HeapDump(  # noqa: N802
        self, request: pb.HeapDumpRequest, context: Context
    ) -> pb.HeapDumpResponse:
        await self._check_pid(request.pid, context)
        log.info("heap dump of pid %d asked by %s", request.pid, context.peer())
        try:
            async with _deadline(context, f"heap dump of pid {request.pid}"):
                dump = await self._runner.heap_dump(request.pid)
        except ScanFailed as e:
            await context.abort(e.code, e.message)
        return heapdump_from_dict(dump)

    async def Why(  # noqa: N802
        self, request: pb.WhyRequest, context: Context
    ) -> pb.RetentionReport:
        await self._check_pid(request.pid, context)
        if request.snapshot not in SNAPSHOTS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown snapshot mode")
        if not request.address:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not an address: 0")
        log.info("why of %#x in pid %d asked by %s", request.address, request.pid, context.peer())
        try:
            async with _deadline(context, f"why of pid {request.pid}"):
                report = await self._runner.why(
                    request.pid, request.address, SNAPSHOTS[request.snapshot]
                )
        except ScanFailed as e:
            await context.abort(e.code, e.message)
        return pb.RetentionReport(json=json.dumps(report))

    async def Retainers(  # noqa: N802
        self, request: pb.RetainersRequest, context: Context
    ) -> pb.RetentionReport:
        await self._check_pid(request.pid, context)
        if request.snapshot not in SNAPSHOTS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown snapshot mode")
        site = request.site if request.HasField("site") else None
        if site is not None and not site.strip("*"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "--site needs a pattern with something besides '*'",
            )
        limit = request.limit if request.HasField("limit") else 10
        log.info("retainers of pid %d asked by %s", request.pid, context.peer())
        try:
            async with _deadline(context, f"retainers of pid {request.pid}"):
                report = await self._runner.retainers(
                    request.pid, site, limit, SNAPSHOTS[request.snapshot]
                )
        except ScanFailed as e:
            await context.abort(e.code, e.message)
        return pb.RetentionReport(json=json.dumps(report))

    async def ListTargets(  # noqa: N802
        self, request: pb.ListTargetsRequest, context: Context
    ) -> pb.ListTargetsResponse:
        del request, context
        targets = await asyncio.get_running_loop().run_in_executor(None, list_targets)
        return pb.ListTargetsResponse(
            targets=[
                pb.Target(
                    pid=t.pid,
                    command=t.command,
                    name=t.name,
                    options=t.options,
                    enabled=t.enabled,
                    shim=t.shim,
                )
                for t in targets
            ]
        )


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None


def _add_unix_listener(server: grpc.aio.Server, config: Config) -> str:
    path = safe_socket_path(config.socket, "gRPC socket")
    gid = -1
    if config.socket_group:
        try:
            gid = grp.getgrnam(config.socket_group).gr_gid
        except KeyError:
            raise ConfigError(f"no such group: {config.socket_group}") from None
    # Mode and group come from bind itself: no path operation after it that a
    # swapped-in symlink could redirect, and never looser than configured.
    with created_as(config.socket_mode, gid):
        try:
            server.add_insecure_port(f"unix:{path}")
        except RuntimeError:
            raise ConfigError(f"cannot listen on unix:{path} (something else is there)") from None
    log.info("listening on unix:%s (mode %04o)", path, config.socket_mode)
    return path


def _reach() -> str:
    """What a client the daemon admits can do, for the warnings below."""
    uid = os.geteuid()
    if uid == 0 or _has_cap_sys_ptrace():
        return "list, scan, heap-dump and watch every process on this host"
    return f"list, scan, heap-dump and watch every process of uid {uid}"


def _has_cap_sys_ptrace() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 19 & 1)  # CAP_SYS_PTRACE
    except (OSError, ValueError):
        pass
    return False


def _add_tcp_listener(server: grpc.aio.Server, config: Config) -> None:
    try:
        if config.insecure_tcp:
            port = server.add_insecure_port(config.tcp)
        else:
            client_ca = _read(config.tls_client_ca, "client CA") if config.tls_client_ca else None
            creds = grpc.ssl_server_credentials(
                [(_read(config.tls_key, "TLS key"), _read(config.tls_cert, "TLS certificate"))],
                root_certificates=client_ca,
                require_client_auth=client_ca is not None,
            )
            port = server.add_secure_port(config.tcp, creds)
    except RuntimeError:  # grpcio's bind failure
        port = 0
    if port == 0:
        raise ConfigError(f"cannot listen on {config.tcp} (the port is in use, or not this host's)")
    host = config.tcp.rpartition(":")[0]
    if config.insecure_tcp:
        log.warning(
            "listening on tcp %s:%d in plaintext (--insecure-tcp, for tests): every local "
            "user and every process in this network namespace, whatever the unix socket's "
            "mode and group, can %s",
            host,
            port,
            _reach(),
        )
    elif config.tls_client_ca:
        log.info(
            "listening on tcp %s:%d (mTLS: clients need a certificate signed by %s; "
            "every holder of one can %s)",
            host,
            port,
            config.tls_client_ca,
            _reach(),
        )
    else:
        log.warning(
            "listening on tcp %s:%d with TLS but no client certificates "
            "(--dangerously-allow-unauthenticated-tcp): anyone who can reach this port can %s",
            host,
            port,
            _reach(),
        )


def _open_history(config: Config) -> History:
    path = config.history_path()
    try:
        history = History(path or MEMORY)
    except (OSError, sqlite3.Error) as e:
        raise ConfigError(f"cannot open the history {path}: {e}") from None
    log.info("history: %s", path or "in memory only (no history file configured)")
    return history


def _start_metrics(config: Config) -> Metrics | None:
    if not config.metrics:
        return None
    metrics = Metrics()
    try:
        host, port = metrics.serve(config.metrics)
    except OSError as e:
        raise ConfigError(f"cannot serve metrics on {config.metrics}: {e}") from None
    shown = f"[{host}]" if ":" in host else host
    log.info("metrics on http://%s:%d/metrics", shown, port)
    return metrics


async def serve(config: Config) -> int:
    server = _grpc_server()
    hub = WatchHub()
    runner = ScanRunner(
        timeout=config.scan_timeout,
        max_concurrent=config.max_concurrent_scans,
        mark_threads=config.mark_threads,
        suppressions=config.suppressions,
    )
    history = _open_history(config)
    metrics = _start_metrics(config)
    status = Status()
    monitor = Monitor(config, hub, history=history, metrics=metrics, status=status)
    producer = ReportProducer(runner, monitor, contents=config.allow_contents)
    pb_grpc.add_UnreachableServicer_to_server(
        UnreachableService(config, runner, hub, producer), server
    )
    health_servicer = _add_health_and_reflection(server)
    unix_path, notify = await _start_listening(server, config, producer)
    tasks = _start_background_tasks(config, producer, monitor)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    await _until_stop_signal(status)

    log.info("stopping")
    sd_notify("STOPPING=1")
    await health_servicer.enter_graceful_shutdown()
    for task in tasks:
        task.cancel()
    if notify is not None:
        await notify.close()
    runner.kill_all()
    await producer.close()
    await server.stop(grace=2.0)
    if metrics is not None:
        metrics.close()
    history.close()
    if unix_path:
        with contextlib.suppress(OSError):
            os.unlink(unix_path)
    return 0


def _grpc_server() -> grpc.aio.Server:
    return grpc.aio.server(
        interceptors=[RefuseMalformed()],
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.so_reuseport", 0),
        ],
    )


def _add_health_and_reflection(server: grpc.aio.Server) -> Any:
    # grpc_health binds `aio` by a relative import its stubs do not declare.
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return health_servicer


async def _start_listening(
    server: grpc.aio.Server, config: Config, producer: ReportProducer
) -> tuple[str, NotifyListener | None]:
    """Opens the unix socket, TCP and the notify socket; returns the unix
    socket's path ('' when none) and the notify listener."""
    unix_path = ""
    notify = None
    try:
        unix_path = _add_unix_listener(server, config) if config.socket else ""
        if config.tcp:
            _add_tcp_listener(server, config)
        if config.notify_socket:
            notify = NotifyListener(
                safe_socket_path(config.notify_socket, "notify socket"),
                config.notify_mode,
                lambda pid, info, done: producer.request(pid, pb.TRIGGER_SIGNAL, info, done),
                pending_per_uid(config.max_concurrent_scans),
            )
        await server.start()
        if notify is not None:
            await notify.start()
    except ConfigError:
        # Stopped here, or grpcio's server complains at exit after the
        # one-line error; and no socket left behind.
        await server.stop(None)
        if unix_path:
            with contextlib.suppress(OSError):
                os.unlink(unix_path)
        raise
    return unix_path, notify


def _start_background_tasks(
    config: Config, producer: ReportProducer, monitor: Monitor
) -> list[asyncio.Task[None]]:
    """The scan schedule and the systemd watchdog, when configured."""
    tasks = []
    if config.scan_interval > 0:
        tasks.append(asyncio.create_task(Scheduler(config, producer, monitor).run()))
        log.info(
            "scheduled scans every %g s of %s",
            config.scan_interval,
            f"{len(config.targets)} target pattern(s)"
            if config.targets
            else "every shimmed process",
        )
    watchdog = watchdog_interval()
    if watchdog is not None:
        tasks.append(asyncio.create_task(run_watchdog(watchdog)))
    return tasks


async def _until_stop_signal(status: Status) -> None:
    """Tells systemd the daemon is ready, then waits for SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sd_notify(f"READY=1\nSTATUS={status.text()}")
    log.info("ready (pid %d)", os.getpid())
    await stop.wait()
