/*
 * libmemunreachable's C and C++ interface, served by libunreachable_shim.so.
 *
 * A program started with LD_PRELOAD=libunreachable_shim.so can ask from
 * inside itself what it has leaked, with the same calls libmemunreachable
 * offers, and gets the report `unreachable-cli scan PID` would print:
 *
 *   C:   bool LogUnreachableMemory(bool log_contents, size_t limit);
 *        bool NoLeaks(void);
 *   C++: bool android::GetUnreachableMemory(UnreachableMemoryInfo& info, size_t limit = 100);
 *        std::string android::GetUnreachableMemoryString(bool log_contents = false,
 *                                                        size_t limit = 100);
 *
 * Each call starts the scanner as a child process (no daemon), lets it trace
 * this process (PR_SET_PTRACER), and waits for its report over a pipe; see
 * docs/memunreachable.md. Every failure returns false and writes one line
 * starting with "libmemunreachable: " to stderr.
 *
 * Nothing needs to be linked: the functions are declared weak, so a program
 * links without the shim and resolves them at run time from the preloaded
 * shim. Without the shim, the C functions' addresses are NULL (test
 * `if (NoLeaks)` before calling); the C++ functions check for you and return
 * false. Define UNREACHABLE_MEMUNREACHABLE_STRONG to declare them as ordinary
 * (strong) symbols, e.g. when linking against the shim directly.
 */
#ifndef UNREACHABLE_MEMUNREACHABLE_H
#define UNREACHABLE_MEMUNREACHABLE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#if defined(UNREACHABLE_MEMUNREACHABLE_STRONG)
#define UNREACHABLE_LMU_API
#else
#define UNREACHABLE_LMU_API __attribute__((weak))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- libmemunreachable's C interface ---------------------------------- */

/* Write the text report (a summary, then up to `limit` leaks, with up to 32
 * bytes of each leak's contents if log_contents) to stderr, one
 * "libmemunreachable: " prefixed line per report line. True if the scan
 * succeeded, whether or not it found leaks. */
UNREACHABLE_LMU_API bool LogUnreachableMemory(bool log_contents, size_t limit);

/* True only if the scan succeeded and found no unreachable memory. */
UNREACHABLE_LMU_API bool NoLeaks(void);

/* ---- The entry point the C++ interface is built on ---------------------- */

#define UNREACHABLE_LMU_CONTENTS_BYTES 32
#define UNREACHABLE_LMU_MAX_FRAMES 16

/* unreachable_lmu_scan flags */
#define UNREACHABLE_LMU_CONTENTS 1u /* read each reported leak's first 32 bytes;
                                       the text report shows them too */

struct unreachable_lmu_leak {
  uint64_t begin;
  uint64_t size;
  uint64_t referenced_count;
  uint64_t referenced_size;
  uint64_t similar_count;
  uint64_t similar_size;
  uint64_t similar_referenced_count;
  uint64_t similar_referenced_size;
  uint64_t total_size;
  uint32_t contents_length; /* bytes valid in contents (0 without the flag) */
  uint32_t num_frames;      /* at most UNREACHABLE_LMU_MAX_FRAMES */
  unsigned char contents[UNREACHABLE_LMU_CONTENTS_BYTES];
  uint64_t frames[UNREACHABLE_LMU_MAX_FRAMES]; /* absolute pcs, innermost first */
};

struct unreachable_lmu_result {
  uint64_t num_leaks;        /* every unreachable allocation */
  uint64_t leak_bytes;
  uint64_t num_allocations;  /* every live allocation */
  uint64_t allocation_bytes;
  uint64_t num_entries;      /* reported leaks (folded, deduplicated, <= limit) */
  struct unreachable_lmu_leak *entries;
  const char *text;          /* the CLI's text report, NUL-terminated */
  uint64_t text_length;
  char error[512];           /* on failure: why, NUL-terminated (also logged) */
  void *priv_[4];            /* owned by the shim; released by unreachable_lmu_release */
};

/* Run one scan of the calling process. On success fills *result and returns
 * true; the caller must then call unreachable_lmu_release(result). On failure
 * returns false, logs result->error and leaves nothing to release. The result
 * memory is mmap'ed, never malloc'ed. Calls are serialised within a process. */
UNREACHABLE_LMU_API bool unreachable_lmu_scan(unsigned flags, size_t limit,
                                              struct unreachable_lmu_result *result);
UNREACHABLE_LMU_API void unreachable_lmu_release(struct unreachable_lmu_result *result);

#ifdef __cplusplus
} /* extern "C" */

/* ---- libmemunreachable's C++ interface (header-only) ------------------- */

#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>

namespace android {

struct Leak {
  uintptr_t begin = 0;
  size_t size = 0;

  size_t referenced_count = 0;
  size_t referenced_size = 0;

  size_t similar_count = 0;
  size_t similar_size = 0;
  size_t similar_referenced_count = 0;
  size_t similar_referenced_size = 0;

  size_t total_size = 0;

  static const size_t contents_length = UNREACHABLE_LMU_CONTENTS_BYTES;
  char contents[contents_length] = {};

  struct Backtrace {
    size_t num_frames = 0;

    static const size_t max_frames = UNREACHABLE_LMU_MAX_FRAMES;
    uintptr_t frames[max_frames] = {};

    size_t reserved[8] = {};
  } backtrace;

  size_t reserved[8] = {};
};

struct UnreachableMemoryInfo {
  std::vector<Leak> leaks;
  size_t num_leaks = 0;
  size_t leak_bytes = 0;
  size_t num_allocations = 0;
  size_t allocation_bytes = 0;

  size_t version = 0;  // Must be 0.
  size_t reserved[8] = {};

  UnreachableMemoryInfo() {}
  UnreachableMemoryInfo(const UnreachableMemoryInfo&) = default;
  UnreachableMemoryInfo& operator=(const UnreachableMemoryInfo&) = default;
  ~UnreachableMemoryInfo() { unreachable_forget_leaks_(); }

  // Leak::begin holds the address of each leak: a stale copy of it left in
  // memory would make that leak reachable for the next scan. Zero the
  // entries and give their buffer back (libmemunreachable does the same).
  void unreachable_forget_leaks_() {
    if (!leaks.empty()) {
      volatile unsigned char* p = reinterpret_cast<volatile unsigned char*>(leaks.data());
      for (size_t i = 0; i < leaks.size() * sizeof(Leak); i++) p[i] = 0;
    }
    std::vector<Leak>().swap(leaks);
  }
};

namespace unreachable_detail {

inline void log_line(const char* what) {
  fprintf(stderr, "libmemunreachable: %s\n", what);
}

inline bool shim_present() {
#if defined(UNREACHABLE_MEMUNREACHABLE_STRONG)
  return true;
#else
  if (&::unreachable_lmu_scan != nullptr && &::unreachable_lmu_release != nullptr) return true;
  log_line("libunreachable_shim.so is not loaded (start the program with "
           "LD_PRELOAD=$(unreachable-cli shim-path))");
  return false;
#endif
}

}  // namespace unreachable_detail

inline bool GetUnreachableMemory(UnreachableMemoryInfo& info, size_t limit = 100) {
  if (info.version > 0) {
    char msg[96];
    snprintf(msg, sizeof msg, "unsupported UnreachableMemoryInfo version %zu", info.version);
    unreachable_detail::log_line(msg);
    return false;
  }
  info.unreachable_forget_leaks_();
  info.num_leaks = info.leak_bytes = info.num_allocations = info.allocation_bytes = 0;
  if (!unreachable_detail::shim_present()) return false;

  unreachable_lmu_result result;
  memset(&result, 0, sizeof result);
  if (!::unreachable_lmu_scan(UNREACHABLE_LMU_CONTENTS, limit, &result)) return false;

  info.num_leaks = static_cast<size_t>(result.num_leaks);
  info.leak_bytes = static_cast<size_t>(result.leak_bytes);
  info.num_allocations = static_cast<size_t>(result.num_allocations);
  info.allocation_bytes = static_cast<size_t>(result.allocation_bytes);
  info.leaks.resize(static_cast<size_t>(result.num_entries));
  for (size_t i = 0; i < info.leaks.size(); i++) {
    const unreachable_lmu_leak& in = result.entries[i];
    Leak& out = info.leaks[i];
    out.begin = static_cast<uintptr_t>(in.begin);
    out.size = static_cast<size_t>(in.size);
    out.referenced_count = static_cast<size_t>(in.referenced_count);
    out.referenced_size = static_cast<size_t>(in.referenced_size);
    out.similar_count = static_cast<size_t>(in.similar_count);
    out.similar_size = static_cast<size_t>(in.similar_size);
    out.similar_referenced_count = static_cast<size_t>(in.similar_referenced_count);
    out.similar_referenced_size = static_cast<size_t>(in.similar_referenced_size);
    out.total_size = static_cast<size_t>(in.total_size);
    // The macros, not Leak's static members: those have no out-of-class
    // definition, so binding them to a reference would not link at -O0.
    size_t n = in.contents_length < UNREACHABLE_LMU_CONTENTS_BYTES ? in.contents_length
                                                                   : UNREACHABLE_LMU_CONTENTS_BYTES;
    memcpy(out.contents, in.contents, n);
    out.backtrace.num_frames = in.num_frames < UNREACHABLE_LMU_MAX_FRAMES
                                   ? in.num_frames
                                   : UNREACHABLE_LMU_MAX_FRAMES;
    for (size_t f = 0; f < out.backtrace.num_frames; f++)
      out.backtrace.frames[f] = static_cast<uintptr_t>(in.frames[f]);
  }
  ::unreachable_lmu_release(&result);
  return true;
}

inline std::string GetUnreachableMemoryString(bool log_contents = false, size_t limit = 100) {
  static const char failed[] = "Failed to get unreachable memory\n";
  if (!unreachable_detail::shim_present()) return failed;
  unreachable_lmu_result result;
  memset(&result, 0, sizeof result);
  if (!::unreachable_lmu_scan(log_contents ? UNREACHABLE_LMU_CONTENTS : 0u, limit, &result)) {
    return std::string(failed) + result.error + "\n";
  }
  std::string text(result.text, static_cast<size_t>(result.text_length));
  ::unreachable_lmu_release(&result);
  return text;
}

}  // namespace android

#ifndef UNREACHABLE_NO_GLOBAL_NAMES
using android::GetUnreachableMemory;
using android::GetUnreachableMemoryString;
using android::Leak;
using android::UnreachableMemoryInfo;
#endif

#endif /* __cplusplus */

#endif /* UNREACHABLE_MEMUNREACHABLE_H */
