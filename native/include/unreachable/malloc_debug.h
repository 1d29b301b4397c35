/*
 * The allocator interface libmemunreachable expects from bionic, and the
 * malloc_debug leak-info calls, as exported by libunreachable_shim.so.
 *
 * A program that is only sometimes run under the shim should look these up
 * with dlsym(RTLD_DEFAULT, ...) rather than link against them.
 */
#ifndef UNREACHABLE_MALLOC_DEBUG_H
#define UNREACHABLE_MALLOC_DEBUG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Call cb(ptr, size, arg) for every live allocation whose user pointer lies in
 * [base, base + size), size being the requested size. The callback may
 * allocate. Without malloc_disable() the set can change while iterating. */
int malloc_iterate(uintptr_t base, size_t size,
                   void (*callback)(uintptr_t ptr, size_t size, void* arg), void* arg);

/* Stop every other thread's allocator calls (they block until
 * malloc_enable()); the calling thread may keep allocating. Nests. */
void malloc_disable(void);
void malloc_enable(void);

/* Frames recorded when ptr was allocated; 0 without a backtrace option. */
ssize_t malloc_backtrace(void* ptr, uintptr_t* frames, size_t frame_count);

/* bionic's leak info: records of {size_t size; size_t num_allocations;
 * uintptr_t frames[*backtrace_size];} merged by identical size and backtrace.
 * *info is NULL and every size 0 unless a backtrace option is set. */
void get_malloc_leak_info(uint8_t** info, size_t* overall_size, size_t* info_size,
                          size_t* total_memory, size_t* backtrace_size);
void free_malloc_leak_info(uint8_t* info);

#ifdef __cplusplus
}
#endif

#endif
