/*
 * Target for capture tests: busy and idle threads, a thread holding a magic
 * value in r12 and one holding another in xmm15, a main loop that writes its
 * progress to a file, and signal handlers that count deliveries.
 *
 * Usage: threads COUNTER_FILE NBUSY NIDLE [STORM]
 * Prints "ready R12_TID XMM_TID" once every thread runs.
 * COUNTER_FILE holds "<loops> <sigusr1> <sigrtmin> <storm sent> <storm received>".
 * STORM: a thread sends that many queued SIGRTMIN+1 to a busy receiver
 * thread, so that captures catch it in signal-delivery-stops.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define R12_MAGIC 0x5ca1ab1e12345678L
#define XMM_MAGIC 0x0ddba11cafef00dULL

static volatile sig_atomic_t usr1_count, rt_count, storm_recv, storm_sent;
static volatile pid_t receiver_tid;
static long storm;
static volatile pid_t r12_tid, xmm_tid;
static volatile int started;

/* Process-directed signals run their handler on any thread, two at once on
 * two cores: a plain ++ would lose counts. Atomics are async-signal-safe. */
static void on_usr1(int sig) { (void)sig; __atomic_add_fetch(&usr1_count, 1, __ATOMIC_RELAXED); }
static void on_rt(int sig) { (void)sig; __atomic_add_fetch(&rt_count, 1, __ATOMIC_RELAXED); }
static void on_storm(int sig) { (void)sig; __atomic_add_fetch(&storm_recv, 1, __ATOMIC_RELAXED); }

static void *receiver(void *arg) {
  (void)arg;
  receiver_tid = gettid();
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  volatile uint64_t x = 0;
  for (;;) x++;
  return NULL;
}

static void *sender(void *arg) {
  (void)arg;
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  while (!receiver_tid) usleep(100);
  for (long i = 0; i < storm;) {
    /* Keep the queue short so deliveries, not the queue limit, pace us. */
    if (storm_sent - storm_recv > 8) continue;
    if (syscall(SYS_tgkill, getpid(), receiver_tid, SIGRTMIN + 1) == 0) {
      storm_sent++;
      i++;
    }
  }
  for (;;) pause();
  return NULL;
}

static void *busy(void *arg) {
  (void)arg;
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  volatile uint64_t x = 0;
  for (;;) x++;
  return NULL;
}

static void *idle(void *arg) {
  (void)arg;
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  for (;;) pause();
  return NULL;
}

static void *hold_r12(void *arg) {
  (void)arg;
  r12_tid = gettid();
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  register long x __asm__("r12") = R12_MAGIC;
  for (;;) __asm__ volatile("" : "+r"(x));
  return NULL;
}

static void *hold_xmm(void *arg) {
  (void)arg;
  xmm_tid = gettid();
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  uint64_t m = XMM_MAGIC;
  __asm__ volatile("movq %0, %%xmm15" : : "r"(m) : "xmm15");
  for (;;) __asm__ volatile("" ::: "memory");
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) return 2;
  storm = argc == 5 ? atol(argv[4]) : 0;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  int nbusy = atoi(argv[2]), nidle = atoi(argv[3]);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  sa.sa_handler = on_rt;
  sigaction(SIGRTMIN, &sa, NULL);
  sa.sa_handler = on_storm;
  sigaction(SIGRTMIN + 1, &sa, NULL);
  pthread_t t;
  for (int i = 0; i < nbusy; i++) pthread_create(&t, NULL, busy, NULL);
  for (int i = 0; i < nidle; i++) pthread_create(&t, NULL, idle, NULL);
  pthread_create(&t, NULL, hold_r12, NULL);
  pthread_create(&t, NULL, hold_xmm, NULL);
  if (storm) {
    pthread_create(&t, NULL, receiver, NULL);
    pthread_create(&t, NULL, sender, NULL);
  }
  while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < nbusy + nidle + 2 + (storm ? 2 : 0))
    usleep(1000);
  printf("ready %d %d\n", (int)r12_tid, (int)xmm_tid);
  fflush(stdout);
  for (uint64_t loops = 1;; loops++) {
    char line[128];
    int n = snprintf(line, sizeof(line), "%020llu %010d %010d %010d %010d\n",
                     (unsigned long long)loops, (int)usr1_count, (int)rt_count, (int)storm_sent,
                     (int)storm_recv);
    if (pwrite(fd, line, (size_t)n, 0) != n) return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}
