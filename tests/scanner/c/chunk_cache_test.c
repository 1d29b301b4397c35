/* The chunk cache's slot choice once it is full (reserve_chunk in memory.c),
 * reading a real child's memory through /proc/PID/mem:
 *   - a read moving forward keeps one hot buffer: each chunk after the
 *     first two goes into the slot of the chunk before it, so the chunks
 *     cached before the run stay;
 *   - a read entering a chunk anywhere else (a graph builder taking the
 *     last chunk of another builder's share: the tail of one 1 MiB piece,
 *     the head of the next, then back for the piece before) does not evict
 *     the chunk it came from: no piece is loaded twice.
 * Every view holds the child's bytes. Built with ASan+UBSan. */
#include <stdio.h>
#include <sys/mman.h>

#include "forked_holder.h"
#include "memory.h"
#include "unit_test.h"

#define SLOTS 4
#define CHUNKS 12 /* of the child's memory, 1 MiB-aligned; the last one's first page locked */

static uint8_t byte_at(size_t i) { return (uint8_t)(i * 7 + i / UR_CHUNK_SIZE + 3); }

static const uint8_t *base;

/* A view of chunk k at offset off, checked against the child's bytes. */
static void view(struct ur_pread_mem *m, unsigned k, uint64_t off) {
  uint64_t a = (uint64_t)(uintptr_t)base + k * UR_CHUNK_SIZE + off, avail = 0;
  const uint8_t *p = ur_mem_view(&m->mem, a, a + 64, &avail);
  CHECK(p != NULL);
  CHECK_EQ(avail, (uint64_t)64);
  for (size_t i = 0; i < 64; i++) CHECK_EQ(p[i], byte_at(k * UR_CHUNK_SIZE + off + i));
}

static int cached(struct ur_pread_mem *m, unsigned k) {
  return ur_mem_find(m, (uint64_t)(uintptr_t)base + k * UR_CHUNK_SIZE) != NULL;
}

static void forward_run_keeps_one_hot_buffer(pid_t pid) {
  struct ur_pread_mem m;
  CHECK_EQ(ur_mem_open(&m, pid, SLOTS * UR_CHUNK_SIZE), 0);
  CHECK_EQ(m.max_chunks, (size_t)SLOTS);
  for (unsigned k = 0; k < 8; k++) view(&m, k, k ? 0 : 4096);
  CHECK_EQ(m.chunk_loads, (uint64_t)8);
  /* 4..7 each went into the slot of the one before: 0, 1, 2 stay. */
  for (unsigned k = 0; k < 3; k++) CHECK(cached(&m, k));
  for (unsigned k = 3; k < 7; k++) CHECK(!cached(&m, k));
  CHECK(cached(&m, 7));
  ur_mem_close(&m);
}

static void a_taken_chunk_across_two_pieces_loads_each_once(pid_t pid) {
  struct ur_pread_mem m;
  CHECK_EQ(ur_mem_open(&m, pid, SLOTS * UR_CHUNK_SIZE), 0);
  for (unsigned k = 0; k < SLOTS; k++) view(&m, k, 0); /* the builder's own share: full */
  /* Another share's last graph chunk starts in piece 9 and ends in 10,
   * and the chunk before it lies in 9. */
  view(&m, 9, UR_CHUNK_SIZE - 4096);
  view(&m, 10, 0);
  view(&m, 10, 8192);
  view(&m, 9, UR_CHUNK_SIZE / 2);
  view(&m, 9, 4096);
  CHECK_EQ(m.chunk_loads, (uint64_t)SLOTS + 2);
  CHECK_EQ(m.bytes_loaded, (uint64_t)(SLOTS + 2) * UR_CHUNK_SIZE);
  ur_mem_close(&m);
}

int main(void) {
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  uint8_t *raw = mmap(NULL, (CHUNKS + 1) * UR_CHUNK_SIZE, prot, flags, -1, 0);
  CHECK(raw != MAP_FAILED);
  uint8_t *b = (uint8_t *)(((uintptr_t)raw + UR_CHUNK_SIZE - 1) & ~(UR_CHUNK_SIZE - 1));
  base = b;
  for (size_t i = 0; i < (CHUNKS - 1) * UR_CHUNK_SIZE; i++) b[i] = byte_at(i);
  struct holder h = start_holder(b, 0, 0, byte_at, b + (CHUNKS - 1) * UR_CHUNK_SIZE);
  forward_run_keeps_one_hot_buffer(h.pid);
  a_taken_chunk_across_two_pieces_loads_each_once(h.pid);
  end_holder(h);
  munmap(raw, (CHUNKS + 1) * UR_CHUNK_SIZE);
  printf("ok chunk_cache\n");
  return 0;
}
