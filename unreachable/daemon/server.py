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
import logging
import os
import signal
import sqlite3
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from unreachable.daemon.config import Config, ConfigError
from unreachable.daemon.history import MEMORY, History
from unreachable.daemon.metrics import Metrics
from unreachable.daemon.monitor import Monitor
from unreachable.daemon.notify import NotifyListener
from unreachable.daemon.producer import ReportProducer
from unreachable.daemon.scans import ScanFailed, ScanRunner
from unreachable.daemon.schedule import Scheduler
from unreachable.daemon.sdnotify import Status, run_watchdog, sd_notify, watchdog_interval
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

log = logging.getLogger("unreachabled")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Unreachable"].full_name
CONTENTS_REFUSED = "leak contents are not allowed by this server (unreachabled --allow-contents)"


@contextlib.asynccontextmanager
async def _deadline(context: grpc.aio.ServicerContext, work: str) -> AsyncIterator[None]:
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
    def __init__(self, config: Config, runner: ScanRunner, hub: WatchHub) -> None:
        self._config = config
        self._runner = runner
        self._hub = hub

    async def _check_pid(self, pid: int, context: grpc.aio.ServicerContext) -> None:
        if pid <= 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a pid: {pid}")

    async def Scan(  # noqa: N802 - the RPC's name
        self, request: pb.ScanRequest, context: grpc.aio.ServicerContext
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
                    progress=progress,
                )
        except ScanFailed as e:
            log.info("scan of pid %d: %s: %s", request.pid, e.code.name, e.message)
            await context.abort(e.code, e.message)
        proto = report_from_dict(report)
        log.info("scan of pid %d: %s", request.pid, format_summary(report_to_model(proto)))
        await context.write(pb.ScanEvent(report=proto))

    async def Watch(  # noqa: N802
        self, request: pb.WatchRequest, context: grpc.aio.ServicerContext
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
        self, request: pb.HeapDumpRequest, context: grpc.aio.ServicerContext
    ) -> pb.HeapDumpResponse:
        await self._check_pid(request.pid, context)
        log.info("heap dump of pid %d asked by %s", request.pid, context.peer())
        try:
            async with _deadline(context, f"heap dump of pid {request.pid}"):
                dump = await self._runner.heap_dump(request.pid)
        except ScanFailed as e:
            await context.abort(e.code, e.message)
        return heapdump_from_dict(dump)

    async def ListTargets(  # noqa: N802
        self, request: pb.ListTargetsRequest, context: grpc.aio.ServicerContext
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


def _add_unix_listener(server: grpc.aio.Server, config: Config) -> None:
    path = os.path.abspath(config.socket)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    gid = -1
    if config.socket_group:
        try:
            gid = grp.getgrnam(config.socket_group).gr_gid
        except KeyError:
            raise ConfigError(f"no such group: {config.socket_group}") from None
    # Bind under a tight umask so the socket is never reachable with looser
    # permissions than configured, then set the configured mode and group.
    old = os.umask(0o177)
    try:
        server.add_insecure_port(f"unix:{path}")
    finally:
        os.umask(old)
    if gid >= 0:
        os.chown(path, -1, gid)
    os.chmod(path, config.socket_mode)
    log.info("listening on unix:%s (mode %04o)", path, config.socket_mode)


def _add_tcp_listener(server: grpc.aio.Server, config: Config) -> None:
    if config.insecure_tcp:
        port = server.add_insecure_port(config.tcp)
        kind = "plaintext, loopback only"
    else:
        client_ca = _read(config.tls_client_ca, "client CA") if config.tls_client_ca else None
        creds = grpc.ssl_server_credentials(
            [(_read(config.tls_key, "TLS key"), _read(config.tls_cert, "TLS certificate"))],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )
        port = server.add_secure_port(config.tcp, creds)
        kind = "mTLS" if client_ca else "TLS"
    if port == 0:
        raise ConfigError(f"cannot listen on {config.tcp}")
    host = config.tcp.rpartition(":")[0]
    log.info("listening on tcp %s:%d (%s)", host, port, kind)


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
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.so_reuseport", 0),
        ]
    )
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
    pb_grpc.add_UnreachableServicer_to_server(UnreachableService(config, runner, hub), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    if config.socket:
        _add_unix_listener(server, config)
    if config.tcp:
        _add_tcp_listener(server, config)

    notify = None
    if config.notify_socket:
        notify = NotifyListener(
            os.path.abspath(config.notify_socket),
            config.notify_mode,
            lambda pid: producer.request(pid, pb.TRIGGER_SIGNAL),
        )
    await server.start()
    if notify is not None:
        os.makedirs(os.path.dirname(notify.path), mode=0o755, exist_ok=True)
        await notify.start()
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
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sd_notify(f"READY=1\nSTATUS={status.text()}")
    log.info("ready (pid %d)", os.getpid())
    await stop.wait()

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
    if config.socket:
        with contextlib.suppress(OSError):
            os.unlink(config.socket)
    return 0
