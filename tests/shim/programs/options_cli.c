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
  printf("ok backtrace=%d on_signal=%d frames=%zu min=%zu max=%zu verbose=%d", o.backtrace,
         o.backtrace_enable_on_signal, o.backtrace_frames, o.backtrace_min_size,
         o.backtrace_max_size, o.verbose);
  printf(" front=%zu rear=%zu fill_alloc=%zu fill_free=%zu expand=%zu free_track=%zu ft_frames=%zu"
         " record=%zu dump_on_exit=%d full=%d leak_track=%d record_on_exit=%d verify=%d"
         " abort=%d unreachable=%d stats_signal=%d stats_exit=%d prefix=%s record_file=%s",
         o.front_guard_bytes, o.rear_guard_bytes, o.fill_on_alloc_bytes, o.fill_on_free_bytes,
         o.expand_alloc_bytes, o.free_track_allocations, o.free_track_backtrace_num_frames,
         o.record_allocs, o.backtrace_dump_on_exit, o.backtrace_full, o.leak_track,
         o.record_allocs_on_exit, o.verify_pointers, o.abort_on_error,
         o.check_unreachable_on_signal, o.log_allocator_stats_on_signal,
         o.log_allocator_stats_on_exit, o.backtrace_dump_prefix, o.record_allocs_file);
  printf(" leak_check=%d leak_exitcode=%zu", o.leak_check_at_exit, o.leak_check_exitcode);
  printf(" unimplemented=");
  for (unsigned i = 0; i < o.num_unimplemented; i++)
    printf("%s%s", i ? "," : "", ur_options_name(o.unimplemented[i]));
  printf("\n");
  return 0;
}
