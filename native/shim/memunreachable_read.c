/*
 * The scanner's report for the libmemunreachable interface: abi.h's ur_lmu
 * stream (a header, the entries as fixed records, the text report's bytes),
 * written by `unreachable-cli scan --format lmu-records`. Nothing is parsed
 * as text: the records are checked and handed to the caller where they lie.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "memunreachable_read.h"
#include "unreachable/abi.h"

/* The stream's records are the public struct, byte for byte. */
#define SAME(f)                                                                             \
  _Static_assert(offsetof(struct ur_lmu_leak, f) == offsetof(struct unreachable_lmu_leak, f) && \
                     sizeof(((struct ur_lmu_leak *)0)->f) ==                                \
                         sizeof(((struct unreachable_lmu_leak *)0)->f),                     \
                 "ur_lmu_leak." #f)
SAME(begin);
SAME(size);
SAME(referenced_count);
SAME(referenced_size);
SAME(similar_count);
SAME(similar_size);
SAME(similar_referenced_count);
SAME(similar_referenced_size);
SAME(total_size);
SAME(contents_length);
SAME(num_frames);
SAME(contents);
SAME(frames);
_Static_assert(sizeof(struct ur_lmu_leak) == sizeof(struct unreachable_lmu_leak), "ur_lmu_leak");
_Static_assert(UR_LMU_MAX_FRAMES == UNREACHABLE_LMU_MAX_FRAMES, "frames");
_Static_assert(UR_LMU_CONTENTS_BYTES == UNREACHABLE_LMU_CONTENTS_BYTES, "contents");

int lmu_read_report(struct lmu_output *out, struct unreachable_lmu_result *r) {
  struct ur_lmu_header h;
  if (out->len < sizeof h) return -1;
  memcpy(&h, out->data, sizeof h);
  if (h.magic != UR_LMU_MAGIC || h.version != UR_LMU_VERSION ||
      h.leak_size != sizeof(struct ur_lmu_leak))
    return -1;
  /* Exactly what the header announces: no entry count or text length can
   * make the reader look past what was written. */
  size_t body = out->len - sizeof h;
  if (h.entries > body / sizeof(struct ur_lmu_leak)) return -1;
  size_t records = (size_t)h.entries * sizeof(struct ur_lmu_leak);
  if (h.text_length != body - records) return -1;
  if (out->len >= out->cap) return -1; /* no room for the text's NUL */
  struct unreachable_lmu_leak *entries =
      (struct unreachable_lmu_leak *)(void *)(out->data + sizeof h);
  for (uint64_t i = 0; i < h.entries; i++)
    if (entries[i].num_frames > UR_LMU_MAX_FRAMES ||
        entries[i].contents_length > UR_LMU_CONTENTS_BYTES)
      return -1;
  char *text = out->data + sizeof h + records;
  text[h.text_length] = '\0';
  r->num_leaks = h.leak_count;
  r->leak_bytes = h.leak_bytes;
  r->num_allocations = h.allocation_count;
  r->allocation_bytes = h.allocation_bytes;
  r->num_entries = h.entries;
  r->entries = entries;
  r->text = text;
  r->text_length = h.text_length;
  r->priv_[0] = out->data;
  r->priv_[1] = (void *)(uintptr_t)out->cap;
  out->data = NULL;
  out->len = out->cap = 0;
  return 0;
}
