/*
 * The contract between the shim (native/shim, inside the target) and the
 * scanner (native/scanner and unreachable/, outside it).
 *
 * The scanner reads these structures out of a stopped (or copy-on-write
 * frozen) target through /proc/PID/mem, so every field has a fixed size and
 * offset, addresses are stored as uint64_t, and nothing here may change shape
 * without bumping UR_ABI_VERSION.
 *
 * Consistency without locks, as seen by a reader that stops the target at an
 * arbitrary instruction:
 *   - a size map entry (most blocks; see struct ur_size_map_ref) is written
 *     with one aligned store of its width (1, 2 or 4 bytes), and a map is
 *     listed before its first entry is written;
 *   - a shard entry's meta (size and stack id, one 8-byte store) is written
 *     before its key, and the key is published with a release store; a reader
 *     treats key==UR_KEY_EMPTY or UR_KEY_TOMBSTONE as "no entry", so it never
 *     sees a half-written entry; realloc in place rewrites meta with one store;
 *   - a table resize builds the new table completely, then publishes it with
 *     one store of ur_shard.table/capacity (table written last); the old table
 *     stays intact and mapped until after that store;
 *   - each thread announces the operation it is inside (ur_thread_slot.op)
 *     before touching glibc or the registry, and clears it after. realloc
 *     and the slow paths also name their blocks (in_ptr, out_ptr), cleared
 *     with op; malloc's and free's inline paths name none, as the block is
 *     in the thread's registers or stack wherever the registry holds it.
 *     The scanner treats the blocks named by an in-flight operation as roots
 *     and never reports them, so a thread paused mid-malloc/free/realloc can
 *     never make a leak appear.
 *
 * Pointers to heap blocks are never stored in the clear anywhere in shim
 * memory: a size map holds sizes only, at places computed from addresses,
 * and shard keys and thread slots hold pointers XORed with
 * UR_POINTER_MANGLE, so a conservative scanner (ours, or LSan/valgrind
 * running beside us) never finds them.
 *
 * malloc_debug's options (docs/malloc_debug.md) change none of this: an entry
 * is always the USER pointer with the REQUESTED size. A guard header lies
 * before the user pointer (outside [ptr, ptr+size)) and keeps the glibc
 * pointer mangled; blocks free_track holds back are not registered (they are
 * freed memory), and the FIFO naming them and record_allocs' entries lie in
 * the shim's region with mangled pointers. Signal requests for the helper
 * use a word of their own (not helper_cmd), so the snapshot protocol below
 * is unchanged.
 *
 * The in-child sweep (struct ur_child_box, descriptor.child_box, taken from
 * reserved[]: an older shim leaves it 0 and the scanner sweeps from outside).
 * The snapshot child the helper clones is traced from birth. It checks
 * box.go in its own copy of memory: unless the scanner wrote UR_CHILD_GO
 * there (into the CHILD, never the target; only after setting
 * PTRACE_O_EXITKILL on it), it exits at once, as before. Otherwise it maps its
 * own stack, an inbox (in, in_cap) and, reading its copy of the registry
 * without locks, builds the sorted allocation index; it stops (SIGSTOP,
 * state = UR_CHILD_INDEXED or UR_CHILD_FAILED with error, reply
 * struct ur_child_index at out). Then, each time: the scanner pwrites a request
 * into the inbox, sets in_len and request, resumes it; the child answers at
 * (out, out_len), sets state = UR_CHILD_REPLIED or UR_CHILD_FAILED, stops.
 * Requests:
 *   UR_CHILD_REQ_HOLDS: in = n struct ur_range; reply = n bytes, 1 if a
 *     registered block begins in [begin, end);
 *   UR_CHILD_REQ_BLOCKS (UR_CHILD_FEATURE_BLOCKS): in = one uint64_t cap,
 *     then n struct ur_range; reply = n uint64_t counts of the blocks
 *     beginning in each range, then for each range the begin addresses of
 *     its first min(count, cap) blocks, ascending;
 *   UR_CHILD_REQ_SWEEP: in = struct ur_child_sweep_req, then nranges root
 *     struct ur_range, nvalues root words, nexcluded in-flight block
 *     addresses, nreadable struct ur_range the child may load directly,
 *     then optionally struct ur_child_sweep_opts (marking threads);
 *     reply = struct ur_child_sweep_reply, then nleaks ur_leak_records,
 *     then (UR_CHILD_FEATURE_TEAM_SIZE) one uint64_t: the threads that marked;
 *   anything else: the child exits.
 * The scanner kills the child when done; tracer exit kills it (EXITKILL).
 *
 * Write tracking for "copy" snapshots (struct ur_write_tracker,
 * descriptor.write_tracker, taken from reserved[]: an older shim leaves it 0
 * and offers no copy mode). The scanner writes scanner_pid, then cmd =
 * UR_TRACK_START, and wakes the helper (a ptrace stop of the helper thread
 * alone restarts its futex wait, which re-reads the word). The helper opens a
 * userfaultfd in asynchronous write-protect mode (UFFD_FEATURE_WP_ASYNC,
 * Linux 6.7), registers every private writable mapping and write-protects
 * it (anonymous ones: their present pages only), and sets ranges and cmd =
 * UR_TRACK_ON, or UR_TRACK_FAILED with error = errno. From then on the
 * kernel resolves each first write to a page by itself and /proc/PID/pagemap
 * (PAGEMAP_SCAN) reports the page as written. The scanner copies the memory
 * while the process runs, stops it, re-reads only what was written since,
 * lets it go and writes cmd = UR_TRACK_STOP. The helper, which keeps serving
 * snapshots and requests meanwhile and checks the word every 10 ms,
 * unregisters every mapping, closes the userfaultfd and sets UR_TRACK_IDLE.
 * It stops by itself, the same way, once scanner_pid is gone or after
 * UR_TRACK_MAX_SECONDS. A scanner outside the process's pid namespace (a
 * container's) has no pid there: it writes scanner_pid = 0 and bumps
 * heartbeat at least every UR_TRACK_HEARTBEAT_MS / 4 instead; the helper stops
 * once heartbeat has not changed for UR_TRACK_HEARTBEAT_MS (an older shim
 * stops at once on scanner_pid 0, and the scan falls back to fork).
 * With reserved = UR_TRACK_MODE_COW (written before START) the helper opens
 * a synchronous userfaultfd instead and registers nothing: the scanner
 * takes it with pidfd_getfd, registers, protects and serves the target's
 * memory itself (a copy-on-write snapshot); the helper ends it the same
 * way, and runs no requests meanwhile. An older shim ignores the field.
 * With reserved = UR_TRACK_MODE_SCANNER the helper opens the asynchronous
 * userfaultfd and registers nothing (ranges = 0): the scanner takes it with
 * pidfd_getfd, registers and protects the mappings itself and, before its
 * STOP, unregisters them; the helper's teardown on STOP or on a vanished
 * scanner is unchanged (it unregisters whatever is left). An older shim
 * arms as in mode 0 and reports ranges > 0: the scanner then arms nothing.
 */
#ifndef UNREACHABLE_ABI_H
#define UNREACHABLE_ABI_H

#include <stdint.h>

#define UR_ABI_MAGIC UINT64_C(0x3142484341455255) /* "UREACHB1" little endian */
#define UR_ABI_VERSION 6u /* 2: 16-byte entries (size and stack id packed in meta); 3: size maps;
                             4: the shim's memory in several regions, why it is disabled;
                             5: size maps of three levels; 6: the stack table in
                             segments */

/* The exported symbol the scanner looks up in the shim's ELF dynsym. */
#define UR_DESCRIPTOR_SYMBOL "unreachable_descriptor"

#define UR_POINTER_MANGLE UINT64_MAX
#define UR_MANGLE(p) ((uint64_t)(uintptr_t)(p) ^ UR_POINTER_MANGLE)
#define UR_UNMANGLE(k) ((uintptr_t)((k) ^ UR_POINTER_MANGLE))

#define UR_KEY_EMPTY UINT64_C(0)
#define UR_KEY_TOMBSTONE UINT64_C(1)

/* ur_thread_slot.op: which entry point the thread is inside. */
enum ur_op {
  UR_OP_NONE = 0,
  UR_OP_MALLOC = 1,   /* malloc, calloc, memalign family: out_* set on return (0: in a register) */
  UR_OP_FREE = 2,     /* in_* = block being freed (0: in a register) */
  UR_OP_REALLOC = 3,  /* in_* = old block, out_* = new block once known */
  UR_OP_INTERNAL = 4, /* inside the shim for its own work (no user block) */
};

/* ur_thread_slot.state */
enum ur_thread_state {
  UR_THREAD_FREE = 0,   /* slot never used or recycled */
  UR_THREAD_LIVE = 1,   /* thread is running */
  UR_THREAD_EXITED = 2, /* thread exited; stack_lo/hi kept: glibc may cache that stack */
};

/* ur_descriptor.helper_cmd values (a uint32_t futex word in the shim). */
enum ur_helper_cmd {
  UR_CMD_IDLE = 0,
  UR_CMD_SNAPSHOT = 1, /* helper: raw clone(flags=0) a frozen copy, wait4 it, back to IDLE */
};

/* ur_write_tracker.cmd: written by the scanner (START, STOP) and the helper. */
enum ur_track_cmd {
  UR_TRACK_IDLE = 0,
  UR_TRACK_START = 1,
  UR_TRACK_ON = 2,
  UR_TRACK_STOP = 3,
  UR_TRACK_FAILED = 4,
};
/* ur_write_tracker.reserved as the mode: COW asks for a synchronous
 * userfaultfd, registered by the scanner (copy_snapshot.py); 0 the
 * asynchronous tracking; SCANNER the same, armed by the scanner. */
#define UR_TRACK_MODE_COW 1u
#define UR_TRACK_MODE_SCANNER 2u /* asynchronous, armed by the scanner */
#define UR_TRACK_MAX_SECONDS 600u /* the longest scan (the scanner's own timeout) */
#define UR_TRACK_HEARTBEAT_MS 2000u

struct ur_write_tracker {  /* 32 bytes, in shim memory */
  uint32_t cmd;            /* enum ur_track_cmd, a futex word */
  int32_t error;           /* helper: errno of a failed start */
  uint32_t scanner_pid;    /* scanner: tracking ends when this process is gone (0: heartbeat) */
  uint32_t ranges;         /* helper: mappings registered */
  uint64_t heartbeat;      /* scanner, with scanner_pid 0: bumped while it lives */
  uint64_t reserved;
};

/* ur_entry.meta: the requested size in the low 44 bits, the stack id (0: no
 * backtrace; else an index into the stack table) in the high 20. A block of
 * 16 TiB or more is not registered. */
#define UR_META_SIZE_BITS 44
#define UR_META_MAX_SIZE ((UINT64_C(1) << UR_META_SIZE_BITS) - 1)
#define UR_META_MAX_STACK_ID ((UINT32_C(1) << (64 - UR_META_SIZE_BITS)) - 1)
#define UR_META(size, stack_id) ((uint64_t)(size) | ((uint64_t)(stack_id) << UR_META_SIZE_BITS))
#define UR_META_SIZE(meta) ((uint64_t)(meta) & UR_META_MAX_SIZE)
#define UR_META_STACK_ID(meta) ((uint32_t)((uint64_t)(meta) >> UR_META_SIZE_BITS))

struct ur_entry {          /* 16 bytes: four to a cache line (tables are 64-byte aligned) */
  uint64_t key;            /* UR_KEY_EMPTY, UR_KEY_TOMBSTONE, or UR_MANGLE(user pointer) */
  uint64_t meta;           /* UR_META(requested size, stack id) */
};

/*
 * Size maps: most blocks are registered here instead of in a shard. A map
 * covers one 1 MiB-aligned piece of address space (its ref's base) and is
 * UR_SIZE_MAP_BYTES long: three levels, one after the other, each an array
 * with one entry per granule of the piece. A block's level follows from its
 * requested size alone:
 *
 *   level  granule  entry     requested sizes   entry value
 *   0      16 B     uint8_t   0 .. 248          size + 1
 *   1      256 B    uint16_t  249 .. 4088       offset << 12 | size
 *   2      4 KiB    uint32_t  4089 .. 2^24 - 1  offset << 24 | size
 *
 * where offset is the block's distance from the start of its granule in
 * 16-byte units. 0 is an empty entry (no value above is 0). Two disjoint
 * 16-aligned blocks of at least granule - 15 bytes never begin in the same
 * granule, so a level's entry holds at most one block. The limits are
 * those of glibc's chunk sizes (256 and 4096 bytes), so the shim can tell
 * a block's level at free from glibc's chunk header. The coarse levels
 * keep the maps' cost near the heap's: at most 1 byte per 16 of the
 * address space a map covers for small blocks, 2 per 256 and 4 per 4096
 * for larger ones, and a page of a level that no block of its sizes reaches
 * is never written.
 *
 * A block is in a map when its address is 16-aligned and below 2^47, its
 * size at most UR_SIZE_MAP_MAX_SIZE and it has no stack id; every other
 * block is in a shard, and no block is in two places except for the
 * instant a realloc in place moves it between levels or between a map and
 * a shard (its thread is in flight then). Each entry is written with one
 * aligned store of its width. Maps are never freed or moved; pages of a map
 * that hold no entry may be given back to the kernel (they read as zero,
 * unreadable pages as empty too). A reader takes refs [0, count): each ref
 * is written before count is raised past it with a release store.
 */
#define UR_SIZE_MAP_SPAN_SHIFT 20
#define UR_SIZE_MAP_L0_SHIFT 4
#define UR_SIZE_MAP_L1_SHIFT 8
#define UR_SIZE_MAP_L2_SHIFT 12
#define UR_SIZE_MAP_L0_ENTRIES (UINT32_C(1) << (UR_SIZE_MAP_SPAN_SHIFT - UR_SIZE_MAP_L0_SHIFT))
#define UR_SIZE_MAP_L1_ENTRIES (UINT32_C(1) << (UR_SIZE_MAP_SPAN_SHIFT - UR_SIZE_MAP_L1_SHIFT))
#define UR_SIZE_MAP_L2_ENTRIES (UINT32_C(1) << (UR_SIZE_MAP_SPAN_SHIFT - UR_SIZE_MAP_L2_SHIFT))
#define UR_SIZE_MAP_L1_OFFSET (UR_SIZE_MAP_L0_ENTRIES * 1u)
#define UR_SIZE_MAP_L2_OFFSET (UR_SIZE_MAP_L1_OFFSET + UR_SIZE_MAP_L1_ENTRIES * 2u)
#define UR_SIZE_MAP_BYTES (UR_SIZE_MAP_L2_OFFSET + UR_SIZE_MAP_L2_ENTRIES * 4u)
#define UR_SIZE_MAP_L0_MAX_SIZE UINT32_C(248)
#define UR_SIZE_MAP_L1_MAX_SIZE UINT32_C(4088)
#define UR_SIZE_MAP_MAX_SIZE ((UINT32_C(1) << 24) - 1)
/* The most entries a map can hold (a reader's room for one map). */
#define UR_SIZE_MAP_MAX_LIVE (UR_SIZE_MAP_L0_ENTRIES + UR_SIZE_MAP_L1_ENTRIES + UR_SIZE_MAP_L2_ENTRIES)

/* The block of a nonzero entry (index: its place in its level), as the shim
 * and every reader decode it. */
static inline uint64_t ur_size_map_l0_block(uint64_t base, uint32_t index) {
  return base + ((uint64_t)index << UR_SIZE_MAP_L0_SHIFT);
}
static inline uint64_t ur_size_map_l0_size(uint8_t value) { return (uint64_t)value - 1; }
static inline uint64_t ur_size_map_l1_block(uint64_t base, uint32_t index, uint16_t value) {
  return base + ((uint64_t)index << UR_SIZE_MAP_L1_SHIFT) + ((uint64_t)(value >> 12) << 4);
}
static inline uint64_t ur_size_map_l1_size(uint16_t value) { return value & 0xfffu; }
static inline uint64_t ur_size_map_l2_block(uint64_t base, uint32_t index, uint32_t value) {
  return base + ((uint64_t)index << UR_SIZE_MAP_L2_SHIFT) + ((uint64_t)(value >> 24) << 4);
}
static inline uint64_t ur_size_map_l2_size(uint32_t value) { return value & 0xffffffu; }

struct ur_size_map_ref {   /* 16 bytes */
  uint64_t base;           /* the 1 MiB-aligned address the map covers */
  uint64_t map;            /* address of its UR_SIZE_MAP_BYTES (levels 0, 1, 2) */
};

/* The most maps the shim makes (one per 1 MiB of address space blocks
 * begin in: 64 GiB), and the capacity of its list: a list claiming more
 * was forged, and readers refuse it rather than allocate for it. */
#define UR_SIZE_MAP_MAX_REFS (UINT64_C(1) << 16)

struct ur_size_maps {      /* 32 bytes, in shim memory */
  uint64_t refs;           /* address of struct ur_size_map_ref[capacity], 0 before the first map */
  uint64_t capacity;
  uint64_t count;          /* refs [0, count) are complete */
  uint64_t reserved;
};

struct ur_shard {          /* 64 bytes, one cache line */
  uint32_t lock;           /* 0 unlocked, else the holder's tid, | 0x80000000 while others
                              wait (futex); a shard one thread owns is updated without it:
                              diagnostics only. 0 when descriptor.shard_locks holds them */
  uint32_t owner_tid;      /* 0 (the lock word names its holder) */
  uint64_t table;          /* address of struct ur_entry[capacity] */
  uint64_t capacity;       /* power of two, 0 if table not yet allocated */
  uint64_t count;          /* live entries */
  uint64_t tombstones;
  uint64_t reserved[3];
};

struct ur_thread_slot {    /* 64 bytes */
  uint32_t tid;
  uint32_t state;          /* enum ur_thread_state */
  uint32_t op;             /* enum ur_op, written last on entry and on exit */
  uint32_t reserved0;      /* the shim's own (the shard this thread updates unlocked); ignore */
  uint64_t in_ptr;         /* UR_MANGLE'd, 0 if none */
  uint64_t in_size;
  uint64_t out_ptr;        /* UR_MANGLE'd, 0 if none */
  uint64_t out_size;
  uint64_t stack_lo;       /* this thread's stack as pthread_getattr_np saw it; 0 if unknown */
  uint64_t stack_hi;       /* (main thread: 0, its stack is the [stack] mapping) */
};

/*
 * Deduplicated backtraces, kept in segments made as stacks are interned, so
 * the table takes address space as it fills (a program that lowers
 * RLIMIT_AS after its start still has it). Segment 0 holds ids
 * [0, 2^UR_STACK_SEGMENT0_SHIFT) (id 0 is reserved); segment k >= 1 holds
 * [2^(SHIFT+k-1), 2^(SHIFT+k)), as many as all before it
 * (ur_stack_segment, ur_stack_segment_base). frames[k] and frame_counts[k]
 * are segment k's arrays, 0 until it is made: stack id N of segment k has
 * its num_frames at counts_k[N - base_k] and its pcs at
 * frames_k[(N - base_k) * max_frames ...]. A segment's addresses are
 * stored before any of its ids is published; ids are published with a
 * release store of `count` after their frames are written, so ids < count
 * are complete.
 */
#define UR_STACK_SEGMENT0_SHIFT 12u
#define UR_STACK_SEGMENTS 21u /* segments 0..20 cover every 32-bit id */

struct ur_stack_table {
  uint64_t frames;         /* address of uint64_t[UR_STACK_SEGMENTS]: each segment's
                              uint64_t[ids * max_frames] */
  uint64_t frame_counts;   /* address of uint64_t[UR_STACK_SEGMENTS]: each segment's uint16_t[ids] */
  uint32_t capacity;       /* max number of distinct stacks; id 0 is reserved */
  uint32_t max_frames;     /* frames per stack (backtrace=N) */
  uint32_t count;          /* next id to hand out; ids [1, count) are valid */
  uint32_t overflowed;     /* allocations whose stack could not be stored: the table full,
                              or no segment could be added */
};

/* The segment holding stack id `id`, and the first id of segment k. */
static inline uint32_t ur_stack_segment(uint32_t id) {
  return id >> UR_STACK_SEGMENT0_SHIFT
             ? (uint32_t)(32 - __builtin_clz(id)) - UR_STACK_SEGMENT0_SHIFT
             : 0;
}

static inline uint32_t ur_stack_segment_base(uint32_t k) {
  return k ? UINT32_C(1) << (k + UR_STACK_SEGMENT0_SHIFT - 1) : 0;
}

/* How many ids segment k holds. */
static inline uint32_t ur_stack_segment_ids(uint32_t k) {
  return k ? ur_stack_segment_base(k) : UINT32_C(1) << UR_STACK_SEGMENT0_SHIFT;
}

/* The in-child sweep's mailbox (see the top of this file). */
#define UR_CHILD_GO UINT32_C(0x50455753) /* "SWEP" */

enum ur_child_state {
  UR_CHILD_BUSY = 0,
  UR_CHILD_INDEXED = 1,
  UR_CHILD_REPLIED = 2,
  UR_CHILD_FAILED = 3,
};

enum ur_child_request {
  UR_CHILD_REQ_NONE = 0,
  UR_CHILD_REQ_HOLDS = 1,
  UR_CHILD_REQ_SWEEP = 2,
  UR_CHILD_REQ_EXIT = 3,
  UR_CHILD_REQ_BLOCKS = 4,
};

struct ur_child_box {      /* 80 bytes, in shim memory */
  uint32_t go;             /* scanner, in the child at its birth stop: UR_CHILD_GO */
  uint32_t state;          /* child: enum ur_child_state */
  uint32_t request;        /* scanner: enum ur_child_request */
  int32_t error;           /* child: -errno of a failed step, else 0 */
  uint64_t in;             /* child: inbox address */
  uint64_t in_cap;         /* child: inbox capacity in bytes */
  uint64_t in_len;         /* scanner: bytes of the request in the inbox */
  uint64_t out;            /* child: reply address */
  uint64_t out_len;        /* child: reply length */
  uint64_t reserved[3];
};

struct ur_child_index {    /* reply to the index step */
  uint64_t entries;          /* live registry entries read */
  uint64_t allocation_count; /* distinct block addresses */
  uint64_t allocation_bytes; /* their requested sizes */
  uint64_t overlapping;      /* blocks dropped for overlapping another */
  uint64_t index_ns;
  uint64_t features;         /* UR_CHILD_FEATURE_* this child understands (0: older shim) */
  uint64_t reserved[2];
};
#define UR_CHILD_FEATURE_TEAM UINT64_C(1)      /* struct ur_child_sweep_opts */
#define UR_CHILD_FEATURE_TEAM_SIZE UINT64_C(2) /* the sweep reply ends with the team's size */
#define UR_CHILD_FEATURE_BLOCKS UINT64_C(4)    /* UR_CHILD_REQ_BLOCKS */
/* The sweep reply's leak records count each unreachable block once (under
 * one leak's referenced_*); a child without it counts a block under every
 * leak that reaches it, and the scanner sweeps such a child from outside. */
#define UR_CHILD_FEATURE_OWNED UINT64_C(8)

struct ur_child_sweep_req {
  uint64_t nranges, nvalues, nexcluded, nreadable;
};

/* Optional, after the words of a sweep request; only to a child whose index
 * reply set UR_CHILD_FEATURE_TEAM (an older one refuses the longer request). */
struct ur_child_sweep_opts {
  uint64_t threads;           /* marking threads, 1 to UR_CHILD_MAX_THREADS */
  uint64_t reserved[3];
};
#define UR_CHILD_MAX_THREADS 16u

struct ur_child_sweep_reply {
  uint64_t unreachable_count; /* in-flight (excluded) blocks left out */
  uint64_t unreachable_bytes;
  uint64_t bytes_scanned;
  uint64_t pages_skipped;
  uint64_t mark_ns, fold_ns;
  uint64_t nleaks;
  uint64_t bounced_pages;     /* pages read through /proc/self/mem (not listed readable) */
};

/* One reported leak: a member of a dominating component of the unreachable
 * graph (also _native.sweep()["leaks"]). referenced_*: the unreachable
 * blocks counted under this leak and no other (native/mark/leak_folding.h). */
struct ur_leak_record {
  uint64_t begin;
  uint64_t size;
  uint64_t referenced_count;
  uint64_t referenced_size;
  uint32_t stack_id;
  uint32_t reserved;
};

/* Rows of the arrays the scanner hands the mark: _native.sweep's allocs,
 * root_ranges and layout, and the child's HOLDS, BLOCKS and SWEEP requests
 * above. Each array is its rows packed back to back; native/mark reads them
 * as uint64_t words (2 or 3 a row). */
struct ur_range {          /* 16 bytes: [begin, end) */
  uint64_t begin, end;
};
struct ur_block {          /* 16 bytes: a registered block, as in a registry's allocs */
  uint64_t begin, size;
};
struct ur_layout_span {    /* 24 bytes: a readable mapping of the process, sorted */
  uint64_t begin, end;
  uint64_t demand_zero;    /* 1: its absent pages are zeros, not read */
};

/*
 * The leak report the shim's libmemunreachable interface reads
 * (native/shim/memunreachable*.c), written by the CLI for it:
 * `unreachable-cli scan --format lmu-records PID` writes to stdout
 *
 *   struct ur_lmu_header
 *   header.entries x struct ur_lmu_leak      (largest total_size first)
 *   header.text_length bytes: the text report, exactly as --format text
 *                             prints it (UTF-8, no NUL)
 *
 * and nothing after, in this machine's byte order: the reader is the scanned
 * process itself. A reader takes the stream whole or not at all: wrong
 * magic, version or leak_size, or a length other than the header announces,
 * is no report. struct ur_lmu_leak is memunreachable.h's struct
 * unreachable_lmu_leak field for field (memunreachable_read.c checks it), so
 * the entries are handed to the caller where they lie.
 */
#define UR_LMU_MAGIC UINT64_C(0x31434552554d4c55) /* "ULMUREC1" little endian */
#define UR_LMU_VERSION 1u
#define UR_LMU_CONTENTS_BYTES 32u
#define UR_LMU_MAX_FRAMES 16u /* libmemunreachable's Leak::Backtrace::max_frames */

struct ur_lmu_header {     /* 64 bytes */
  uint64_t magic;
  uint32_t version;
  uint32_t leak_size;      /* sizeof(struct ur_lmu_leak) */
  uint64_t leak_count;     /* every unreachable allocation */
  uint64_t leak_bytes;
  uint64_t allocation_count;
  uint64_t allocation_bytes;
  uint64_t entries;        /* reported leaks: folded, at most --limit */
  uint64_t text_length;
};

struct ur_lmu_leak {       /* 240 bytes */
  uint64_t begin;
  uint64_t size;
  uint64_t referenced_count;
  uint64_t referenced_size;
  uint64_t similar_count;
  uint64_t similar_size;
  uint64_t similar_referenced_count;
  uint64_t similar_referenced_size;
  uint64_t total_size;
  uint32_t contents_length; /* bytes valid in contents (0 without --contents) */
  uint32_t num_frames;      /* at most UR_LMU_MAX_FRAMES */
  unsigned char contents[UR_LMU_CONTENTS_BYTES];
  uint64_t frames[UR_LMU_MAX_FRAMES]; /* absolute pcs, innermost first */
};

#ifdef __cplusplus
static_assert(sizeof(struct ur_lmu_header) == 64, "abi");
static_assert(sizeof(struct ur_lmu_leak) == 240, "abi");
#else
_Static_assert(sizeof(struct ur_lmu_header) == 64, "abi");
_Static_assert(sizeof(struct ur_lmu_leak) == 240, "abi");
#endif

/*
 * The alternate signal stacks threads set with sigaltstack(): the kernel
 * holds their address, and a program may keep none of its own (the block
 * would look leaked). One entry per thread that set one, by tid; sp is 0
 * when it was disabled. An entry whose tid is no thread of the process is
 * stale (its thread exited).
 */
struct ur_altstack {
  uint32_t tid;            /* 0: free */
  uint32_t reserved;
  uint64_t sp;             /* ss_sp as set, 0 if disabled */
  uint64_t size;
};

/*
 * The objects the dynamic loader has loaded (descriptor.modules), kept after
 * they are dlclose'd so frames in them still find their file. Recorded when
 * a new backtrace is stored after the loader's dlpi_adds/dlpi_subs counters
 * moved: every pc of a stored backtrace lies in an object recorded by then.
 * Entries are appended, never changed or removed; `count` is published with
 * a release store after the entry (and its path) is written. The main program
 * and objects without a file path (the vDSO) are not recorded.
 */
struct ur_module {         /* 72 bytes */
  uint64_t bias;           /* dlpi_addr: a pc's ELF virtual address is pc - bias */
  uint64_t start, end;     /* the lowest and highest PT_LOAD byte + 1, bias applied */
  uint32_t path;           /* offset of the NUL-terminated absolute path in strings */
  uint32_t path_len;
  uint32_t build_id_len;   /* 0: the object has no NT_GNU_BUILD_ID note */
  uint32_t reserved;
  uint8_t build_id[32];
};

struct ur_module_table {   /* 32 bytes, in shim memory */
  uint64_t modules;        /* address of struct ur_module[capacity] */
  uint64_t strings;        /* address of char[strings_size] */
  uint32_t capacity;
  uint32_t count;          /* entries [0, count) are complete */
  uint32_t strings_size;
  uint32_t lost;           /* objects not recorded: the table or its strings were full */
};

/*
 * The shim's memory: pieces of address space it reserves as it needs them
 * (a few MiB at start, more as the registry grows), so that it fits under
 * any address-space limit the program itself fits under. Every byte the
 * shim maps lies in one of them; none is ever a root. Spans [0, count) are
 * complete: each is written before the count is raised past it with a
 * release store. A piece is never unmapped.
 */
struct ur_region_span {    /* 16 bytes */
  uint64_t begin, end;
};
#define UR_MAX_REGIONS 4096u

/* ur_descriptor.disabled: why enabled stayed 0 (disabled_errno: the errno
 * of the failed call, 0 if none). */
enum ur_disabled {
  UR_DISABLED_NONE = 0,       /* enabled, or not initialised yet */
  UR_DISABLED_OPTIONS = 1,    /* UNREACHABLE_MALLOC_OPTIONS rejected (details on stderr) */
  UR_DISABLED_NO_MEMORY = 2,  /* no address space or memory for the registry at start */
  UR_DISABLED_OTHER_MALLOC = 3, /* the program's malloc is another object's, found before ours */
};

/* ur_descriptor.no_helper: why the shim starts no helper thread in this
 * process (its scans are swept stopped). */
enum ur_no_helper {
  UR_NO_HELPER_NONE = 0,       /* one runs, or will (or a shim too old to say) */
  UR_NO_HELPER_OWN_FILTER = 1, /* under a seccomp filter the program installed */
  UR_NO_HELPER_RAW_CLONE = 2,  /* made by a raw clone(), past glibc's fork() */
};

struct ur_descriptor {
  uint64_t magic;          /* UR_ABI_MAGIC */
  uint32_t version;        /* UR_ABI_VERSION */
  uint32_t size;           /* sizeof(struct ur_descriptor) */
  uint32_t enabled;        /* 1 once the registry is initialised and options were valid */
  uint32_t num_shards;
  uint64_t shards;         /* address of struct ur_shard[num_shards] */
  uint64_t threads;        /* address of struct ur_thread_slot[max_threads] */
  uint32_t max_threads;
  uint32_t helper_tid;     /* snapshot helper thread tid, 0 if none is running */
  uint64_t helper_cmd;     /* address of the uint32_t command word (enum ur_helper_cmd) */
  uint64_t stacks;         /* address of struct ur_stack_table */
  uint64_t region_begin;   /* the first of the regions below (never a root) */
  uint64_t region_end;
  uint64_t options;        /* address of the NUL-terminated option string in effect */
  uint64_t pid;            /* getpid() of the process that owns this registry (reset on fork) */
  uint64_t child_box;      /* address of struct ur_child_box, 0: no in-child sweep */
  uint64_t write_tracker;  /* address of struct ur_write_tracker, 0: no copy snapshots */
  uint64_t altstacks;      /* address of struct ur_altstack[num_altstacks], 0: none kept */
  uint64_t num_altstacks;
  uint64_t size_maps;      /* address of struct ur_size_maps (abi v3) */
  uint64_t modules;        /* address of struct ur_module_table, 0: none (no backtraces) */
  uint64_t regions;        /* address of struct ur_region_span[UR_MAX_REGIONS] (abi v4) */
  uint64_t num_regions;    /* spans [0, num_regions) are complete (region_begin/end: the first) */
  uint32_t disabled;       /* enum ur_disabled */
  int32_t disabled_errno;
  uint64_t unregistered;   /* blocks left out of the registry: no memory to hold them */
  uint64_t helper_frames;  /* the helper's stack below this holds its frames, the shim's values
                              only: no root, nor are its registers; 0: take its whole stack */
  uint64_t shard_locks;    /* address of uint32_t[num_shards], the shards' lock words (each
                              shard's own lock field then stays 0); 0: in each shard. On a
                              page a forked child does not inherit: zero there */
  uint32_t no_helper;      /* enum ur_no_helper */
  uint32_t reserved;
};

#ifdef __cplusplus
static_assert(sizeof(struct ur_entry) == 16, "abi");
static_assert(sizeof(struct ur_shard) == 64, "abi");
static_assert(sizeof(struct ur_thread_slot) == 64, "abi");
static_assert(sizeof(struct ur_range) == 16, "abi");
static_assert(sizeof(struct ur_block) == 16, "abi");
static_assert(sizeof(struct ur_layout_span) == 24, "abi");
#else
_Static_assert(sizeof(struct ur_entry) == 16, "abi");
_Static_assert(sizeof(struct ur_shard) == 64, "abi");
_Static_assert(sizeof(struct ur_thread_slot) == 64, "abi");
_Static_assert(sizeof(struct ur_range) == 16, "abi");
_Static_assert(sizeof(struct ur_block) == 16, "abi");
_Static_assert(sizeof(struct ur_layout_span) == 24, "abi");
_Static_assert(sizeof(struct ur_stack_table) == 32, "abi");
_Static_assert(sizeof(struct ur_descriptor) == 200, "abi");
_Static_assert(sizeof(struct ur_region_span) == 16, "abi");
_Static_assert(sizeof(struct ur_child_box) == 80, "abi");
_Static_assert(sizeof(struct ur_leak_record) == 40, "abi");
_Static_assert(sizeof(struct ur_write_tracker) == 32, "abi");
_Static_assert(sizeof(struct ur_size_maps) == 32, "abi");
_Static_assert(sizeof(struct ur_size_map_ref) == 16, "abi");
_Static_assert(sizeof(struct ur_module) == 72, "abi");
_Static_assert(sizeof(struct ur_module_table) == 32, "abi");
#endif

#endif
