/* glibc's legacy test-skeleton.c interface (tests that include
 * "../test-skeleton.c" and define TEST_FUNCTION as an expression such as
 * `do_test ()`). Written for this project; see README.md. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <support/check.h>
#include <support/support.h>
#include <support/temp_file.h>
#include <support/xsignal.h>

static int legacy_test_function(int argc __attribute__((unused)),
                                char **argv __attribute__((unused))) {
#ifdef TEST_FUNCTION
  return TEST_FUNCTION;
#undef TEST_FUNCTION
#else
  return do_test(argc, argv);
#endif
}
#define TEST_FUNCTION_ARGV legacy_test_function

#ifdef PREPARE
static void legacy_prepare_function(int argc __attribute__((unused)),
                                    char **argv __attribute__((unused))) {
  PREPARE(argc, argv);
}
#undef PREPARE
#define PREPARE legacy_prepare_function
#endif

#include <support/test-driver.c>

#ifdef _PTHREAD_H
#include <support/xthread.h>
#endif
