"""Client side of unreachabled: channels from --remote/--tls-* and errors as ScanErrors.

Addresses: `unix:/path` (or `unix:///path`) for the local socket, `host:port`
for TCP. TCP is TLS (verified against --tls-ca, else the system roots; with
--tls-cert/--tls-key as the client certificate for mTLS) unless --insecure is
given, which only a daemon started with --insecure-tcp on loopback accepts.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import grpc  # noqa: E402 - after the fork setting

from unreachable import errors  # noqa: E402
from unreachable.v1 import unreachable_pb2_grpc  # noqa: E402

MAX_MESSAGE = 256 * 1024 * 1024


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.InvalidArgument(f"cannot read {what} {path}: {e.strerror or e}") from None


def open_channel(args: argparse.Namespace) -> grpc.Channel:
    addr: str = args.remote
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.enable_retries", 0),
    ]
    if addr.startswith("unix:") or addr.startswith("unix-abstract:"):
        if args.tls_ca or args.tls_cert or args.tls_key:
            raise errors.InvalidArgument("--tls-* options apply to TCP addresses, not unix sockets")
        return grpc.insecure_channel(addr, options=options)
    if addr.startswith("/"):
        return grpc.insecure_channel(f"unix:{addr}", options=options)
    if ":" not in addr:
        raise errors.InvalidArgument(f"bad --remote {addr!r}: use unix:/path or host:port")
    if args.insecure:
        if args.tls_ca or args.tls_cert or args.tls_key:
            raise errors.InvalidArgument("--insecure and --tls-* exclude each other")
        return grpc.insecure_channel(addr, options=options)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise errors.InvalidArgument("--tls-cert and --tls-key go together")
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(args.tls_ca, "CA certificate"),
        private_key=_read(args.tls_key, "private key"),
        certificate_chain=_read(args.tls_cert, "certificate"),
    )
    return grpc.secure_channel(addr, creds, options=options)


def stub(channel: grpc.Channel) -> unreachable_pb2_grpc.UnreachableStub:
    return unreachable_pb2_grpc.UnreachableStub(channel)


_STATUS_ERRORS: dict[grpc.StatusCode, type[errors.ScanError]] = {
    grpc.StatusCode.NOT_FOUND: errors.TargetNotFound,
    grpc.StatusCode.PERMISSION_DENIED: errors.TargetPermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: errors.TargetUnscannable,
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ScannerOutOfMemory,
}


def rpc_error(e: grpc.RpcError, addr: str) -> errors.ScanError:
    """The daemon's one-line message as the ScanError an embedded scan would raise."""
    code = e.code() if isinstance(e, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (e.details() if isinstance(e, grpc.Call) else "") or str(code)
    cls = _STATUS_ERRORS.get(code)
    if cls is not None:
        return cls(details)
    if code == grpc.StatusCode.UNAVAILABLE:
        return errors.ScanError(f"cannot reach unreachabled at {addr}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.ScanError(f"unreachabled at {addr}: deadline exceeded")
    if code == grpc.StatusCode.CANCELLED:
        return errors.ScanError(f"unreachabled at {addr}: cancelled")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return errors.TargetPermissionDenied(f"unreachabled at {addr}: {details}")
    return errors.ScanError(f"unreachabled at {addr}: {code.name.lower()}: {details}")
