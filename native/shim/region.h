/*
 * Every byte of shim memory comes from one reservation made once at start-up,
 * so the scanner can exclude [region_begin, region_end) from its roots with a
 * single range check, and the shim never calls malloc for itself.
 */
#ifndef UR_REGION_H
#define UR_REGION_H

#include <stddef.h>
#include <stdint.h>

/* Reserve the address range. Returns 0, or -1 if no reservation fits. */
int ur_region_init(void);

/* With `run --huge-pages`: the region on transparent huge pages where the
 * kernel can (call before the first ur_region_alloc). */
void ur_region_use_huge_pages(void);

/* Zeroed, 64-byte aligned memory from the region, never returned to it except
 * through the table recycler below. NULL when the region is exhausted. */
void *ur_region_alloc(size_t size);

/* Shard tables: recycled by capacity class so resizes reuse old tables. */
void *ur_region_table_get(uint64_t capacity);
void ur_region_table_put(void *table, uint64_t capacity);

uintptr_t ur_region_begin(void);
uintptr_t ur_region_end(void);

/* fork child: the lock may have been copied held. */
void ur_region_after_fork_child(void);

#endif
