"""unreachabled against a hostile local user: sockets, transports, requests, its own code."""

from __future__ import annotations

import grp
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.daemon.conftest import Daemon
from tests.daemon.users import User, unprivileged_user
from unreachable.v1 import unreachable_pb2 as pb
from unreachable.v1 import unreachable_pb2_grpc as pb_grpc

# Starts of a daemon racing a user who swaps its fresh sockets for symlinks.
# When the daemon chmod'ed its sockets by path in any directory, 24 of 60
# starts changed the victim file: 20 starts all missing is a chance below 1e-4.
RACE_STARTS = 20


@pytest.fixture
def attacker() -> Iterator[User]:
    yield from unprivileged_user("atk")


def started_or_refused(d: Daemon) -> None:
    """Returns once the daemon serves, or has exited after its one-line error."""
    if d.wait_for_log(r"ready \(pid|unreachabled: error: ").group(0) != "ready (pid":
        d.proc.wait(timeout=60)


# --- the sockets ----------------------------------------------------------

# Runs as the attacker: every socket that appears becomes a symlink to the victim.
RACER = r"""
import os, stat, sys
victim, paths = sys.argv[1], sys.argv[2:]
print("racing", flush=True)
while True:
    for p in paths:
        try:
            if stat.S_ISSOCK(os.lstat(p).st_mode):
                os.unlink(p)
                os.symlink(victim, p)
        except OSError:
            pass
"""


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


def test_a_user_racing_the_socket_never_changes_a_root_file(daemons, attacker, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    before = _identity(victim)
    base = Path(tempfile.mkdtemp(prefix="urr-", dir="/tmp"))
    racer = None
    try:
        base.chmod(0o755)
        sockdir = base / "s"  # the attacker's: they may rename and replace entries
        sockdir.mkdir()
        os.chown(sockdir, attacker.uid, attacker.gid)
        sock, notify = sockdir / "d.sock", sockdir / "n.sock"
        racer = attacker.python(
            RACER, str(victim), str(sock), str(notify), cwd="/", stdout=subprocess.PIPE
        )
        assert racer.stdout is not None and racer.stdout.readline() == "racing\n"
        for _ in range(RACE_STARTS):
            for p in (sock, notify):
                p.unlink(missing_ok=True)  # the last round's symlinks would block bind
            d = daemons.start(
                "--socket",
                str(sock),
                "--notify-socket",
                str(notify),
                "--socket-group",
                attacker.name,
                wait=False,
            )
            started_or_refused(d)
            d.stop()
            assert _identity(victim) == before, "\n".join(d.log)
    finally:
        if racer is not None:
            racer.kill()
            racer.wait()
        shutil.rmtree(base, ignore_errors=True)
    assert victim.read_text() == "root's secret\n"
    # The directory is the attacker's: the daemon says so and does not start.
    assert d.proc.returncode == 2
    assert any(
        f"refusing to put the gRPC socket in {sockdir}: {sockdir} belongs to uid {attacker.uid}"
        in line
        for line in d.log
    ), d.log


@pytest.mark.parametrize(
    "mode, refused",
    [
        (0o777, "is writable by other users (mode 0777)"),
        (0o775, "is writable by its group (mode 0775)"),
        (0o1777, None),  # sticky: others cannot remove or rename the daemon's entries
        (0o755, None),
    ],
)
def test_socket_directory_others_can_write_is_refused(daemons, mode, refused):
    base = Path(tempfile.mkdtemp(prefix="urw-", dir="/tmp"))
    try:
        (base / "s").mkdir()
        (base / "s").chmod(mode)
        d = daemons.start("--socket", str(base / "s" / "d.sock"), wait=False)
        started_or_refused(d)
        if refused:
            assert d.proc.wait(timeout=60) == 2
            assert d.log[-1] == (
                f"unreachabled: error: refusing to put the gRPC socket in {base}/s: "
                f"{base}/s {refused}, who could replace the socket "
                f"(chmod go-w {base}/s, or use another directory)"
            )
        else:
            assert d.proc.poll() is None
            assert stat.S_IMODE(os.stat(base / "s" / "d.sock").st_mode) == 0o660
        d.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_symlinked_socket_directory_is_resolved_once(daemons, tmp_path):
    real = Path(tempfile.mkdtemp(prefix="url-", dir="/tmp"))
    try:
        link = tmp_path / "link"
        link.symlink_to(real)
        d = daemons.start("--socket", str(link / "d.sock"))
        d.wait_for_log(f"listening on unix:{real}/d.sock ")
        assert stat.S_ISSOCK(os.lstat(real / "d.sock").st_mode)
        assert d.stop() == 0
        assert not (real / "d.sock").exists()
    finally:
        shutil.rmtree(real, ignore_errors=True)


def test_sockets_are_born_with_their_mode_and_group(daemons, attacker):
    d = daemons.start("--socket-group", attacker.name, "--socket-mode", "0640")
    assert _identity(d.socket) == (0o640, 0, attacker.gid)
    assert _identity(d.notify_socket) == (0o666, 0, os.getegid())
    assert grp.getgrgid(os.stat(d.socket).st_gid).gr_name == attacker.name


def test_a_mode_beyond_0777_is_refused(daemons):
    d = daemons.start("--socket-mode", "4660", wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log("socket_mode is a file mode from 0000 to 0777, not 4660", timeout=10)


# --- TCP: who may connect -------------------------------------------------

WHO_CAN = "list, scan, heap-dump and watch every process on this host"


def _tls(certs, *, ca_only: bool = False) -> list[str]:
    args = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    return args if ca_only else [*args, "--tls-client-ca", str(certs.ca)]


def _list_targets(channel: grpc.Channel) -> grpc.StatusCode:
    try:
        pb_grpc.UnreachableStub(channel).ListTargets(pb.ListTargetsRequest(), timeout=20)
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def _tls_channel(port: int, certs, *, client_cert: bool) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=certs.client_key.read_bytes() if client_cert else None,
        certificate_chain=certs.client_cert.read_bytes() if client_cert else None,
    )
    # The server's certificate names 127.0.0.1, which is where the test connects.
    return grpc.secure_channel(f"127.0.0.1:{port}", creds)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--tcp", "0.0.0.0:0", "TLS"],
            "--tcp 0.0.0.0:0 needs --tls-client-ca: without client certificates anyone who "
            "reaches the port could scan every process this daemon can trace (to accept "
            "that: --dangerously-allow-unauthenticated-tcp)",
        ),
        (
            ["--tcp", "127.0.0.1:0", "TLS"],
            "--tcp 127.0.0.1:0 needs --tls-client-ca",
        ),
        (
            ["--tcp", "0.0.0.0:0", "mTLS", "--dangerously-allow-unauthenticated-tcp"],
            "--tls-client-ca and --dangerously-allow-unauthenticated-tcp exclude each other",
        ),
        (
            ["--tcp", "127.0.0.1:0", "--insecure-tcp", "--dangerously-allow-unauthenticated-tcp"],
            "--insecure-tcp excludes --tls-* and --dangerously-allow-unauthenticated-tcp",
        ),
        (
            ["--dangerously-allow-unauthenticated-tcp"],
            "--dangerously-allow-unauthenticated-tcp applies to --tcp",
        ),
        (["--tcp", "0.0.0.0:0", "--insecure-tcp"], "--insecure-tcp listens on loopback only"),
    ],
)
def test_tcp_without_client_authentication_is_refused(daemons, certs, args, message):
    expanded: list[str] = []
    for arg in args:
        expanded += {"TLS": _tls(certs, ca_only=True), "mTLS": _tls(certs)}.get(arg, [arg])
    d = daemons.start(*expanded, wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log(r"unreachabled: error: ", timeout=10)
    assert d.log[-1].startswith(f"unreachabled: error: {message}"), d.log
    assert len(d.log) == 1, d.log


def test_mtls_admits_only_clients_with_a_certificate(daemons, certs):
    d = daemons.start("--tcp", "0.0.0.0:0", *_tls(certs), unix=False)
    d.wait_for_log(
        rf"INFO: listening on tcp 0.0.0.0:{d.tcp_port} \(mTLS: clients need a certificate "
        rf"signed by {certs.ca}; every holder of one can {WHO_CAN}\)"
    )
    assert not any("WARNING" in line for line in d.log), d.log
    bare = _tls_channel(d.tcp_port, certs, client_cert=False)
    assert _list_targets(bare) == grpc.StatusCode.UNAVAILABLE  # the handshake fails
    good = _tls_channel(d.tcp_port, certs, client_cert=True)
    assert _list_targets(good) == grpc.StatusCode.OK


def test_tls_without_client_certificates_only_when_asked_and_loudly(daemons, certs):
    d = daemons.start(
        "--tcp",
        "0.0.0.0:0",
        *_tls(certs, ca_only=True),
        "--dangerously-allow-unauthenticated-tcp",
        unix=False,
    )
    d.wait_for_log(
        rf"WARNING: listening on tcp 0.0.0.0:{d.tcp_port} with TLS but no client certificates "
        rf"\(--dangerously-allow-unauthenticated-tcp\): anyone who can reach this port can "
        rf"{WHO_CAN}$"
    )
    # As the warning says: a client without a certificate is served.
    assert _list_targets(_tls_channel(d.tcp_port, certs, client_cert=False)) == grpc.StatusCode.OK


def test_plaintext_loopback_warns_and_admits_every_local_user(daemons, attacker):
    d = daemons.start("--tcp", "127.0.0.1:0", "--insecure-tcp")
    d.wait_for_log(
        rf"WARNING: listening on tcp 127.0.0.1:{d.tcp_port} in plaintext \(--insecure-tcp, "
        r"for tests\): every local user and every process in this network namespace, "
        rf"whatever the unix socket's mode and group, can {WHO_CAN}$"
    )
    # As the warning says: a user the 0660 unix socket refuses connects over TCP.
    probe = attacker.python(
        CONNECT, str(d.socket), str(d.tcp_port), cwd="/", stdout=subprocess.PIPE
    )
    out, _ = probe.communicate(timeout=60)
    assert out.split() == ["unix:refused", "tcp:connected"]


# Runs as the attacker: can it open the unix socket, and the TCP port?
CONNECT = r"""
import socket, sys
path, port = sys.argv[1], int(sys.argv[2])
for kind, addr in (("unix", path), ("tcp", ("127.0.0.1", port))):
    s = socket.socket(socket.AF_UNIX if kind == "unix" else socket.AF_INET)
    try:
        s.connect(addr)
        print(kind + ":connected")
    except PermissionError:
        print(kind + ":refused")
    finally:
        s.close()
"""


# --- the daemon's own code ------------------------------------------------

# What a user who controls the directory an operator starts the daemon in
# would leave there: modules shadowing the scanner's own (which an editable
# install's import hook would still win against) and the standard library's.
TRAP = """
import pathlib
pathlib.Path({marker!r}).write_text("the daemon ran code from its working directory\\n")
"""
TRAP_MODULES = (
    "unreachable/__init__.py",
    "unreachable/cli/__init__.py",
    "unreachable/cli/main.py",
    "unreachable/daemon/__init__.py",
    "unreachable/daemon/worker.py",
    "argparse.py",
)


def test_scans_never_import_code_from_the_daemons_working_directory(daemons, tmp_path):
    marker = tmp_path / "trap-ran"
    trap_dir = tmp_path / "cwd"
    for module in TRAP_MODULES:
        (trap_dir / module).parent.mkdir(parents=True, exist_ok=True)
        (trap_dir / module).write_text(TRAP.format(marker=str(marker)))
    # The installed entry point, as systemd or an operator starts it: its own
    # sys.path[0] is its bin directory, not the working directory.
    unreachabled = Path(sys.executable).parent / "unreachabled"
    assert unreachabled.exists(), "the package's console script is not installed"
    d = daemons.start(command=[str(unreachabled)], cwd=trap_dir)
    with open("/proc/sys/kernel/pid_max") as f:
        no_such_pid = int(f.read())  # pids are below pid_max
    channel = grpc.insecure_channel(d.address)
    with pytest.raises(grpc.RpcError) as info:
        list(pb_grpc.UnreachableStub(channel).Scan(pb.ScanRequest(pid=no_such_pid), timeout=120))
    assert not marker.exists(), marker.read_text()
    assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value.details()


# --- malformed requests ---------------------------------------------------

# Not a protobuf message: a field tag followed by a varint that never ends.
GARBAGE = b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"

METHODS = [
    ("/unreachable.v1.Unreachable/Scan", "unary_stream"),
    ("/unreachable.v1.Unreachable/Watch", "unary_stream"),
    ("/unreachable.v1.Unreachable/HeapDump", "unary_unary"),
    ("/unreachable.v1.Unreachable/ListTargets", "unary_unary"),
    ("/unreachable.v1.Unreachable/Why", "unary_unary"),
    ("/unreachable.v1.Unreachable/Retainers", "unary_unary"),
    ("/grpc.health.v1.Health/Check", "unary_unary"),
    ("/grpc.health.v1.Health/Watch", "unary_stream"),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "stream_stream"),
]


def test_malformed_requests_are_invalid_argument_and_one_log_line(daemon):
    channel = grpc.insecure_channel(daemon.address)
    for method, kind in METHODS:
        # No serializers: the bytes go on the wire as they are.
        call = getattr(channel, kind)(method)
        request = iter([GARBAGE]) if kind.startswith("stream") else GARBAGE
        with pytest.raises(grpc.RpcError) as info:
            result = call(request, timeout=30)
            if kind.endswith("stream"):
                list(result)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, info.value)
        assert info.value.details().startswith("malformed request: "), info.value.details()
        line = daemon.wait_for_log(f"malformed request to {method} from ").string
        assert line.startswith("<4>unreachabled: WARNING: "), line
        assert line.endswith(f"({len(GARBAGE)} bytes): {info.value.details()[19:]}"), line
    # The daemon still serves, and nothing else reached the log.
    pb_grpc.UnreachableStub(channel).ListTargets(pb.ListTargetsRequest(), timeout=30)
    assert not [line for line in daemon.log if "Traceback" in line or "ERROR" in line]
    assert sum("malformed request" in line for line in daemon.log) == len(METHODS)


# --- messages -------------------------------------------------------------


@pytest.mark.parametrize(
    "client",
    [
        ("ca",),  # no client certificate: the server ends the handshake
        ("other_ca", "client_cert", "client_key"),  # the client distrusts the server
        ("ca", "rogue_cert", "rogue_key"),  # a certificate from another CA
    ],
    ids=["no-client-cert", "server-untrusted", "rogue-client-cert"],
)
def test_a_failed_tls_handshake_is_one_line(tls_daemon, certs, client):
    options = ["--tls-ca", "--tls-cert", "--tls-key"]
    tls = [
        arg
        for option, name in zip(options, client, strict=False)
        for arg in (option, str(getattr(certs, name)))
    ]
    res = subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", "scan", "1"]
        + ["--remote", f"127.0.0.1:{tls_daemon.tcp_port}", *tls],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("GRPC_")},
    )
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("unreachable-cli: error: cannot reach unreachabled at 127.0.0.1:")


def test_a_port_in_use_is_one_line(daemons):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        d = daemons.start("--tcp", f"127.0.0.1:{port}", "--insecure-tcp", unix=False, wait=False)
        assert d.proc.wait(timeout=60) == 2
    d.wait_for_log("unreachabled: error: ", timeout=10)
    assert d.log[-1] == (
        f"unreachabled: error: cannot listen on 127.0.0.1:{port} "
        "(the port is in use, or not this host's)"
    )
    assert not [line for line in d.log if "Traceback" in line], d.log


def test_a_listener_failing_after_others_is_one_line_and_leaves_no_socket(daemons, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "n.sock").write_text("not a socket\n")
    d = daemons.start("--notify-socket", str(blocked / "n.sock"), wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log("unreachabled: error: ", timeout=10)
    assert d.log[-1].startswith(f"unreachabled: error: cannot listen on {blocked}/n.sock: ")
    assert not [line for line in d.log if "Traceback" in line or "Exception" in line], d.log
    assert not d.socket.exists()  # the gRPC socket, bound first, is gone
    assert (blocked / "n.sock").read_text() == "not a socket\n"


def test_no_directory_is_made_inside_another_users(daemons, attacker):
    base = Path(tempfile.mkdtemp(prefix="urm-", dir="/tmp"))
    try:
        base.chmod(0o755)
        theirs = base / "theirs"
        theirs.mkdir()
        os.chown(theirs, attacker.uid, attacker.gid)
        d = daemons.start("--socket", str(theirs / "a" / "b" / "d.sock"), wait=False)
        assert d.proc.wait(timeout=60) == 2
        d.wait_for_log(f"refusing to put the gRPC socket in {theirs}/a/b: {theirs} belongs to")
        assert list(theirs.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
