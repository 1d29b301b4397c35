/*
 * glibc's per-thread arenas on transparent huge pages, when the user asked
 * glibc for a huge-page heap (GLIBC_TUNABLES glibc.malloc.hugetlb=1, as
 * `unreachable-cli run --huge-pages` sets). glibc 2.36 honours the tunable
 * for its brk heap only: arena heaps grow in small mprotect steps, so no 2 MiB
 * range is whole when first touched and the kernel backs them with 4 KiB
 * pages, and a fork snapshot copies 512 page-table entries per 2 MiB of them
 * (docs/pause.md). The helper thread collapses each whole 2 MiB range of an
 * arena heap into a huge page (MADV_COLLAPSE, Linux 6.1), once, a few at a
 * time, between its other work.
 */
#ifndef UR_HUGE_ARENAS_H
#define UR_HUGE_ARENAS_H

/* Whether arenas are to be collapsed (decided once, from the environment:
 * first called before the helper thread starts, which must not read it). */
int ur_huge_arenas_wanted(void);

/* Collapse up to a few ranges; stop early when stop() says so (a scanner is
 * waiting for the helper). Returns 1 if ranges were left for another step. */
int ur_huge_arenas_step(int (*stop)(void *), void *arg);

#endif
