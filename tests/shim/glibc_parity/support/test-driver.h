/* The part of glibc's support/test-driver.h the vendored malloc tests use,
 * for tests/shim/glibc_parity (README.md there). Written for this project;
 * the interface follows glibc's test driver. */
#ifndef SUPPORT_TEST_DRIVER_H
#define SUPPORT_TEST_DRIVER_H

#include <stdio.h>

struct test_config {
  void (*prepare_function)(int argc, char **argv);
  int (*test_function)(void);
  int (*test_function_argv)(int argc, char **argv);
  void (*cleanup_function)(void);
  int timeout;         /* seconds; 0: DEFAULT_TIMEOUT */
  int expected_status; /* exit status that means success */
  int expected_signal; /* if non-zero, success is death by this signal */
  char no_mallopt;
  char no_setvbuf;
};

enum {
  EXIT_UNSUPPORTED = 77,
  DEFAULT_TIMEOUT = 20,
};

extern unsigned int test_verbose;

#define verbose_printf(...)   \
  do {                        \
    if (test_verbose > 0)     \
      printf(__VA_ARGS__);    \
  } while (0);

int support_test_main(int argc, char **argv, const struct test_config *config);

#endif
