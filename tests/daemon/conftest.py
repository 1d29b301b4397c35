"""A real unreachabled process per test, on temporary sockets; certificates made here."""

from __future__ import annotations

import datetime
import ipaddress
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

DAEMON = [sys.executable, "-m", "unreachable.daemon.main"]
START_TIMEOUT = 60.0


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    dir: Path
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    log: list[str] = field(default_factory=list)
    tcp_port: int = 0

    @property
    def socket(self) -> Path:
        return self.dir / "d.sock"

    @property
    def notify_socket(self) -> Path:
        return self.dir / "notify.sock"

    @property
    def address(self) -> str:
        return f"unix:{self.socket}"

    def wait_for_log(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        for line in self.log:
            if m := re.search(pattern, line):
                return m
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no log line {pattern!r}; log:\n" + "\n".join(self.log))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if m := re.search(pattern, line):
                return m

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def _pump(d: Daemon) -> None:
    assert d.proc.stderr is not None
    for line in d.proc.stderr:
        line = line.rstrip("\n")
        d.log.append(line)
        d.lines.put(line)


class DaemonFactory:
    def __init__(self) -> None:
        self.started: list[Daemon] = []

    def start(
        self,
        *args: str,
        unix: bool = True,
        wait: bool = True,
        env: dict[str, str] | None = None,
        command: list[str] = DAEMON,
        cwd: Path | None = None,
    ) -> Daemon:
        # Short path: a unix socket path must fit in 108 bytes.
        d_dir = Path(tempfile.mkdtemp(prefix="urd-", dir="/tmp"))
        argv = [*command, "--notify-socket", str(d_dir / "notify.sock")]
        argv += ["--socket", str(d_dir / "d.sock") if unix else ""]
        proc = subprocess.Popen(
            [*argv, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
            cwd=cwd,
        )
        d = Daemon(proc, d_dir)
        self.started.append(d)
        threading.Thread(target=_pump, args=(d,), daemon=True).start()
        if wait:
            d.wait_for_log(r"ready \(pid")
            if m := re.search(r"listening on tcp \S+:(\d+)", "\n".join(d.log)):
                d.tcp_port = int(m.group(1))
        return d

    def cleanup(self) -> None:
        for d in self.started:
            d.stop()
            shutil.rmtree(d.dir, ignore_errors=True)
            # Shown by pytest when the test failed.
            print(f"--- unreachabled {d.proc.args[3:]} log:", *d.log, sep="\n")


@pytest.fixture
def daemons() -> Iterator[DaemonFactory]:
    factory = DaemonFactory()
    yield factory
    factory.cleanup()


@pytest.fixture
def daemon(daemons: DaemonFactory) -> Daemon:
    return daemons.start()


@dataclass
class Certs:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # an unrelated CA
    rogue_cert: Path  # a client certificate signed by other_ca
    rogue_key: Path


def _make_certs(root: Path) -> Certs:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write(path: Path, data: bytes) -> Path:
        path.write_bytes(data)
        return path

    def pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        k = key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(cn))
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(k, hashes.SHA256())
        )
        return cert, k

    def leaf(
        cn: str,
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
        usage: x509.ObjectIdentifier,
        san: list[x509.GeneralName],
    ) -> tuple[bytes, bytes]:
        k = key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(issuer[0].subject)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(issuer[1], hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(k)

    the_ca = ca("unreachable test CA")
    other = ca("some other CA")
    server = leaf(
        "unreachabled",
        the_ca,
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client = leaf("client", the_ca, ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName("client")])
    rogue = leaf("rogue", other, ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName("rogue")])
    pem = serialization.Encoding.PEM
    return Certs(
        dir=root,
        ca=write(root / "ca.pem", the_ca[0].public_bytes(pem)),
        server_cert=write(root / "server.pem", server[0]),
        server_key=write(root / "server.key", server[1]),
        client_cert=write(root / "client.pem", client[0]),
        client_key=write(root / "client.key", client[1]),
        other_ca=write(root / "other-ca.pem", other[0].public_bytes(pem)),
        rogue_cert=write(root / "rogue.pem", rogue[0]),
        rogue_key=write(root / "rogue.key", rogue[1]),
    )


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    pytest.importorskip("cryptography")
    return _make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_daemon(daemons: DaemonFactory, certs: Certs) -> Daemon:
    """mTLS on a loopback port chosen by the kernel (no unix socket)."""
    return daemons.start(
        "--tcp",
        "127.0.0.1:0",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--tls-client-ca",
        str(certs.ca),
        unix=False,
    )


class WatchThread:
    """A Watch stream read in a thread; `get` waits (bounded) for the next event."""

    def __init__(self, address: str, *, timeout: float = 120.0, **request) -> None:
        self.events: queue.Queue = queue.Queue()
        channel = grpc.insecure_channel(address)
        self.call = pb_grpc.UnreachableStub(channel).Watch(
            pb.WatchRequest(**request), timeout=timeout
        )
        self.call.initial_metadata()  # sent once the daemon has subscribed us
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.call:
                self.events.put(event)
        except grpc.RpcError as e:
            self.events.put(e)

    def get(self, timeout: float = 120.0) -> pb.WatchEvent:
        event = self.events.get(timeout=timeout)
        assert isinstance(event, pb.WatchEvent), event
        return event

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(timeout=10)
