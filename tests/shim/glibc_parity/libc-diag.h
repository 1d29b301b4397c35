/* glibc's include/libc-diag.h: compiler diagnostic control. Written for
 * this project. */
#ifndef _LIBC_DIAG_H
#define _LIBC_DIAG_H 1

#define ignore_value(x) ({ __typeof__(x) __ignored_value = (x); (void)__ignored_value; })
#define DIAG_PUSH_NEEDS_COMMENT _Pragma("GCC diagnostic push")
#define DIAG_POP_NEEDS_COMMENT _Pragma("GCC diagnostic pop")
#define _DIAG_STR1(s) #s
#define _DIAG_STR(s) _DIAG_STR1(s)
#define DIAG_IGNORE_NEEDS_COMMENT(version, option) _Pragma(_DIAG_STR(GCC diagnostic ignored option))
#define DIAG_IGNORE_Os_NEEDS_COMMENT(version, option)
#define DIAG_PUSH_NEEDS_COMMENT_CLANG
#define DIAG_POP_NEEDS_COMMENT_CLANG
#define DIAG_IGNORE_NEEDS_COMMENT_CLANG(version, option)

#endif
