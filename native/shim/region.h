/*
 * Every byte of shim memory comes from pieces of address space reserved as
 * the shim needs them (abi.h's ur_region_span), listed in the descriptor so
 * the scanner can exclude them from its roots, and the shim never calls
 * malloc for itself.
 */
#ifndef UR_REGION_H
#define UR_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "unreachable/abi.h"

/* Reserve the first piece and list it in the descriptor (regions,
 * num_regions, as every later one). Returns 0, or -1 with errno set if it
 * does not fit. */
int ur_region_init(void);

/* With `run --huge-pages`: the region on transparent huge pages where the
 * kernel can (call before the first ur_region_alloc). */
void ur_region_use_huge_pages(void);

/* Zeroed memory from the region, 64-byte aligned (page aligned from a page
 * up), never returned to it except
 * through the table recycler below. NULL when no piece can be added (an
 * address-space limit, strict overcommit): ur_region_error says why; or
 * when the caller is a signal handler's call nested in its own thread's
 * use of the region (ur_region_held_here), which cannot wait for it. The
 * recycler's functions do the same: no table, or the table not recycled. */
void *ur_region_alloc(size_t size);

/* Zeroed pages of the region that a forked child does not inherit
 * (MADV_WIPEONFORK: it gets them zeroed), so fork leaves the parent's
 * writable; NULL if the kernel cannot (before Linux 4.14) or as
 * ur_region_alloc. */
void *ur_region_alloc_unshared(size_t size);

/* The program is about to install a seccomp filter of its own (sandbox.c),
 * which may refuse any call the region makes to grow (vsftpd's grants
 * mprotect only PROT_READ, and kills on the rest): the region commits its
 * room now, while the calls still go through, and from then on hands out
 * only pages already read/write, with no system call; past them
 * ur_region_alloc returns NULL (ur_region_error: EPERM) and the registry
 * counts the blocks it could not register. For good, in forked children
 * too. Also MADV_WIPEONFORK pages (none: NULL) and a recycled table's
 * pages (kept) make no call then. */
void ur_region_fix(void);

/* Whether ur_region_fix was called. */
int ur_region_fixed(void);

/* Shard tables: recycled by capacity class so resizes reuse old tables. */
void *ur_region_table_get(uint64_t capacity);
void ur_region_table_put(void *table, uint64_t capacity);

/* Whether this thread holds the region's lock: the caller is a signal
 * handler's call nested in the thread's own use of the region. */
int ur_region_held_here(void);

/* The first piece. */
uintptr_t ur_region_begin(void);
uintptr_t ur_region_end(void);

/* Whether [addr, addr + len) lies in one piece. */
int ur_region_contains(uint64_t addr, uint64_t len);

/* errno of the last failed reservation or commit, 0 if none failed. */
int ur_region_error(void);

/* fork child: the lock may have been copied held. */
void ur_region_after_fork_child(void);

#endif
