"""The daemon's settings, from the command line or a TOML file (docs/daemon.md, docs/monitoring.md).

The TOML file holds the options by name at the top level (socket_mode = "0660",
tcp = "...", scan_interval = 300, ...) plus three tables:

    [[targets]]            which processes scheduled scans watch; each entry
    name = "myapp"         matches on any of: process name (comm or argv[0]'s
    unit = "web@*.service" base name), systemd unit, cgroup path prefix; every
    cgroup = "/system.slice/foo.service"   key given must match (fnmatch globs)
    baseline = "first"     optional: these processes' baseline, not the setting's

    [thresholds]
    leak_bytes = 1048576          # a scan finding more logs a warning
    growth_bytes_per_hour = 65536 # a call site growing faster logs a warning
    growth_scans = 3              # ...measured over this many scans

    [metrics]
    listen = "127.0.0.1:9465"     # Prometheus /metrics (loopback only)
"""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from unreachable.rpc.options import DEFAULT_NOTIFY_SOCKET, DEFAULT_SOCKET
from unreachable.sweep.child import MAX_MARK_THREADS
from unreachable.triage.baseline import BaselineError
from unreachable.triage.baseline import load as load_baseline
from unreachable.triage.suppressions import SuppressionError
from unreachable.triage.suppressions import load as load_suppressions

DEFAULT_JOURNAL_SOCKET = "/run/systemd/journal/socket"
HISTORY_FILE = "history.sqlite"
BASELINE_FIRST = "first"  # baseline = "first": each process's first background scan


class ConfigError(Exception):
    """A setting is wrong; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One [[targets]] entry: every field given must match (shell-style globs)."""

    name: str = ""  # /proc/PID/comm or basename(argv[0])
    unit: str = ""  # systemd unit, from /proc/PID/cgroup
    cgroup: str = ""  # cgroup path prefix ("/system.slice/foo.service")
    # The processes' own baseline ("first", a saved scan, "" none); None: the
    # `baseline` setting's.
    baseline: str | None = None

    def describe(self) -> str:
        parts = [
            f"{k}={v!r}"
            for k, v in (("name", self.name), ("unit", self.unit), ("cgroup", self.cgroup))
            if v
        ]
        return " ".join(parts)

    def matches(self, names: tuple[str, ...], unit: str, cgroup: str) -> bool:
        if self.name and not any(fnmatch.fnmatchcase(n, self.name) for n in names if n):
            return False
        if self.unit and not (unit and fnmatch.fnmatchcase(unit, self.unit)):
            return False
        if self.cgroup:
            prefix = self.cgroup.rstrip("/") or "/"
            if prefix != "/" and cgroup != prefix and not cgroup.startswith(prefix + "/"):
                return False
        return True


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
    # TLS without client certificates: anyone who reaches the port may scan.
    dangerously_allow_unauthenticated_tcp: bool = False
    allow_contents: bool = False
    scan_interval: float = 0.0  # seconds between scheduled scans of every target; 0: off
    scan_timeout: float = 300.0  # seconds a scan subprocess may run
    max_concurrent_scans: int = 8
    mark_threads: int = 0  # the snapshot child's marking threads; 0: the CLI's default
    log_level: str = "INFO"
    # Monitoring (docs/monitoring.md).
    targets: list[TargetSpec] = field(default_factory=list)  # empty: every shimmed process
    retry_backoff: float = 0.0  # first wait after a failed scan; 0: scan_interval
    retry_backoff_max: float = 3600.0  # the wait doubles up to this
    leak_bytes_threshold: int = 0  # a scan finding more logs a warning; 0: never
    growth_bytes_per_hour: float = 0.0  # a site growing faster logs a warning; 0: any growth
    growth_scans: int = 3  # growth is judged over this many consecutive scans
    history: str = "auto"  # SQLite file; "auto": $STATE_DIRECTORY/history.sqlite; "": off
    history_days: float = 30.0  # scans older than this are deleted
    metrics: str = ""  # host:port of the Prometheus endpoint (loopback); "": off
    journal_socket: str = DEFAULT_JOURNAL_SOCKET  # structured logs go here when it exists
    # Suppression files (LeakSanitizer's format) every scan of the daemon applies.
    suppressions: list[str] = field(default_factory=list)
    # Background scans report only growth against a baseline: "" off, "first"
    # each process's first background scan, else a saved scan --json file.
    baseline: str = ""

    def validate(self) -> None:
        if not self.socket and not self.tcp:
            raise ConfigError("nothing to listen on: give --socket or --tcp")
        for name, mode in (("socket_mode", self.socket_mode), ("notify_mode", self.notify_mode)):
            if not 0 <= mode <= 0o777:
                raise ConfigError(f"{name} is a file mode from 0000 to 0777, not {mode:04o}")
        unauthenticated = self.dangerously_allow_unauthenticated_tcp
        if self.tcp:
            host, port = split_host_port(self.tcp)
            if self.insecure_tcp:
                if self.tls_cert or self.tls_key or self.tls_client_ca or unauthenticated:
                    raise ConfigError(
                        "--insecure-tcp excludes --tls-* and "
                        "--dangerously-allow-unauthenticated-tcp"
                    )
                if not is_loopback(host):
                    raise ConfigError(
                        f"--insecure-tcp listens on loopback only, not {host!r} "
                        "(use TLS: --tls-cert/--tls-key)"
                    )
            elif not (self.tls_cert and self.tls_key):
                raise ConfigError(
                    "--tcp needs --tls-cert and --tls-key (or --insecure-tcp on loopback)"
                )
            elif self.tls_client_ca and unauthenticated:
                raise ConfigError(
                    "--tls-client-ca and --dangerously-allow-unauthenticated-tcp exclude each other"
                )
            elif not self.tls_client_ca and not unauthenticated:
                raise ConfigError(
                    f"--tcp {self.tcp} needs --tls-client-ca: without client certificates "
                    "anyone who reaches the port could scan every process this daemon can "
                    "trace (to accept that: --dangerously-allow-unauthenticated-tcp)"
                )
        elif self.tls_cert or self.tls_key or self.tls_client_ca or self.insecure_tcp:
            raise ConfigError("--tls-* and --insecure-tcp apply to --tcp")
        elif unauthenticated:
            raise ConfigError("--dangerously-allow-unauthenticated-tcp applies to --tcp")
        if self.scan_interval < 0 or self.scan_timeout <= 0 or self.max_concurrent_scans < 1:
            raise ConfigError("scan_interval >= 0, scan_timeout > 0, max_concurrent_scans >= 1")
        if not 0 <= self.mark_threads <= MAX_MARK_THREADS:
            raise ConfigError(f"mark_threads is 0 (the default) to {MAX_MARK_THREADS}")
        if self.retry_backoff < 0 or self.retry_backoff_max <= 0:
            raise ConfigError("retry_backoff >= 0 and retry_backoff_max > 0")
        if self.leak_bytes_threshold < 0 or self.growth_bytes_per_hour < 0:
            raise ConfigError("thresholds are >= 0")
        if self.growth_scans < 2:
            raise ConfigError("growth_scans >= 2: growth needs two scans at least")
        if self.history_days <= 0:
            raise ConfigError("history_days > 0")
        if self.metrics:
            host, _port = split_host_port(self.metrics)
            if not is_loopback(host):
                raise ConfigError(
                    f"metrics are served on loopback only, not {host!r} "
                    "(put a proxy with TLS in front to scrape from elsewhere)"
                )
        for spec in self.targets:
            if not (spec.name or spec.unit or spec.cgroup):
                raise ConfigError("a [[targets]] entry needs name, unit or cgroup")
        try:  # read now: a bad file stops the daemon at start, not every scan
            load_suppressions(self.suppressions)
        except SuppressionError as e:
            raise ConfigError(f"suppressions: {e}") from None
        if self.baseline and self.baseline != BASELINE_FIRST:
            try:
                load_baseline(self.baseline)
            except BaselineError as e:
                raise ConfigError(f"baseline: {e}") from None
        for spec in self.targets:
            if spec.baseline and spec.baseline != BASELINE_FIRST:
                try:
                    load_baseline(spec.baseline)
                except BaselineError as e:
                    raise ConfigError(f"[[targets]] {spec.describe()}: baseline: {e}") from None

    def history_path(self) -> str:
        """The history database's path, or "" when history is off."""
        if self.history != "auto":
            return self.history
        state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
        return os.path.join(state, HISTORY_FILE) if state else ""


# [table] key -> Config field.
_TABLES: dict[str, dict[str, str]] = {
    "thresholds": {
        "leak_bytes": "leak_bytes_threshold",
        "growth_bytes_per_hour": "growth_bytes_per_hour",
        "growth_scans": "growth_scans",
    },
    "metrics": {"listen": "metrics"},
    "history": {"path": "history", "days": "history_days"},
}


def values_from_toml(data: dict[str, Any], path: str) -> dict[str, Any]:
    """Config keyword arguments from a parsed TOML document; ConfigError on a bad key."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    values: dict[str, Any] = {}

    def put(key: str, name: str, value: Any) -> None:
        if name.endswith("_mode") and isinstance(value, str):
            try:
                value = int(value, 8)
            except ValueError:
                raise ConfigError(f"{path}: {key}: not an octal mode: {value!r}") from None
        expected = fields[name].type
        if expected in ("float",) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected in ("str", "int", "float", "bool"):
            kind = {"str": str, "int": int, "float": float, "bool": bool}[expected]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ConfigError(f"{path}: {key}: expected {expected}, got {value!r}")
        values[name] = value

    for key, value in data.items():
        name = key.replace("-", "_")
        if name == "targets":
            values["targets"] = _targets(value, path)
        elif name == "suppressions":
            files = [value] if isinstance(value, str) else value
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise ConfigError(f"{path}: suppressions: a file name or a list of them")
            # Relative to the file that names them, as the scans run elsewhere.
            values["suppressions"] = [os.path.join(os.path.dirname(path), f) for f in files]
        elif name == "baseline" and isinstance(value, str) and value not in ("", BASELINE_FIRST):
            values["baseline"] = os.path.join(os.path.dirname(path), value)
        elif name in _TABLES and (isinstance(value, dict) or name not in fields):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: {key} must be a table ([{key}])")
            for sub, subvalue in value.items():
                field_name = _TABLES[name].get(sub.replace("-", "_"))
                if field_name is None:
                    raise ConfigError(f"{path}: unknown setting {key}.{sub}")
                put(f"{key}.{sub}", field_name, subvalue)
        elif name in fields:
            put(key, name, value)
        else:
            raise ConfigError(f"{path}: unknown setting {key!r}")
    return values


def _targets(value: Any, path: str) -> list[TargetSpec]:
    if not isinstance(value, list):
        raise ConfigError(f"{path}: targets must be an array of tables ([[targets]])")
    specs = []
    for entry in value:
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: each [[targets]] entry is a table")
        unknown = set(entry) - {"name", "unit", "cgroup", "baseline"}
        if unknown:
            raise ConfigError(f"{path}: [[targets]]: unknown key(s) {', '.join(sorted(unknown))}")
        if not all(isinstance(v, str) for v in entry.values()):
            raise ConfigError(f"{path}: [[targets]] values are strings")
        if entry.get("baseline") not in (None, "", BASELINE_FIRST):
            entry = dict(entry, baseline=os.path.join(os.path.dirname(path), entry["baseline"]))
        specs.append(TargetSpec(**entry))
    return specs


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
