"""The daemon's settings, from the command line or a TOML file (docs/daemon.md)."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from unreachable.rpc.options import DEFAULT_NOTIFY_SOCKET, DEFAULT_SOCKET


class ConfigError(Exception):
    """A setting is wrong; the message is one line for the operator."""


@dataclass(slots=True)
class Config:
    socket: str = DEFAULT_SOCKET  # "" to disable
    socket_mode: int = 0o660
    socket_group: str = ""
    notify_socket: str = DEFAULT_NOTIFY_SOCKET  # "" to disable
    notify_mode: int = 0o666  # a peer can only ask for a scan of itself
    tcp: str = ""  # host:port, TLS unless insecure_tcp
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""  # set: clients must present a certificate signed by it (mTLS)
    insecure_tcp: bool = False  # plaintext TCP, loopback only
    allow_contents: bool = False
    scan_interval: float = 0.0  # seconds between scheduled scans of every shimmed target; 0: off
    scan_timeout: float = 300.0  # seconds a scan subprocess may run
    max_concurrent_scans: int = 8
    log_level: str = "INFO"

    def validate(self) -> None:
        if not self.socket and not self.tcp:
            raise ConfigError("nothing to listen on: give --socket or --tcp")
        if self.tcp:
            host, port = split_host_port(self.tcp)
            if self.insecure_tcp:
                if self.tls_cert or self.tls_key or self.tls_client_ca:
                    raise ConfigError("--insecure-tcp and --tls-* exclude each other")
                if not is_loopback(host):
                    raise ConfigError(
                        f"--insecure-tcp listens on loopback only, not {host!r} "
                        "(use TLS: --tls-cert/--tls-key)"
                    )
            elif not (self.tls_cert and self.tls_key):
                raise ConfigError(
                    "--tcp needs --tls-cert and --tls-key (or --insecure-tcp on loopback)"
                )
        elif self.tls_cert or self.tls_key or self.tls_client_ca or self.insecure_tcp:
            raise ConfigError("--tls-* and --insecure-tcp apply to --tcp")
        if self.scan_interval < 0 or self.scan_timeout <= 0 or self.max_concurrent_scans < 1:
            raise ConfigError("scan_interval >= 0, scan_timeout > 0, max_concurrent_scans >= 1")


def split_host_port(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"bad TCP address {addr!r}: use host:port")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)
