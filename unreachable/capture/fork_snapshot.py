"""The "fork" snapshot strategy: the shim's helper thread forks a
copy-on-write child that stays frozen under ptrace; the target is released
at once and the sweep reads the child, or the child sweeps itself
(sweep/child.py).

The helper is asked only when its seccomp filters (if any) provably let its
clone() through. What the child lacks (memory kept out of forks) is read
from the target before it is released (kept_out_of_fork.py). A fork that
cannot be had leaves the target stopped, swept so, unless the request
must have one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from unreachable import _native
from unreachable.capture.descriptor import no_helper_why
from unreachable.capture.helper_free import wait_helper_free
from unreachable.capture.kept_out_of_fork import read_kept_out
from unreachable.capture.stop_world import Capture, CaptureRequest, stop_world
from unreachable.capture.target import Target, current_helper_tid
from unreachable.errors import TargetUnscannable
from unreachable.process.cgroup_memory import oom_victim_first
from unreachable.process.maps import parse_maps, read_maps_text
from unreachable.process.status import thread_seccomp


def _clone_verdict(session: _native.Session, pid: int, helper_tid: int) -> bool | None:
    """Whether the helper's snapshot clone() gets past its seccomp filters:
    True, False (a filter would kill, trap or hold it), or None (they cannot
    be read: reading them takes CAP_SYS_ADMIN)."""
    mode = thread_seccomp(pid, helper_tid)
    if mode == 0:
        return True
    if mode == 1:
        return False  # strict mode: read, write, exit and sigreturn only
    try:
        return session.seccomp_allows_clone(helper_tid)
    except OSError:
        return None


def _why_no_fork(capture: Capture, target: Target, helper_tid: int, unread_filter_ok: bool) -> str:
    """Why the helper cannot be asked for a child ("" when it can). Never
    asked when its filter would kill the target; asked all the same when the
    filter cannot be read, if unread_filter_ok."""
    pid = target.pid
    if not helper_tid:
        return "the shim's snapshot helper thread is not running" + no_helper_why(target.header)
    if helper_tid not in {t.tid for t in capture.threads}:
        return "the shim's snapshot helper thread ended before the stop"
    clone_ok = _clone_verdict(capture.tracer, pid, helper_tid)
    if clone_ok is False:
        return "the target's seccomp filter does not provably allow the helper's clone()"
    if clone_ok is None and not unread_filter_ok:
        return "the target has a seccomp filter and reading it takes CAP_SYS_ADMIN"
    return ""


@contextmanager
def capture(target: Target, request: CaptureRequest) -> Iterator[Capture]:
    pid = target.pid
    helper_tid, helper_cmd = target.header.helper_tid, target.header.helper_cmd
    # A previous scan's child or tracking still ending: waited for before
    # the stop, not inside it (helper_free.py).
    if (busy := wait_helper_free(target)) and request.must:
        raise TargetUnscannable(f"{request.must}{busy}")
    # Room for what the child lacks, its pages touched while the target runs.
    request.kept_out.make_room()
    with ExitStack() as cleanup:
        capture = stop_world(target, request.roots, cleanup, urgent=True)
        if helper_tid not in {t.tid for t in capture.threads}:
            helper_tid = current_helper_tid(target)  # replaced since it was read
        capture.snapshot_error = busy or _why_no_fork(
            capture, target, helper_tid, request.unread_filter_ok
        )
        if not capture.snapshot_error:
            session = capture.tracer
            try:
                child = session.snapshot(helper_tid, helper_cmd)
                child_maps = read_maps_text(child)
                if request.roots:
                    capture.kept_out = read_kept_out(
                        pid, read_maps_text(pid), child_maps, request.kept_out
                    )
                session.release()
                # Still frozen: it has run nothing, and its maps are as read.
                capture.mappings = parse_maps(child_maps)
                oom_victim_first(session.snapshot_pid)
                capture.snapshot = "fork"
            except OSError as e:
                capture.snapshot_error = e.strerror or str(e)
        if request.must and capture.snapshot != "fork":
            raise TargetUnscannable(f"{request.must}{capture.snapshot_error}")
        yield capture
