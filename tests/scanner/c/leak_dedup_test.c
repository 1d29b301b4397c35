/* leak_dedup.c under ASan+UBSan (tests/scanner/test_leak_dedup_c.py): random
 * leak sets that grow the backtrace table many times and replace the kept
 * heap's root often; every answer is checked against the input. The exact
 * answers are checked against a Python model in tests/fold/test_dedup.py. */

#include "leak_dedup.h"
#include "unit_test.h"

/* n leaks at rising addresses, stack ids from [0, stacks] (0: none). */
static struct ur_leak_record *make(size_t n, uint32_t stacks) {
  struct ur_leak_record *r = calloc(n ? n : 1, sizeof(*r));
  CHECK(r);
  uint64_t addr = 0x10000;
  for (size_t i = 0; i < n; i++) {
    addr += 16 * (1 + test_random() % 64);
    r[i] = (struct ur_leak_record){.begin = addr,
                                   .size = 1 + test_random() % 100,
                                   .referenced_count = test_random() % 3,
                                   .referenced_size = test_random() % 50,
                                   .stack_id = (uint32_t)(test_random() % (stacks + 1))};
  }
  return r;
}

static void check(size_t n, uint32_t stacks, size_t limit) {
  struct ur_leak_record *in = make(n, stacks);
  struct ur_dedup_leak *out;
  ssize_t got = ur_leak_dedup(in, n, limit, &out);
  CHECK(got >= 0 && (size_t)got <= limit && (size_t)got <= n);
  uint64_t in_total = 0, out_total = 0;
  for (size_t i = 0; i < n; i++) in_total += in[i].size + in[i].referenced_size;
  for (ssize_t k = 0; k < got; k++) {
    const struct ur_dedup_leak *e = &out[k];
    out_total += ur_dedup_total(e);
    if (k) {
      uint64_t a = ur_dedup_total(&out[k - 1]), b = ur_dedup_total(e);
      CHECK(a > b || (a == b && out[k - 1].begin < e->begin));
    }
    /* The entry is an input leak: the first of its backtrace, whose
     * similar fields sum the rest. */
    size_t i = 0;
    while (i < n && in[i].begin != e->begin) i++;
    CHECK(i < n && in[i].size == e->size && in[i].stack_id == e->stack_id);
    uint64_t count = 0, size = 0;
    for (size_t j = 0; j < n && e->stack_id; j++)
      if (in[j].stack_id == e->stack_id) {
        CHECK(j >= i);
        if (j > i) count++, size += in[j].size;
      }
    CHECK(e->similar_count == count && e->similar_size == size);
  }
  /* With room for every entry, nothing is lost. */
  if (limit >= n) CHECK(out_total == in_total);
  free(out);
  free(in);
}

int main(void) {
  struct ur_dedup_leak *out = (void *)1;
  CHECK(ur_leak_dedup(NULL, 0, 10, &out) == 0 && out == NULL);
  for (int round = 0; round < 20; round++) {
    check(1 + test_random() % 3000, 0, 1 + test_random() % 50);            /* no backtraces */
    check(1 + test_random() % 3000, 1 + test_random() % 1000, 1 + test_random() % 50); /* many tables grown */
    check(1 + test_random() % 3000, 3, 5000);                        /* all kept */
    check(1 + test_random() % 300, 2000, 1);                        /* one kept */
  }
  printf("ok leak_dedup\n");
  return 0;
}
