/*
 * Memory a fork snapshot lacks, read from the stopped target during the
 * fork pause (capture/kept_out_of_fork.py): the pause lasts as long as this
 * read. node's 14 MiB of V8 pages took 8-9 ms through /proc/PID/mem
 * (preadv) and 5.4-6.5 ms with one process_vm_readv caller; the read is
 * split between a few threads, each on its own part of the bytes.
 *
 * Each span lands at its offset in the caller's buffer, one after the
 * other; a page that cannot be read is left as it was (zero in a new
 * buffer: no root), so offsets never shift.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/uio.h>

#include "native.h"

#define PIECE ((uint64_t)64 << 10)   /* bytes per call */
#define PAGE ((uint64_t)4096)
#define MAX_THREADS 4u
#define THREAD_MIN_BYTES ((uint64_t)1 << 20) /* less than this per thread: fewer threads */

struct span_job {
  pid_t pid;
  const uint64_t *spans; /* (begin, end) pairs */
  size_t nspans;
  uint8_t *out;
  uint64_t lo, hi; /* this job's part of the output's offsets */
  uint64_t got;
  int fatal;       /* errno that ends every read (the process is gone), else 0 */
};

/* 1: read, 0: not readable, -errno: no read will work. */
static int read_remote(pid_t pid, uint8_t *dst, uint64_t src, uint64_t len, uint64_t *got) {
  struct iovec local = {dst, (size_t)len}, remote = {(void *)(uintptr_t)src, (size_t)len};
  ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (r < 0 && (errno == ESRCH || errno == EPERM || errno == ENOSYS)) return -errno;
  if (r > 0) *got += (uint64_t)r;
  return r == (ssize_t)len;
}

/* [off, off + len) of the output, from remote address addr. */
static int read_piece(struct span_job *j, uint64_t off, uint64_t addr, uint64_t len) {
  uint64_t got = 0;
  int r = read_remote(j->pid, j->out + off, addr, len, &got);
  if (r != 0) {
    if (r > 0) j->got += got;
    return r < 0 ? r : 0;
  }
  /* Short: some page of it is unreadable. Page by page, keeping the rest. */
  for (uint64_t done = 0; done < len;) {
    uint64_t n = PAGE - ((addr + done) & (PAGE - 1)), page_got = 0;
    if (n > len - done) n = len - done;
    int p = read_remote(j->pid, j->out + off + done, addr + done, n, &page_got);
    if (p < 0) return p;
    j->got += page_got;
    done += n;
  }
  return 0;
}

static void *span_main(void *arg) {
  struct span_job *j = arg;
  uint64_t off = 0;
  for (size_t i = 0; i < j->nspans && off < j->hi && !j->fatal; i++) {
    uint64_t b = j->spans[2 * i], e = j->spans[2 * i + 1], len = e - b;
    /* The part of this span inside [lo, hi). */
    uint64_t from = off < j->lo ? j->lo - off : 0, to = off + len > j->hi ? j->hi - off : len;
    for (uint64_t k = from; k < to && !j->fatal;) {
      uint64_t n = to - k < PIECE ? to - k : PIECE;
      int r = read_piece(j, off + k, b + k, n);
      if (r < 0) j->fatal = -r;
      k += n;
    }
    off += len;
  }
  return NULL;
}

PyObject *ur_py_read_spans(PyObject *Py_UNUSED(self), PyObject *args) {
  int pid;
  unsigned threads;
  Py_buffer spans, out;
  if (!PyArg_ParseTuple(args, "iy*w*I", &pid, &spans, &out, &threads)) return NULL;
  PyObject *result = NULL;
  size_t n = (size_t)spans.len / 16;
  const uint64_t *s = spans.buf;
  uint64_t total = 0;
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
    jobs[k] = (struct span_job){.pid = pid, .spans = s, .nspans = n, .out = out.buf,
                                .lo = lo, .hi = hi};
  }
  Py_BEGIN_ALLOW_THREADS
  for (unsigned k = 1; k < threads; k++)
    started[k] = pthread_create(&tids[k], NULL, span_main, &jobs[k]) == 0;
  span_main(&jobs[0]);
  for (unsigned k = 1; k < threads; k++) {
    if (started[k]) pthread_join(tids[k], NULL);
    else span_main(&jobs[k]); /* no thread: this one reads its part too */
  }
  Py_END_ALLOW_THREADS
  uint64_t got = 0;
  for (unsigned k = 0; k < threads; k++) {
    if (jobs[k].fatal) {
      errno = jobs[k].fatal;
      PyErr_SetFromErrno(PyExc_OSError);
      goto done;
    }
    got += jobs[k].got;
  }
  result = PyLong_FromUnsignedLongLong(got);
done:
  PyBuffer_Release(&spans);
  PyBuffer_Release(&out);
  return result;
}
