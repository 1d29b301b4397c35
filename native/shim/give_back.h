/*
 * Giving back the size maps' pages that cover no live block (give_back.c).
 */
#ifndef UR_GIVE_BACK_H
#define UR_GIVE_BACK_H

#include <stddef.h>
#include <stdint.h>

/* The helper looks this often whether the heap shrank. */
#define UR_GIVE_BACK_PERIOD_NS 2000000000ull

/* Helper thread, every period: a pass if the maps may be worth one. */
void ur_give_back_step(void);

/* Give back every resident map page that holds no entry; returns bytes,
 * and in *left (if not NULL) the maps' resident bytes that remain. */
size_t ur_give_back_now(uint64_t *left);

#endif
