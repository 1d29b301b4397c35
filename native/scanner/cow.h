/*
 * Copy-on-write snapshot (docs/pause.md, "The copy snapshot"): the target's
 * private writable memory is write-protected with a synchronous userfaultfd
 * (the shim's helper opens it, the scanner takes it with pidfd_getfd) while
 * it runs, protected again where it wrote by the stop, then let go. The
 * scan reads the live memory; a thread of the scanner serves each first
 * write to a protected page by saving the page's old bytes here, then
 * unprotecting it (which wakes the writer).
 * The snapshot is the live memory overlaid with the saved pages.
 *
 * Order that makes a live read safe: the server saves a page (bytes, then
 * the entry) before it unprotects it, and a reader looks for saved pages
 * after its read of the live memory. A read that saw a write saw it after
 * the unprotect, so the entry is there when the reader looks.
 */
#ifndef UR_SCANNER_COW_H
#define UR_SCANNER_COW_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The most pages written between the protection and the stop that the seal
 * saves (read in the pause) rather than protects again: 1 MiB. */
#define UR_COW_SEAL_SAVE 256u

struct ur_cow {
  pid_t pid;
  int uffd, memfd, wake[2];
  pthread_t server;
  int serving;
  pthread_mutex_t lock;
  uint64_t *keys; /* page address + 1, 0 empty (open addressing) */
  uint8_t **vals;
  size_t cap, n; /* n read with acquire by the readers */
  uint8_t *slab;
  size_t slab_left;
  void **slabs;
  size_t nslabs;
  uint64_t held, limit;
  uint64_t faults, failed;
  uint64_t lost; /* bytes released by the target after the seal, unsaved */
  uint64_t *ranges; /* registered (begin, end) pairs */
  size_t nranges, ranges_cap;
  uint64_t *refused; /* (begin, end) pairs that cannot be registered: saved whole */
  size_t nrefused, refused_cap;
  uint64_t protect_ns, seal_ns;
  size_t protected_upto; /* ranges[0, protected_upto) are protected */
  int sealed;            /* the snapshot is taken: faults save pages */
  uint64_t *dirty;       /* before that: pages unprotected for a write */
  size_t ndirty, dirty_cap;
  size_t seal_saved;     /* of those, saved by the seal and left unprotected */
  uint64_t dirty_faults; /* faults after the seal on pages that were dirty */
  int pagemap;           /* the target's /proc/PID/pagemap */
  uint64_t *present;     /* runs of pages there at the seal (present or */
  size_t npresent, present_cap; /* swapped; the rest read as zero) */
  int present_sorted;    /* sorted and merged (sort_present) */
  int present_known;     /* 0: not recorded, every page counts as present */
  uint64_t *lost_runs;   /* (begin, end) runs released unsaved, present at the seal */
  size_t nlost, lost_cap;
  int lost_unrecorded;   /* some loss is not in lost_runs: all of it matters */
  uint64_t present_ns;   /* the walks of the pagemap (the target running) */
  uint64_t save_reads;   /* reads of the target's memory by ur_cow_save (in the pause) */
};

/* 0 or -errno. Takes uffd (closed by ur_cow_close). */
int ur_cow_open(struct ur_cow *c, pid_t pid, int uffd, uint64_t limit);
/* Register (begin, end) pairs for write protection (no protection yet).
 * Those the kernel refuses (a synchronous userfaultfd takes anonymous,
 * shmem and hugetlb memory only: not a file's private pages, such as a
 * program's .data) are saved whole by ur_cow_protect instead. Returns how
 * many were registered. */
size_t ur_cow_register(struct ur_cow *c, const uint64_t *pairs, size_t n);
/* Save the pages of (begin, end) pairs as they are now (the target stopped):
 * memory left unprotected, whose snapshot is taken whole. 0 or -ENOMEM. */
int ur_cow_save(struct ur_cow *c, const uint64_t *pairs, size_t n);
/* Write-protect what was registered since the last call. Before the seal
 * (the target runs), a write is served by unprotecting the page and noting
 * it dirty; nothing is saved. 0 or -errno. */
int ur_cow_protect(struct ur_cow *c);
/* The target stopped, everything registered protected: the snapshot is
 * this moment. Saves the pages dirtied since ur_cow_protect (up to
 * UR_COW_SEAL_SAVE, leaving them unprotected) and protects the rest again,
 * saves what could not be registered; from now on each first write is saved.
 * Only the pages written since the protection cost the pause. 0 or -errno. */
int ur_cow_seal(struct ur_cow *c);
/* The parts of sorted (begin, end) pairs `in` that held pages at the seal,
 * as pairs in *out (malloc'ed), *n_out of them; -1 when that was not
 * recorded (no walk of the pagemap), else 0. */
int ur_cow_present(struct ur_cow *c, const uint64_t *in, size_t n, uint64_t **out, size_t *n_out);
/* Copy of the lost runs (pairs), *n of them (malloc'ed, NULL when none). */
uint64_t *ur_cow_lost(struct ur_cow *c, size_t *n);
/* Whether [addr, addr + len) meets memory the snapshot holds: there, what
 * the target has unmapped since is the snapshot's still (saved pages, zero
 * where it held none, and what it lost counted in lost). */
int ur_cow_covers(struct ur_cow *c, uint64_t addr, size_t len);
/* Replace saved pages in buf = [addr, addr + len); clears their bits in bad
 * (indexed by page from first_page) when given. */
void ur_cow_overlay(struct ur_cow *c, uint64_t addr, uint8_t *buf, size_t len, uint64_t *bad,
                    size_t first_page);
/* Unprotect and unregister everything, stop serving, free. */
void ur_cow_close(struct ur_cow *c);

#endif
