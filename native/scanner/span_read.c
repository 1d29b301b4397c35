/*
 * Memory a fork snapshot lacks, read from the stopped target during the
 * fork pause (capture/kept_out_of_fork.py): the pause lasts as long as this
 * read. node's 14 MiB of V8 pages took 8-9 ms through /proc/PID/mem
 * (preadv) and 5.4-6.5 ms with one process_vm_readv caller; the read is
 * split between a few threads, each on its own part of the bytes.
 *
 * Each span lands at its offset in the caller's buffer, one after the
 * other; a page that cannot be read is zeroed (no root), so offsets never
 * shift. Each piece is read as every live read is (memory.c
 * ur_mem_read_live): process_vm_readv only for the pages the process maps
 * alone, since its pin would copy a page shared with a child of the
 * target into the target.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"
#include "native.h"
#include "snapshot.h"

#define PIECE ((uint64_t)64 << 10)   /* bytes per call */
#define PAGE ((uint64_t)4096)
#define MAX_THREADS 4u
#define THREAD_MIN_BYTES ((uint64_t)1 << 20) /* less than this per thread: fewer threads */

struct span_reader {
  pid_t pid;
  int mem_fd, pagemap_fd; /* the process's /proc/PID/mem and pagemap */
  int refused;            /* process_vm_readv refused: /proc/PID/mem only */
};

struct span_job {
  struct span_reader *reader;
  const uint64_t *spans; /* (begin, end) pairs */
  size_t nspans;
  uint8_t *out;
  uint64_t lo, hi; /* this job's part of the output's offsets */
  uint64_t got;
};

static void *span_main(void *arg) {
  struct span_job *j = arg;
  uint64_t off = 0;
  struct span_reader *r = j->reader;
  for (size_t i = 0; i < j->nspans && off < j->hi; i++) {
    uint64_t b = j->spans[2 * i], e = j->spans[2 * i + 1], len = e - b;
    /* The part of this span inside [lo, hi). */
    uint64_t from = off < j->lo ? j->lo - off : 0, to = off + len > j->hi ? j->hi - off : len;
    for (uint64_t k = from; k < to;) {
      uint64_t n = to - k < PIECE ? to - k : PIECE;
      j->got += ur_mem_read_live(r->mem_fd, r->pagemap_fd, r->pid, &r->refused, b + k,
                                 j->out + off + k, (size_t)n);
      k += n;
    }
    off += len;
  }
  return NULL;
}

/* Whether the process has ended (a zombie's memory reads as nothing). */
static int process_gone(pid_t pid) {
  char state = ur_thread_state(pid, pid);
  return state == 0 || state == 'Z' || state == 'X';
}

/* The bytes of the spans that were readable, read by up to `threads`. */
static uint64_t read_all(struct span_reader *r, const uint64_t *s, size_t n, uint8_t *out,
                         uint64_t total, unsigned threads) {
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  while (threads > 1 && total / threads < THREAD_MIN_BYTES) threads--;
  if (threads < 1) threads = 1;
  struct span_job jobs[MAX_THREADS];
  pthread_t tids[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  /* Parts end on page boundaries of the output, so no page is split. */
  uint64_t part = (total / threads + PAGE - 1) & ~(PAGE - 1);
  for (unsigned k = 0; k < threads; k++) {
    uint64_t lo = part * k, hi = k + 1 == threads ? total : part * (k + 1);
    if (lo > total) lo = total;
    if (hi > total) hi = total;
    jobs[k] = (struct span_job){.reader = r, .spans = s, .nspans = n, .out = out,
                                .lo = lo, .hi = hi};
  }
  for (unsigned k = 1; k < threads; k++)
    started[k] = pthread_create(&tids[k], NULL, span_main, &jobs[k]) == 0;
  span_main(&jobs[0]);
  for (unsigned k = 1; k < threads; k++) {
    if (started[k]) pthread_join(tids[k], NULL);
    else span_main(&jobs[k]); /* no thread: this one reads its part too */
  }
  uint64_t got = 0;
  for (unsigned k = 0; k < threads; k++) got += jobs[k].got;
  return got;
}

/* ESRCH for a process that is gone, else 0 with the reader's files open. */
static int open_reader(struct span_reader *r, pid_t pid) {
  char path[64];
  *r = (struct span_reader){.pid = pid, .pagemap_fd = -1};
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
  r->mem_fd = open(path, O_RDONLY | O_CLOEXEC);
  if (r->mem_fd < 0) return errno == ENOENT ? ESRCH : errno;
  snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
  r->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC); /* without it: /proc/PID/mem only */
  return 0;
}

static void close_reader(struct span_reader *r) {
  if (r->pagemap_fd >= 0) close(r->pagemap_fd);
  if (r->mem_fd >= 0) close(r->mem_fd);
}

PyObject *ur_py_read_spans(PyObject *Py_UNUSED(self), PyObject *args) {
  int pid;
  unsigned threads;
  Py_buffer spans, out;
  if (!PyArg_ParseTuple(args, "iy*w*I", &pid, &spans, &out, &threads)) return NULL;
  PyObject *result = NULL;
  size_t n = (size_t)spans.len / 16;
  const uint64_t *s = spans.buf;
  uint64_t total = 0, got;
  for (size_t i = 0; i < n; i++) {
    if (s[2 * i + 1] < s[2 * i]) {
      PyErr_SetString(PyExc_ValueError, "a span ends before it begins");
      goto done;
    }
    total += s[2 * i + 1] - s[2 * i];
  }
  if ((uint64_t)out.len < total) {
    PyErr_SetString(PyExc_ValueError, "the buffer is smaller than the spans");
    goto done;
  }
  struct span_reader reader;
  int err;
  Py_BEGIN_ALLOW_THREADS
  err = open_reader(&reader, pid);
  if (!err) {
    got = read_all(&reader, s, n, out.buf, total, threads);
    if (got < total && process_gone(pid)) err = ESRCH;
    close_reader(&reader);
  }
  Py_END_ALLOW_THREADS
  if (err) {
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
  } else {
    result = PyLong_FromUnsignedLongLong(got);
  }
done:
  PyBuffer_Release(&spans);
  PyBuffer_Release(&out);
  return result;
}
