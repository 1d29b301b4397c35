/* Drives the option parser directly (built with ASan/UBSan): prints either
 * the parsed result or the error message, one per line. */
#include <stdio.h>

#include "options.h"

static void print_msg(void *ctx, const char *msg) {
  (void)ctx;
  printf("error: %s\n", msg);
}

int main(int argc, char **argv) {
  struct ur_options o;
  if (argc != 2) return 2;
  if (!ur_options_parse(argv[1], &o, "prog", print_msg, NULL)) return 1;
  printf("ok backtrace=%d on_signal=%d frames=%zu min=%zu max=%zu verbose=%d unimplemented=",
         o.backtrace, o.backtrace_enable_on_signal, o.backtrace_frames, o.backtrace_min_size,
         o.backtrace_max_size, o.verbose);
  for (unsigned i = 0; i < o.num_unimplemented; i++)
    printf("%s%s", i ? "," : "", ur_options_name(o.unimplemented[i]));
  printf("\n");
  return 0;
}
