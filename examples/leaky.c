/* A small service that leaks: the demo target of scripts/demo-scan.sh.
 * It keeps a cache (reachable) and forgets a request buffer now and then
 * (unreachable), then idles until killed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct entry {
  struct entry *next;
  char key[24];
};

static struct entry *cache;

static void remember(const char *key) {
  struct entry *e = calloc(1, sizeof *e);
  strncpy(e->key, key, sizeof e->key - 1);
  e->next = cache;
  cache = e;
}

static size_t handled;

static void handle_request(int i) {
  char *buf = malloc(128 + (size_t)i);
  snprintf(buf, 128, "request %d", i);
  if (i % 3 == 0) return; /* the bug: an early return forgets to free */
  handled += strlen(buf);
  free(buf);
}

int main(void) {
  for (int i = 0; i < 10; i++) {
    remember("some-key");
    handle_request(i);
  }
  for (;;) pause();
}
