/* What the C unit tests of native code share: a check that fails the
 * program with its line, and a seeded xorshift for reproducible cases. */
#ifndef UR_TESTS_UNIT_TEST_H
#define UR_TESTS_UNIT_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                          \
  do {                                                    \
    if (!(c)) {                                           \
      printf("fail %s:%d: %s\n", __FILE__, __LINE__, #c); \
      exit(1);                                            \
    }                                                     \
  } while (0)

/* Both sides shown: the values say more than the expressions. */
#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                    \
    if (a_ != b_) {                                                                     \
      printf("fail %s:%d: %s == %" PRIu64 ", %s == %" PRIu64 "\n", __FILE__, __LINE__, #a, \
             a_, #b, b_);                                                               \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static uint64_t test_seed = 88172645463325252ull;

static inline uint64_t test_random(void) {
  test_seed ^= test_seed << 13;
  test_seed ^= test_seed >> 7;
  test_seed ^= test_seed << 17;
  return test_seed;
}

#endif
