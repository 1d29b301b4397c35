"""A target whose /proc text is not UTF-8, scanned and dumped through the daemon."""

from __future__ import annotations

import json

from tests.scan.test_odd_names import PROGRAM, cli


def test_remote_scan_and_heapdump(daemon, targets, tmp_path):
    """Over gRPC the odd bytes travel as \\xNN escapes (protobuf strings are
    UTF-8): the scan and the dump still come back whole."""
    target = targets.start(PROGRAM, str(tmp_path), options="backtrace=4")
    res = cli("scan", str(target.pid), "--json", "--remote", daemon.address)
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["leak_count"] == target.int("leak_count")
    res = cli("heapdump", str(target.pid), "--remote", daemon.address)
    assert res.returncode == 0, res.stderr
    assert "/mapped-\\xff\\xfe.bin" in res.stdout
