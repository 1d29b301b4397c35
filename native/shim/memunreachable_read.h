/*
 * The second half of the shim's libmemunreachable interface: turn the
 * scanner's report (abi.h's ur_lmu stream, collected by
 * memunreachable_spawn.h) into the caller's struct unreachable_lmu_result.
 */
#ifndef UR_MEMUNREACHABLE_READ_H
#define UR_MEMUNREACHABLE_READ_H

#include "memunreachable_spawn.h"
#include "unreachable/memunreachable.h"

/* The scanner's report into *r, in place: on success r owns out->data
 * (r->priv_, released by unreachable_lmu_release) and out->data is NULL.
 * -1 if the stream is not a whole report (out untouched). */
int lmu_read_report(struct lmu_output *out, struct unreachable_lmu_result *r);

#endif
