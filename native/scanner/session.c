/*
 * _native.Session: one pause of one process. stop() -> [snapshot()] ->
 * release() -> ... -> close().
 *
 * ptrace ties tracees to the OS thread that attached, so every call after
 * stop() must come from that thread; the check below turns a cross-thread
 * call into a clear error rather than a spurious ESRCH. Releasing the GIL
 * around the blocking parts is fine: the same OS thread continues them.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_sweep.h"
#include "native.h"
#include "pending_signals.h"
#include "pin_gate.h"
#include "seccomp_check.h"
#include "snapshot.h"
#include "thread_capture.h"

enum { ST_NEW, ST_STOPPED, ST_RELEASED };

typedef struct {
  PyObject_HEAD
  pid_t pid;
  int state;
  int busy;              /* a method is running with the GIL released */
  pid_t owner_tid;       /* the tracer thread */
  pid_t child;           /* snapshot child, 0 if none */
  pid_t helper;          /* the helper that forked it, to reap it (0: none) */
  uint64_t cmd_addr;     /* that helper's command word */
  int child_started;     /* the child sweeps itself (child_start ran) */
  struct ur_child csweep;
  int stopped_threads;
  int group_stopped;
  uint64_t t_start_ns, t_end_ns;
  uint64_t t_interrupted_ns, t_first_stop_ns, t_last_stop_ns, t_regs_ns, t_release_ns;
  int urgent; /* the tracer thread runs SCHED_FIFO until the release */
  int saved_policy;
  struct sched_param saved_param;
  struct ur_capture cap;
} Session;

static int check_owner(Session *s) {
  if (s->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Session is in use by another call");
    return -1;
  }
  if (s->state == ST_NEW || s->owner_tid == gettid()) return 0;
  PyErr_Format(PyExc_RuntimeError,
               "Session of pid %d was stopped by thread %d; ptrace only accepts calls from that "
               "thread (called from %d)",
               (int)s->pid, (int)s->owner_tid, (int)gettid());
  return -1;
}

static int session_init(Session *s, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"pid", NULL};
  int pid;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i", kwlist, &pid)) return -1;
  if (s->state != ST_NEW) {
    PyErr_SetString(PyExc_RuntimeError, "Session already initialised");
    return -1;
  }
  if (pid <= 0) {
    PyErr_Format(PyExc_ValueError, "invalid pid %d", pid);
    return -1;
  }
  s->pid = pid;
  return 0;
}

/* On a machine with fewer cores than runnable threads, the tracer thread
 * is preempted by the target's threads it has just released (the next
 * detach waits for a time slice: milliseconds per thread) and, after a
 * long mark has used up its share, by everyone while it sends the
 * interrupts. Real-time priority for the pause (the target is stopped, so
 * it takes nothing from it) keeps the pause its own work. Where the
 * scanner may not (no CAP_SYS_NICE nor RLIMIT_RTPRIO), nothing changes. */
static void urgent_enter(Session *s) {
  s->saved_policy = sched_getscheduler(0);
  if (s->saved_policy < 0 || sched_getparam(0, &s->saved_param) < 0) return;
  struct sched_param p = {.sched_priority = 1};
  s->urgent = sched_setscheduler(0, SCHED_FIFO, &p) == 0;
}

static void urgent_leave(Session *s) {
  if (!s->urgent) return;
  sched_setscheduler(0, s->saved_policy, &s->saved_param);
  s->urgent = 0;
}

static void do_release(Session *s) {
  if (s->state != ST_STOPPED) return;
  s->t_release_ns = ur_now_ns();
  ur_pin_forbid(s->pid);
  ur_capture_release(&s->cap);
  s->t_end_ns = ur_now_ns();
  urgent_leave(s);
  ur_capture_free(&s->cap);
  s->state = ST_RELEASED;
}

void *ur_session_to_release(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &ur_session_type)) {
    PyErr_SetString(PyExc_TypeError, "release must be a Session");
    return NULL;
  }
  Session *s = (Session *)obj;
  if (check_owner(s) < 0) return NULL;
  if (s->state != ST_STOPPED) {
    PyErr_SetString(PyExc_RuntimeError, "release needs a stopped Session");
    return NULL;
  }
  return s;
}

void ur_session_release_nogil(void *session) { do_release(session); }

static void do_close(Session *s) {
  do_release(s);
  if (s->child > 0) {
    if (!s->child_started || ur_child_kill_detached(&s->csweep) < 0) ur_snapshot_close(s->child);
    s->child = 0;
  }
  if (s->child_started) {
    ur_child_forget(&s->csweep);
    s->child_started = 0;
  }
  if (s->helper > 0) {
    ur_snapshot_reap(s->pid, s->helper, s->cmd_addr);
    s->helper = 0;
  }
}

static void session_dealloc(Session *s) {
  /* From another thread ptrace would fail; the kernel still detaches
   * everything when the scanner exits. */
  if (!s->busy && (s->state != ST_STOPPED || s->owner_tid == gettid())) do_close(s);
  /* Left stopped (the tracer thread's exit lets it go): no pin from now. */
  if (s->state == ST_STOPPED) ur_pin_forbid(s->pid);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *thread_list(Session *s);

static PyObject *session_stop(Session *s, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"urgent", NULL};
  int urgent = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p", kwlist, &urgent)) return NULL;
  if (check_owner(s) < 0) return NULL;
  if (s->state != ST_NEW) {
    PyErr_SetString(PyExc_RuntimeError, "stop() can be called once per Session");
    return NULL;
  }
  int rc;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  if (urgent) urgent_enter(s);
  rc = ur_capture_stop(&s->cap, s->pid);
  if (rc < 0) urgent_leave(s);
  Py_END_ALLOW_THREADS
  s->busy = 0;
  if (rc < 0) return ur_py_raise(rc, s->cap.err);
  s->owner_tid = gettid();
  s->state = ST_STOPPED;
  ur_pin_allow(s->pid);
  s->t_start_ns = s->cap.t_first_seize_ns;
  s->t_interrupted_ns = s->cap.t_interrupted_ns;
  s->t_first_stop_ns = s->cap.t_first_stop_ns;
  s->t_last_stop_ns = s->cap.t_last_stop_ns;
  s->t_regs_ns = s->cap.t_regs_ns;
  s->stopped_threads = (int)s->cap.n;
  s->group_stopped = s->cap.group_stopped;
  return thread_list(s);
}

/* (tid, sp, regs, xstate) of every stopped thread. */
static PyObject *thread_list(Session *s) {
  PyObject *list = PyList_New((Py_ssize_t)s->cap.n);
  if (!list) return NULL;
  for (size_t i = 0; i < s->cap.n; i++) {
    struct ur_thread *t = &s->cap.threads[i];
#if defined(__x86_64__)
    unsigned long long sp = t->regs.rsp;
#else
    unsigned long long sp = t->regs.sp;
#endif
    PyObject *item = Py_BuildValue("(iKy#y#)", (int)t->tid, sp, (const char *)&t->regs,
                                   (Py_ssize_t)sizeof(t->regs), (const char *)t->xstate,
                                   (Py_ssize_t)t->xstate_len);
    if (!item) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  return list;
}

static PyObject *session_snapshot(Session *s, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"helper_tid", "cmd_addr", NULL};
  int helper;
  unsigned long long cmd_addr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iK", kwlist, &helper, &cmd_addr)) return NULL;
  if (check_owner(s) < 0) return NULL;
  if (s->state != ST_STOPPED) {
    PyErr_SetString(PyExc_RuntimeError, "snapshot() needs a stopped Session");
    return NULL;
  }
  if (s->child) {
    PyErr_SetString(PyExc_RuntimeError, "this Session already has a snapshot");
    return NULL;
  }
  char err[256] = "";
  pid_t child;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  /* The helper runs alone for its clone(): a fork of the target. It runs
   * on after it, to reap the child, but clones no other while that child
   * lives (native/shim/helper.c): the reads of what the child lacks pin. */
  ur_pin_forbid(s->pid);
  child = ur_snapshot_take(&s->cap, helper, cmd_addr, err, sizeof(err));
  if (child > 0) ur_pin_allow(s->pid);
  Py_END_ALLOW_THREADS
  s->busy = 0;
  if (child < 0) return ur_py_raise(child, err);
  s->child = child;
  s->helper = helper;
  s->cmd_addr = cmd_addr;
  return PyLong_FromLong(child);
}

static PyObject *session_seccomp_allows_clone(Session *s, PyObject *args) {
  int tid;
  if (!PyArg_ParseTuple(args, "i", &tid)) return NULL;
  if (check_owner(s) < 0) return NULL;
  if (s->state != ST_STOPPED) {
    PyErr_SetString(PyExc_RuntimeError, "seccomp_allows_clone() needs a stopped Session");
    return NULL;
  }
  /* The helper's snapshot call, exactly (native/shim/helper.c). */
  const uint64_t args5[UR_SECCOMP_ARGS_KNOWN] = {0, 0, 0, 0, 0};
  int rc = ur_seccomp_allows(tid, SYS_clone, args5);
  /* And its wait4(child, NULL, __WALL | WNOHANG, NULL) that reaps the child
   * (child_gone): an allowlist granting clone (for threads) but not wait4
   * killed the target after the snapshot. The child's pid is not known. */
  const uint64_t reap[UR_SECCOMP_ARGS_KNOWN] = {0, 0, __WALL | WNOHANG, 0, 0};
  if (rc == 1) rc = ur_seccomp_allows_known(tid, SYS_wait4, reap, 0x1e, true);
  if (rc < 0) return ur_py_raise(rc, "cannot read the target's seccomp filters");
  return PyBool_FromLong(rc);
}

static PyObject *session_pending_signal_values(Session *s, PyObject *Py_UNUSED(ignored)) {
  if (check_owner(s) < 0) return NULL;
  if (s->state != ST_STOPPED) {
    PyErr_SetString(PyExc_RuntimeError, "pending_signal_values() needs a stopped Session");
    return NULL;
  }
  uint64_t *v = NULL;
  long n = ur_pending_signal_values(&s->cap, &v);
  if (n < 0) return ur_py_raise((int)n, "cannot read the target's queued signals");
  PyObject *words = PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)(n * 8));
  free(v);
  return words;
}

static int check_child(Session *s) {
  if (check_owner(s) < 0) return -1;
  if (!s->child) {
    PyErr_SetString(PyExc_RuntimeError, "this Session has no snapshot child");
    return -1;
  }
  return 0;
}

static PyObject *session_child_start(Session *s, PyObject *args) {
  unsigned long long box;
  if (!PyArg_ParseTuple(args, "K", &box)) return NULL;
  if (check_child(s) < 0) return NULL;
  if (s->child_started) {
    PyErr_SetString(PyExc_RuntimeError, "the snapshot child was already started");
    return NULL;
  }
  char err[256] = "";
  int rc;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_child_start(&s->csweep, s->child, box, err, sizeof(err));
  Py_END_ALLOW_THREADS
  s->busy = 0;
  if (rc < 0) {
    ur_child_forget(&s->csweep);
    return ur_py_raise(rc, err);
  }
  s->child_started = 1;
  Py_RETURN_NONE;
}

/* Wait for the step to end; returns its reply (bytes) or raises. */
static PyObject *child_finish(Session *s, double timeout_s) {
  char err[256] = "";
  int rc;
  uint64_t timeout = timeout_s > 0 ? (uint64_t)(timeout_s * 1e9) : 0;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_child_wait(&s->csweep, timeout, err, sizeof(err));
  Py_END_ALLOW_THREADS
  s->busy = 0;
  if (rc == -ESRCH) s->child = 0; /* gone: nothing left to sweep or kill */
  if (rc < 0) return ur_py_raise(rc, err);
  uint64_t len = s->csweep.box.out_len;
  if (len > PY_SSIZE_T_MAX) return ur_py_raise(-E2BIG, "reply too large");
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
  if (!out) return NULL;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_child_read_reply(&s->csweep, PyBytes_AS_STRING(out), (size_t)len);
  Py_END_ALLOW_THREADS
  s->busy = 0;
  if (rc < 0) {
    Py_DECREF(out);
    return ur_py_raise(rc, "cannot read the snapshot child's reply");
  }
  return out;
}

static int check_started(Session *s) {
  if (check_child(s) < 0) return -1;
  if (!s->child_started) {
    PyErr_SetString(PyExc_RuntimeError, "child_start() has not run");
    return -1;
  }
  return 0;
}

static PyObject *session_child_wait(Session *s, PyObject *args) {
  double timeout = 0;
  if (!PyArg_ParseTuple(args, "d", &timeout)) return NULL;
  if (check_started(s) < 0) return NULL;
  return child_finish(s, timeout);
}

static PyObject *session_child_request(Session *s, PyObject *args) {
  unsigned int request;
  Py_buffer payload;
  double timeout = 0;
  if (!PyArg_ParseTuple(args, "Iy*d", &request, &payload, &timeout)) return NULL;
  if (check_started(s) < 0) {
    PyBuffer_Release(&payload);
    return NULL;
  }
  char err[256] = "";
  int rc;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_child_send(&s->csweep, request, payload.buf, (size_t)payload.len, err, sizeof(err));
  Py_END_ALLOW_THREADS
  s->busy = 0;
  PyBuffer_Release(&payload);
  if (rc < 0) return ur_py_raise(rc, err);
  return child_finish(s, timeout);
}

/* The stop goes on for longer than a stop should (a snapshot that could
 * not be taken leaves the target stopped for a whole sweep): the tracer
 * thread back to its own policy, so a long sweep never runs realtime. */
static PyObject *session_calm(Session *s, PyObject *Py_UNUSED(ignored)) {
  if (check_owner(s) < 0) return NULL;
  urgent_leave(s);
  Py_RETURN_NONE;
}

static PyObject *session_release(Session *s, PyObject *Py_UNUSED(ignored)) {
  if (check_owner(s) < 0) return NULL;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  do_release(s);
  Py_END_ALLOW_THREADS
  s->busy = 0;
  Py_RETURN_NONE;
}

static PyObject *session_close(Session *s, PyObject *Py_UNUSED(ignored)) {
  if (check_owner(s) < 0) return NULL;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  do_close(s);
  Py_END_ALLOW_THREADS
  s->busy = 0;
  Py_RETURN_NONE;
}

static PyObject *session_enter(Session *s, PyObject *Py_UNUSED(ignored)) {
  Py_INCREF(s);
  return (PyObject *)s;
}

static PyObject *session_exit(Session *s, PyObject *Py_UNUSED(args)) {
  PyObject *r = session_close(s, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *get_mem_pid(Session *s, void *Py_UNUSED(c)) {
  return PyLong_FromLong(s->child ? s->child : s->pid);
}

static PyObject *get_pid(Session *s, void *Py_UNUSED(c)) { return PyLong_FromLong(s->pid); }

static PyObject *get_pause_ns(Session *s, void *Py_UNUSED(c)) {
  if (!s->t_start_ns) return PyLong_FromLong(0);
  uint64_t end = s->state == ST_RELEASED ? s->t_end_ns : ur_now_ns();
  return PyLong_FromUnsignedLongLong(end - s->t_start_ns);
}

/* The pause on the clock the target's own threads read (CLOCK_MONOTONIC):
 * a target's record of when it stalled is set against it
 * (bench/peer_lsan_bench.py). */
static PyObject *get_window_ns(Session *s, void *Py_UNUSED(c)) {
  if (!s->t_start_ns || s->state != ST_RELEASED) Py_RETURN_NONE;
  return Py_BuildValue("(KK)", (unsigned long long)s->t_start_ns, (unsigned long long)s->t_end_ns);
}

/* Where the pause went, in ms from its start: each mark 0.0 until reached. */
static PyObject *get_timings(Session *s, void *Py_UNUSED(c)) {
  uint64_t t0 = s->t_start_ns;
  uint64_t at[] = {s->t_interrupted_ns, s->t_first_stop_ns, s->t_last_stop_ns, s->t_regs_ns,
                   s->t_release_ns, s->state == ST_RELEASED ? s->t_end_ns : 0};
  double ms[6];
  for (size_t i = 0; i < 6; i++) ms[i] = t0 && at[i] >= t0 ? (double)(at[i] - t0) / 1e6 : 0.0;
  return Py_BuildValue("{sdsdsdsdsdsd}", "interrupted", ms[0], "first stopped", ms[1],
                       "last stopped", ms[2], "registers read", ms[3], "release begun", ms[4],
                       "released", ms[5]);
}

static PyObject *get_urgent(Session *s, void *Py_UNUSED(c)) {
  return PyBool_FromLong(s->urgent);
}

static PyObject *get_stopped_threads(Session *s, void *Py_UNUSED(c)) {
  return PyLong_FromLong(s->stopped_threads);
}

static PyObject *get_group_stopped(Session *s, void *Py_UNUSED(c)) {
  return PyBool_FromLong(s->group_stopped);
}

static PyObject *get_snapshot_pid(Session *s, void *Py_UNUSED(c)) {
  if (!s->child) Py_RETURN_NONE;
  return PyLong_FromLong(s->child);
}

static PyObject *get_released(Session *s, void *Py_UNUSED(c)) {
  return PyBool_FromLong(s->state == ST_RELEASED);
}

static PyMethodDef session_methods[] = {
    {"stop", (PyCFunction)(void (*)(void))session_stop, METH_VARARGS | METH_KEYWORDS,
     "stop(urgent=False) -> list[tuple[tid, sp, regs, xstate]]: stop every thread, read "
     "registers; urgent: the calling thread runs SCHED_FIFO until the release, where allowed."},
    {"snapshot", (PyCFunction)(void (*)(void))session_snapshot, METH_VARARGS | METH_KEYWORDS,
     "snapshot(helper_tid, cmd_addr) -> int: fork a frozen copy through the shim's helper; "
     "returns the child pid (also mem_pid)."},
    {"seccomp_allows_clone", (PyCFunction)session_seccomp_allows_clone, METH_VARARGS,
     "seccomp_allows_clone(tid): whether the stopped thread's seccomp filters let the "
     "helper's snapshot clone() through (OSError if they cannot be read)"},
    {"pending_signal_values", (PyCFunction)session_pending_signal_values, METH_NOARGS,
     "pending_signal_values() -> bytes: the sigval of each signal queued to the stopped "
     "target (its threads' queues and its own), as little-endian 64-bit words"},
    {"child_start", (PyCFunction)session_child_start, METH_VARARGS,
     "child_start(box_addr): make the frozen snapshot child sweep itself (abi.h "
     "ur_child_box); it builds its allocation index while the caller goes on."},
    {"child_wait", (PyCFunction)session_child_wait, METH_VARARGS,
     "child_wait(timeout_s) -> bytes: wait for the child's current step, return its reply. "
     "TimeoutError: the child was interrupted and is frozen; ProcessLookupError: it died; "
     "OSError(EIO): it reported a failure."},
    {"child_request", (PyCFunction)session_child_request, METH_VARARGS,
     "child_request(request, payload, timeout_s) -> bytes: hand the child a request "
     "(abi.h UR_CHILD_REQ_*), wait for its reply."},
    {"calm", (PyCFunction)session_calm, METH_NOARGS,
     "calm(): an urgent stop's tracer thread back to its own scheduling policy (the stop goes on)."},
    {"release", (PyCFunction)session_release, METH_NOARGS,
     "release(): detach every thread (idempotent)."},
    {"close", (PyCFunction)session_close, METH_NOARGS,
     "close(): release and kill the snapshot child (idempotent)."},
    {"__enter__", (PyCFunction)session_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)session_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef session_getset[] = {
    {"pid", (getter)get_pid, NULL, "target pid", NULL},
    {"mem_pid", (getter)get_mem_pid, NULL,
     "pid whose /proc/PID/mem to read: the snapshot child if any, else the target", NULL},
    {"snapshot_pid", (getter)get_snapshot_pid, NULL, "snapshot child pid or None", NULL},
    {"pause_ns", (getter)get_pause_ns, NULL,
     "ns from the first PTRACE_SEIZE to the end of release (to now while not released)", NULL},
    {"window_ns", (getter)get_window_ns, NULL,
     "(first PTRACE_SEIZE, end of release) in CLOCK_MONOTONIC ns once released, else None", NULL},
    {"timings", (getter)get_timings, NULL,
     "ms from the first PTRACE_SEIZE to: the first pass's interrupts sent, the first and the "
     "last thread seen stopped, the registers read, release begun, released (0.0: not yet)",
     NULL},
    {"urgent", (getter)get_urgent, NULL,
     "stop(urgent=True) got real-time priority (until the release)", NULL},
    {"stopped_threads", (getter)get_stopped_threads, NULL, "threads stopped by stop()", NULL},
    {"group_stopped", (getter)get_group_stopped, NULL,
     "the target was in a group-stop (SIGSTOP) when stopped; it stays stopped after release",
     NULL},
    {"released", (getter)get_released, NULL, "release() has run", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ur_session_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "unreachable._native.Session",
    .tp_basicsize = sizeof(Session),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Session(pid): stop, snapshot and release one process.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)session_init,
    .tp_dealloc = (destructor)session_dealloc,
    .tp_methods = session_methods,
    .tp_getset = session_getset,
};

PyObject *ur_py_nudge_thread(PyObject *Py_UNUSED(self), PyObject *args) {
  int pid, tid, rc;
  if (!PyArg_ParseTuple(args, "ii", &pid, &tid)) return NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_nudge_thread((pid_t)pid, (pid_t)tid);
  Py_END_ALLOW_THREADS
  if (rc < 0) return ur_py_raise(rc, "cannot wake the thread");
  Py_RETURN_NONE;
}
