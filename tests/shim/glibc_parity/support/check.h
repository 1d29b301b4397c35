/* The checks of glibc's support/check.h that the vendored malloc tests use.
 * Written for this project; same names and meaning as glibc's. */
#ifndef SUPPORT_CHECK_H
#define SUPPORT_CHECK_H

#define FAIL_RET(...) return support_print_failure_impl(__FILE__, __LINE__, __VA_ARGS__)
#define FAIL_EXIT(status, ...) support_exit_failure_impl(status, __FILE__, __LINE__, __VA_ARGS__)
#define FAIL_EXIT1(...) support_exit_failure_impl(1, __FILE__, __LINE__, __VA_ARGS__)
#define FAIL_UNSUPPORTED(...) support_exit_failure_impl(77, __FILE__, __LINE__, __VA_ARGS__)

#define TEST_VERIFY(expr)                                  \
  ({                                                       \
    if (expr)                                              \
      ;                                                    \
    else                                                   \
      support_test_verify_impl(__FILE__, __LINE__, #expr); \
  })

#define TEST_VERIFY_EXIT(expr)                                     \
  ({                                                               \
    if (expr)                                                      \
      ;                                                            \
    else                                                           \
      support_test_verify_exit_impl(1, __FILE__, __LINE__, #expr); \
  })

/* Compares as integers of either sign, like glibc's. */
#define TEST_COMPARE(left, right)                                                       \
  ({                                                                                    \
    typedef __typeof__(+(left)) __left_type;                                            \
    typedef __typeof__(+(right)) __right_type;                                          \
    __left_type __left_value = (left);                                                  \
    __right_type __right_value = (right);                                               \
    int __left_is_positive = __left_value > 0;                                          \
    int __right_is_positive = __right_value > 0;                                        \
    _Static_assert(sizeof(__left_value) <= sizeof(long long), "left fits long long");   \
    _Static_assert(sizeof(__right_value) <= sizeof(long long), "right fits long long"); \
    if (__left_value != __right_value || __left_is_positive != __right_is_positive)     \
      support_test_compare_failure(__FILE__, __LINE__, #left, (long long)__left_value,  \
                                   __left_is_positive, #right,                          \
                                   (long long)__right_value, __right_is_positive);      \
  })

int support_print_failure_impl(const char *file, int line, const char *format, ...)
    __attribute__((nonnull(1), format(printf, 3, 4)));
void support_exit_failure_impl(int exit_status, const char *file, int line, const char *format,
                               ...) __attribute__((noreturn, nonnull(2), format(printf, 4, 5)));
void support_test_verify_impl(const char *file, int line, const char *expr);
void support_test_verify_exit_impl(int status, const char *file, int line, const char *expr)
    __attribute__((noreturn));
void support_test_compare_failure(const char *file, int line, const char *left_expr,
                                  long long left_value, int left_positive,
                                  const char *right_expr, long long right_value,
                                  int right_positive);
/* Counted in shared memory, so failures in forked children count too. */
void support_record_failure(void);

#endif
