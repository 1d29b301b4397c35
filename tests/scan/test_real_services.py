"""Real services from the distribution, started with `unreachable-cli run`,
given traffic, then scanned: redis-server (linked with jemalloc), memcached
(worker threads, a slab allocator on malloc'd pages), nginx (a master and
its workers, memory pools), BIND 9's named (jemalloc's own API), CPython
(object arenas it maps itself, which the kernel merges with the chunks
glibc maps for its large dicts: 822 false leaks before roots/glibc_heaps.py)
and node (V8 keeps its heap out of forks: 437 false leaks in a fork
snapshot before capture/kept_out_of_fork.py). They
hold their memory in ways no scenario program does; a scan must find none
of it unreachable, and each service must answer as before once the scan
has let it go.

Skipped where the service is not installed (scripts/install.sh --test
installs them).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from unreachable.capture.kept_out_of_fork import fork_flags, shim_regions
from unreachable.capture.stop_world import SnapshotMode
from unreachable.capture.target import open_target
from unreachable.model.report import ScanReport
from unreachable.process.status import read_status
from unreachable.scan import ScanOptions, scan

CLI = [sys.executable, "-m", "unreachable.cli.main", "run", "--"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{proc.args} did not listen on {port}")


@pytest.fixture
def service() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        if shutil.which(argv[0]) is None:
            pytest.skip(f"{argv[0]} is not installed")
        proc = subprocess.Popen(
            [*CLI, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()


def _talk(port: int, request: bytes, until: bytes, count: int = 1) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        got = b""
        while got.count(until) < count:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            got += chunk
        return got


def _clean_scan(pid: int, mode: SnapshotMode = "auto") -> ScanReport:
    report = scan(pid, ScanOptions(snapshot=mode))
    assert report.allocation_count > 100
    assert (report.leak_count, report.leak_bytes) == (0, 0), [
        (hex(e.address), e.size, [f.function for f in e.backtrace][:4]) for e in report.leaks[:5]
    ]
    status = read_status(pid)
    assert status.tracer_pid == 0 and status.state != "t"
    return report


def test_redis(service):
    port = _free_port()
    proc = service("redis-server", "--port", str(port), "--save", "", "--appendonly", "no")
    _wait_port(port, proc)
    n = 3000
    cmds = b"".join(
        b"SET key%d value%d\r\nLPUSH list%d item%d\r\nHSET hash%d f%d v%d\r\n"
        % (i, i, i % 50, i, i % 20, i, i)
        for i in range(n)
    )
    _talk(port, cmds, b"\r\n", 3 * n)
    _talk(port, b"".join(b"DEL key%d\r\n" % i for i in range(0, n, 3)), b"\r\n", n // 3)
    for mode in ("auto", "stopped"):
        _clean_scan(proc.pid, mode)
    assert _talk(port, b"GET key1\r\n", b"value1").endswith(b"value1\r\n")


def exercise_memcached(
    start: Callable[..., subprocess.Popen], check: Callable[[int], None]
) -> None:
    """memcached under traffic, sets and deletes, check(pid) run on it, still serving."""
    port = _free_port()
    proc = start("memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-t", "4")
    _wait_port(port, proc)
    n = 5000
    sets = b"".join(b"set k%d 0 0 %d\r\n%s\r\n" % (i, i % 300, b"x" * (i % 300)) for i in range(n))
    _talk(port, sets, b"STORED", n)
    _talk(port, b"".join(b"delete k%d\r\n" % i for i in range(0, n, 3)), b"\r\n", (n + 2) // 3)
    check(proc.pid)
    assert b"VALUE k1 " in _talk(port, b"get k1\r\n", b"END")


def test_memcached(service):
    exercise_memcached(service, _clean_scan)


def exercise_nginx(
    start: Callable[..., subprocess.Popen], tmp_path: Path, check: Callable[[int], None]
) -> None:
    """nginx (a master, 2 workers) served 200 requests, check(pid) run on
    each of its processes, still serving."""
    port = _free_port()
    (tmp_path / "logs").mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"daemon off; master_process on; worker_processes 2;\n"
        f"error_log {tmp_path}/logs/error.log; pid {tmp_path}/nginx.pid;\n"
        "events { worker_connections 64; }\n"
        f"http {{ access_log {tmp_path}/logs/access.log;\n"
        f'  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "hi\\n"; }} }} }}\n'
    )
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = start(nginx, "-p", str(tmp_path), "-c", str(conf))
    _wait_port(port, proc)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(200):
        assert urllib.request.urlopen(url, timeout=10).read() == b"hi\n"
    workers = [
        int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    ]
    assert len(workers) == 2
    for pid in [proc.pid, *workers]:
        check(pid)
    assert urllib.request.urlopen(url, timeout=10).read() == b"hi\n"


def test_nginx(service, tmp_path: Path):
    exercise_nginx(service, tmp_path, _clean_scan)


def _dns_query(name: bytes, ident: int) -> bytes:
    header = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(part)]) + part for part in name.split(b"."))
    return header + labels + b"\x00" + struct.pack(">HH", 1, 1)  # A, IN


def _dns_ok(port: int, n: int) -> int:
    answered = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        for i in range(n):
            s.sendto(_dns_query(b"www.example.test", i), ("127.0.0.1", port))
            reply = s.recv(512)
            answered += reply[:2] == struct.pack(">H", i) and reply[3] & 0xF == 0
    return answered


def test_named(service, tmp_path: Path):
    """BIND 9: its libisc allocates with jemalloc's mallocx, rallocx, sallocx
    and sdallocx, which the shim defines: named would crash at start without."""
    port = _free_port()
    (tmp_path / "example.zone").write_text(
        "$TTL 300\n@ IN SOA ns.example.test. admin.example.test. 1 3600 600 86400 300\n"
        "@ IN NS ns.example.test.\nns IN A 127.0.0.1\nwww IN A 127.0.0.2\n"
    )
    conf = tmp_path / "named.conf"
    conf.write_text(
        f'options {{ directory "{tmp_path}"; listen-on port {port} {{ 127.0.0.1; }};\n'
        f'  listen-on-v6 {{ none; }}; pid-file "{tmp_path}/named.pid"; recursion no; }};\n'
        'zone "example.test" { type primary; file "example.zone"; };\n'
    )
    named = shutil.which("named") or "/usr/sbin/named"
    proc = service(named, "-g", "-u", "root", "-c", str(conf))
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            pytest.fail(f"named exited with {proc.returncode}")
        try:
            if _dns_ok(port, 1) == 1:
                break
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail("named did not answer")
            time.sleep(0.1)
    assert _dns_ok(port, 300) == 300
    _clean_scan(proc.pid)
    assert _dns_ok(port, 10) == 10


CPYTHON_SERVER = """
import functools, http.server, sys
kept = [dict(a=i, b=str(i) * 5, c=[i] * 3) for i in range(20000)]
big = {str(i): i for i in range(50000)}
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
"""


def test_cpython(service, tmp_path: Path):
    port = _free_port()
    script = tmp_path / "server.py"
    script.write_text(CPYTHON_SERVER)
    proc = service(sys.executable, str(script), str(port), str(tmp_path))
    _wait_port(port, proc)
    url = f"http://127.0.0.1:{port}/server.py"
    for _ in range(20):
        assert b"kept" in urllib.request.urlopen(url, timeout=10).read()
    for mode in ("auto", "stopped"):
        _clean_scan(proc.pid, mode)
    assert b"kept" in urllib.request.urlopen(url, timeout=10).read()


NODE_SERVER = """
const kept = new Map();
for (let i = 0; i < 20000; i++) kept.set(i, { a: i, b: "x" + i });
require("http")
  .createServer((req, res) => res.end("kept " + kept.size))
  .listen(Number(process.argv[2]), "127.0.0.1");
"""


def test_node(service, tmp_path: Path):
    port = _free_port()
    script = tmp_path / "server.js"
    script.write_text(NODE_SERVER)
    proc = service("node", str(script), str(port))
    _wait_port(port, proc)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(20):
        assert urllib.request.urlopen(url, timeout=10).read() == b"kept 20000"
    # V8 (node 20 here: ~8 MiB) keeps its heap out of forks: a fork snapshot
    # reads it from the target in the pause, into room smaps sized before
    # the stop (tests/capture/test_kept_out_of_fork.py).
    own = shim_regions(proc.pid, open_target(proc.pid).shim.descriptor_addr)
    kept_out = fork_flags(proc.pid, own).resident > 0
    report = _clean_scan(proc.pid, "fork")
    assert report.snapshot == "fork"
    assert ("kept out of fork" in report.roots) == kept_out
    for mode in ("auto", "stopped"):
        _clean_scan(proc.pid, mode)
    assert urllib.request.urlopen(url, timeout=10).read() == b"kept 20000"
