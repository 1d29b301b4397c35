/* The run-time half of the support layer for the vendored glibc malloc
 * tests (README.md): glibc's test driver behaviour (M_PERTURB, unbuffered
 * stdout, the test in a forked child with a timeout, expected status or
 * signal, failures counted across forks) and the x* helpers. Written for
 * this project; linked into every test program. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <support/check.h>
#include <support/support.h>
#include <support/temp_file.h>
#include <support/test-driver.h>
#include <support/xsignal.h>
#include <support/xthread.h>
#include <support/xunistd.h>

unsigned int test_verbose;

/* ---- failures, shared with forked children ------------------------------ */

static unsigned int *failures;

__attribute__((constructor)) static void init_failures(void) {
  void *m = mmap(NULL, sizeof *failures, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    _exit(1);
  }
  failures = m;
}

void support_record_failure(void) { __atomic_fetch_add(failures, 1, __ATOMIC_RELAXED); }

int support_print_failure_impl(const char *file, int line, const char *format, ...) {
  support_record_failure();
  printf("error: %s:%d: ", file, line);
  va_list ap;
  va_start(ap, format);
  vprintf(format, ap);
  va_end(ap);
  putchar('\n');
  return 1;
}

void support_exit_failure_impl(int status, const char *file, int line, const char *format, ...) {
  if (status != 0 && status != EXIT_UNSUPPORTED) support_record_failure();
  printf("%s: %s:%d: ", status == EXIT_UNSUPPORTED ? "warning" : "error", file, line);
  va_list ap;
  va_start(ap, format);
  vprintf(format, ap);
  va_end(ap);
  putchar('\n');
  exit(status);
}

void support_test_verify_impl(const char *file, int line, const char *expr) {
  int saved = errno;
  support_record_failure();
  printf("error: %s:%d: not true: %s\n", file, line, expr);
  errno = saved;
}

void support_test_verify_exit_impl(int status, const char *file, int line, const char *expr) {
  support_test_verify_impl(file, line, expr);
  exit(status);
}

void support_test_compare_failure(const char *file, int line, const char *left_expr,
                                  long long left_value, int left_positive,
                                  const char *right_expr, long long right_value,
                                  int right_positive) {
  support_record_failure();
  printf("error: %s:%d: numeric comparison failure\n", file, line);
  printf("   left: %lld%s (%s)\n", left_value, left_positive ? "" : " (<= 0)", left_expr);
  printf("  right: %lld%s (%s)\n", right_value, right_positive ? "" : " (<= 0)", right_expr);
}

/* ---- the driver ----------------------------------------------------------- */

static pid_t test_pid;

static void on_timeout(int sig) {
  (void)sig;
  /* The test's whole group (its forked children too), as glibc's driver. */
  if (test_pid > 0) {
    kill(-test_pid, SIGKILL);
    kill(test_pid, SIGKILL); /* in case its setpgid failed */
  }
  static const char msg[] = "Timed out: killed the test process\n";
  ssize_t r = write(1, msg, sizeof msg - 1);
  (void)r;
  _exit(1);
}

static int run_test_function(int argc, char **argv, const struct test_config *config) {
  if (config->test_function_argv) return config->test_function_argv(argc, argv);
  return config->test_function();
}

static int adjust_exit_status(int status) {
  if (status == 0 && __atomic_load_n(failures, __ATOMIC_RELAXED)) return 1;
  return status;
}

/* As glibc's support_test_main: `--direct` (or WAIT_FOR_DEBUGGER) runs the
 * test in this process; otherwise a forked child, in a process group of
 * its own, runs it under a timeout (TIMEOUT seconds times $TIMEOUTFACTOR;
 * then the group is killed) and its end is checked against
 * EXPECTED_STATUS or EXPECTED_SIGNAL. Exits 0 on success, 77 unsupported. */
int support_test_main(int argc, char **argv, const struct test_config *config) {
  bool direct = getenv("WAIT_FOR_DEBUGGER") != NULL;
  if (!config->no_mallopt) mallopt(M_PERTURB, 42); /* make uses of freed memory known */
  int first = 1;
  for (; first < argc; first++) {
    if (strcmp(argv[first], "--direct") == 0)
      direct = true;
    else if (strcmp(argv[first], "-v") == 0 || strcmp(argv[first], "--verbose") == 0)
      test_verbose++;
    else
      break;
  }
  argv[first - 1] = argv[0];
  argv += first - 1;
  argc -= first - 1;
  unsigned long factor = 1;
  const char *f = getenv("TIMEOUTFACTOR");
  if (f && *f) {
    char *end;
    unsigned long v = strtoul(f, &end, 0);
    if (*end == '\0' && v > 0) factor = v;
  }
  int timeout = config->timeout ? config->timeout : DEFAULT_TIMEOUT;
  if (!config->no_setvbuf) setvbuf(stdout, NULL, _IONBF, 0);
  if (config->prepare_function) config->prepare_function(argc, argv);
  if (direct) return adjust_exit_status(run_test_function(argc, argv, config));

  test_pid = fork();
  if (test_pid == 0) {
    setpgid(0, 0);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    exit(run_test_function(argc, argv, config));
  }
  if (test_pid < 0) {
    printf("Cannot fork test program: %m\n");
    exit(1);
  }
  signal(SIGALRM, on_timeout);
  alarm((unsigned)(timeout * factor));
  int status;
  pid_t got;
  do
    got = waitpid(test_pid, &status, 0);
  while (got < 0 && errno == EINTR);
  if (got != test_pid) {
    printf("Waiting for test program failed: %m\n");
    exit(1);
  }
  if (config->cleanup_function) config->cleanup_function();
  if (config->expected_signal) {
    if (WIFSIGNALED(status) && WTERMSIG(status) == config->expected_signal) return 0;
    printf("Expected signal '%s' from child, got %s %d\n", strsignal(config->expected_signal),
           WIFSIGNALED(status) ? "signal" : "exit status",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    exit(1);
  }
  if (WIFSIGNALED(status)) {
    printf("Didn't expect signal from child: got `%s'\n", strsignal(WTERMSIG(status)));
    exit(1);
  }
  int code = WEXITSTATUS(status);
  if (code == EXIT_UNSUPPORTED) {
    printf("Test unsupported\n");
    return EXIT_UNSUPPORTED;
  }
  if (code != config->expected_status) {
    printf("Expected status %d, got %d\n", config->expected_status, code);
    exit(1);
  }
  return adjust_exit_status(0);
}

/* ---- helpers -------------------------------------------------------------- */

static void oom(size_t n) {
  printf("error: out of memory allocating %zu bytes\n", n);
  support_record_failure();
  exit(1);
}

void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p && n) oom(n);
  return p;
}

void *xcalloc(size_t n, size_t s) {
  void *p = calloc(n, s);
  if (!p && n && s) oom(n * s);
  return p;
}

void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q && n) oom(n);
  return q;
}

/* A header before the block keeps its length for munmap. */
void *support_shared_allocate(size_t size) {
  size_t total = size + 16;
  void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) FAIL_EXIT1("mmap of %zu shared bytes: %m", total);
  *(size_t *)m = total;
  return (char *)m + 16;
}

void support_shared_free(void *p) {
  char *m = (char *)p - 16;
  munmap(m, *(size_t *)m);
}

static void check_pthread(int err, const char *what) {
  if (err) {
    errno = err;
    FAIL_EXIT1("%s: %m", what);
  }
}

pthread_t xpthread_create(pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  pthread_t t;
  check_pthread(pthread_create(&t, attr, fn, arg), "pthread_create");
  return t;
}

void *xpthread_join(pthread_t thr) {
  void *r;
  check_pthread(pthread_join(thr, &r), "pthread_join");
  return r;
}

void xpthread_barrier_init(pthread_barrier_t *b, pthread_barrierattr_t *attr, unsigned count) {
  check_pthread(pthread_barrier_init(b, attr, count), "pthread_barrier_init");
}

int xpthread_barrier_wait(pthread_barrier_t *b) {
  int r = pthread_barrier_wait(b);
  if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD) check_pthread(r, "pthread_barrier_wait");
  return r == PTHREAD_BARRIER_SERIAL_THREAD;
}

void xpthread_barrier_destroy(pthread_barrier_t *b) {
  check_pthread(pthread_barrier_destroy(b), "pthread_barrier_destroy");
}

void xpthread_barrierattr_init(pthread_barrierattr_t *attr) {
  check_pthread(pthread_barrierattr_init(attr), "pthread_barrierattr_init");
}

void xpthread_barrierattr_destroy(pthread_barrierattr_t *attr) {
  check_pthread(pthread_barrierattr_destroy(attr), "pthread_barrierattr_destroy");
}

void xpthread_barrierattr_setpshared(pthread_barrierattr_t *attr, int pshared) {
  check_pthread(pthread_barrierattr_setpshared(attr, pshared), "pthread_barrierattr_setpshared");
}

void xpthread_kill(pthread_t thr, int sig) { check_pthread(pthread_kill(thr, sig), "pthread_kill"); }

pid_t xfork(void) {
  pid_t p = fork();
  if (p < 0) FAIL_EXIT1("fork: %m");
  return p;
}

pid_t xwaitpid(pid_t pid, int *status, int flags) {
  pid_t r = waitpid(pid, status, flags);
  if (r < 0) FAIL_EXIT1("waitpid: %m");
  return r;
}

int xopen(const char *path, int flags, mode_t mode) {
  int fd = open(path, flags, mode);
  if (fd < 0) FAIL_EXIT1("open (\"%s\", 0x%x, 0%o): %m", path, flags, mode);
  return fd;
}

void xclose(int fd) {
  if (close(fd) < 0 && errno != EINTR) FAIL_EXIT1("close (%d): %m", fd);
}

void *xmmap(void *addr, size_t length, int prot, int flags, int fd) {
  void *m = mmap(addr, length, prot, flags, fd, 0);
  if (m == MAP_FAILED) FAIL_EXIT1("mmap of %zu bytes, prot=0x%x, flags=0x%x: %m", length, prot, flags);
  return m;
}

long xsysconf(int name) {
  errno = 0;
  long r = sysconf(name);
  if (r == -1 && errno) FAIL_EXIT1("sysconf (%d): %m", name);
  return r;
}

sighandler_t xsignal(int sig, sighandler_t handler) {
  sighandler_t r = signal(sig, handler);
  if (r == SIG_ERR) FAIL_EXIT1("signal (%d): %m", sig);
  return r;
}

/* ---- temporary files ---------------------------------------------------- */

#define MAX_TEMP 16
static char *temp_names[MAX_TEMP];
static int temp_count;
static pid_t temp_owner;

static void delete_temp_files(void) {
  if (getpid() != temp_owner) return; /* only the process that made them */
  for (int i = 0; i < temp_count; i++) unlink(temp_names[i]);
}

void add_temp_file(const char *name) {
  if (temp_count == MAX_TEMP) FAIL_EXIT1("too many temporary files");
  if (temp_count == 0) {
    temp_owner = getpid();
    atexit(delete_temp_files);
  }
  temp_names[temp_count++] = strdup(name);
}

int create_temp_file(const char *base, char **filename) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char *name;
  if (asprintf(&name, "%s/%sXXXXXX", dir, base) < 0) FAIL_EXIT1("asprintf: %m");
  int fd = mkstemp(name);
  if (fd < 0) FAIL_EXIT1("mkstemp (\"%s\"): %m", name);
  add_temp_file(name);
  if (filename)
    *filename = name;
  else
    free(name);
  return fd;
}

/* ---- capture_subprocess --------------------------------------------------- */

#include <support/capture_subprocess.h>

/* Reads fd to its end into a NUL-terminated malloc'ed buffer. */
static void slurp(int fd, struct xmemstream *s) {
  size_t cap = 4096, len = 0;
  char *buf = xmalloc(cap);
  for (;;) {
    if (len + 1 == cap) buf = xrealloc(buf, cap *= 2);
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  s->buffer = buf;
  s->length = len;
}

/* Output goes to files, not pipes: a child that writes more than a pipe
 * holds must not block while nobody reads. */
struct support_capture_subprocess support_capture_subprocess(void (*callback)(void *),
                                                             void *closure) {
  struct support_capture_subprocess r;
  memset(&r, 0, sizeof r);
  int out = create_temp_file("capture-out-", NULL), err = create_temp_file("capture-err-", NULL);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = xfork();
  if (pid == 0) {
    dup2(out, 1);
    dup2(err, 2);
    callback(closure);
    fflush(stdout);
    _exit(0);
  }
  xwaitpid(pid, &r.status, 0);
  lseek(out, 0, SEEK_SET);
  lseek(err, 0, SEEK_SET);
  slurp(out, &r.out);
  slurp(err, &r.err);
  xclose(out);
  xclose(err);
  return r;
}

void support_capture_subprocess_free(struct support_capture_subprocess *p) {
  free(p->out.buffer);
  free(p->err.buffer);
}

/* ---- output --------------------------------------------------------------- */

void ignore_stderr(void) {
  int fd = open("/dev/null", O_WRONLY);
  if (fd < 0) {
    printf("warning: could not open /dev/null: %m\n");
    return;
  }
  dup2(fd, 2);
  close(fd);
}

void write_message(const char *message) {
  size_t len = strlen(message), off = 0;
  while (off < len) {
    ssize_t n = write(1, message + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += (size_t)n;
  }
}
