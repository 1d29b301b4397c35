#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum value_kind {
  VAL_NONE,     /* flag: a value is an error */
  VAL_OPTIONAL, /* number, default when absent */
  VAL_REQUIRED, /* number, must be given */
  VAL_STRING,   /* any text, or the default */
};

struct option_def {
  const char *name;
  const char *alias;
  enum value_kind kind;
  size_t def, min, max;
  /* NULL: accepted and validated, but not implemented yet. str is the text
   * value for VAL_STRING options ("" when absent). */
  void (*apply)(struct ur_options *o, size_t value, const char *str);
};

static void set_backtrace(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->backtrace = true;
  o->backtrace_frames = v;
}
static void set_bt_on_signal(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->backtrace_enable_on_signal = true;
  o->backtrace_frames = v;
}
static void set_bt_size(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->backtrace_min_size = o->backtrace_max_size = v;
}
static void set_bt_min_size(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->backtrace_min_size = v;
}
static void set_bt_max_size(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->backtrace_max_size = v;
}

/* The front guard is padded so the pointer returned stays 16-byte aligned
 * (bionic: __BIONIC_ALIGN(bytes, MINIMUM_ALIGNMENT_BYTES)). */
static size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }
static void set_guard(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->front_guard_bytes = align16(v);
  o->rear_guard_bytes = v;
}
static void set_front_guard(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->front_guard_bytes = align16(v);
}
static void set_rear_guard(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->rear_guard_bytes = v;
}
static void set_fill(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->fill_on_alloc_bytes = o->fill_on_free_bytes = v;
}
static void set_fill_on_alloc(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->fill_on_alloc_bytes = v;
}
static void set_fill_on_free(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->fill_on_free_bytes = v;
}
static void set_expand_alloc(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->expand_alloc_bytes = v;
}
/* Config::SetFreeTrack: also turns on fill_on_free (whole allocation) and a
 * 16-frame free backtrace, unless those were given before. */
static void set_free_track(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->free_track_allocations = v;
  if (o->fill_on_free_bytes == 0) o->fill_on_free_bytes = SIZE_MAX;
  if (o->free_track_backtrace_num_frames == 0) o->free_track_backtrace_num_frames = 16;
}
static void set_ft_frames(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->free_track_backtrace_num_frames = v;
}
static void set_record_allocs(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->record_allocs = v;
}
static void set_string(char *dst, const char *s, const char *def) {
  snprintf(dst, UR_OPTION_PATH_MAX, "%s", s && *s ? s : def);
}
static void set_dump_prefix(struct ur_options *o, size_t v, const char *s) {
  (void)v;
  set_string(o->backtrace_dump_prefix, s, UR_DEFAULT_DUMP_PREFIX);
}
static void set_record_file(struct ur_options *o, size_t v, const char *s) {
  (void)v;
  set_string(o->record_allocs_file, s, UR_DEFAULT_RECORD_FILE);
}

#define FLAG_SETTER(fn, field)                                  \
  static void fn(struct ur_options *o, size_t v, const char *s) { \
    (void)v;                                                    \
    (void)s;                                                    \
    o->field = true;                                            \
  }
FLAG_SETTER(set_verbose, verbose)
FLAG_SETTER(set_dump_on_exit, backtrace_dump_on_exit)
FLAG_SETTER(set_bt_full, backtrace_full)
FLAG_SETTER(set_leak_track, leak_track)
FLAG_SETTER(set_record_on_exit, record_allocs_on_exit)
FLAG_SETTER(set_verify_pointers, verify_pointers)
FLAG_SETTER(set_abort_on_error, abort_on_error)
FLAG_SETTER(set_check_unreachable, check_unreachable_on_signal)
FLAG_SETTER(set_stats_on_signal, log_allocator_stats_on_signal)
FLAG_SETTER(set_stats_on_exit, log_allocator_stats_on_exit)
FLAG_SETTER(set_leak_check_at_exit, leak_check_at_exit)
static void set_leak_check_exitcode(struct ur_options *o, size_t v, const char *s) {
  (void)s;
  o->leak_check_exitcode = v;
}

#define BT_FRAMES UR_DEFAULT_BACKTRACE_FRAMES, 1, 256
#define GUARD_BYTES 32, 1, 16384
#define ANY_SIZE 0, 1, SIZE_MAX
#define NO_VALUE 0, 0, 0

/* Every option of bionic's malloc_debug (Config.cpp kOptions). Implementing
 * one is giving it an apply function. */
static const struct option_def options[] = {
    {"guard", NULL, VAL_OPTIONAL, GUARD_BYTES, set_guard},
    {"front_guard", NULL, VAL_OPTIONAL, GUARD_BYTES, set_front_guard},
    {"rear_guard", NULL, VAL_OPTIONAL, GUARD_BYTES, set_rear_guard},
    {"backtrace_size", "bt_sz", VAL_REQUIRED, ANY_SIZE, set_bt_size},
    {"backtrace_min_size", "bt_min_sz", VAL_REQUIRED, ANY_SIZE, set_bt_min_size},
    {"backtrace_max_size", "bt_max_sz", VAL_REQUIRED, ANY_SIZE, set_bt_max_size},
    {"backtrace", "bt", VAL_OPTIONAL, BT_FRAMES, set_backtrace},
    {"backtrace_enable_on_signal", "bt_en_on_sig", VAL_OPTIONAL, BT_FRAMES, set_bt_on_signal},
    {"backtrace_dump_on_exit", "bt_dmp_on_ex", VAL_NONE, NO_VALUE, set_dump_on_exit},
    {"backtrace_dump_prefix", "bt_dmp_pre", VAL_STRING, NO_VALUE, set_dump_prefix},
    {"backtrace_full", "bt_full", VAL_NONE, NO_VALUE, set_bt_full},
    {"fill", NULL, VAL_OPTIONAL, SIZE_MAX, 1, SIZE_MAX, set_fill},
    {"fill_on_alloc", NULL, VAL_OPTIONAL, SIZE_MAX, 1, SIZE_MAX, set_fill_on_alloc},
    {"fill_on_free", NULL, VAL_OPTIONAL, SIZE_MAX, 1, SIZE_MAX, set_fill_on_free},
    {"expand_alloc", NULL, VAL_OPTIONAL, 16, 1, 16384, set_expand_alloc},
    {"free_track", NULL, VAL_OPTIONAL, 100, 1, 16384, set_free_track},
    {"free_track_backtrace_num_frames", NULL, VAL_OPTIONAL, 16, 0, 256, set_ft_frames},
    {"leak_track", NULL, VAL_NONE, NO_VALUE, set_leak_track},
    {"record_allocs", NULL, VAL_OPTIONAL, 8000000, 1, 50000000, set_record_allocs},
    {"record_allocs_file", NULL, VAL_STRING, NO_VALUE, set_record_file},
    {"record_allocs_on_exit", NULL, VAL_NONE, NO_VALUE, set_record_on_exit},
    {"verify_pointers", NULL, VAL_NONE, NO_VALUE, set_verify_pointers},
    {"abort_on_error", NULL, VAL_NONE, NO_VALUE, set_abort_on_error},
    {"verbose", NULL, VAL_NONE, NO_VALUE, set_verbose},
    {"check_unreachable_on_signal", NULL, VAL_NONE, NO_VALUE, set_check_unreachable},
    {"log_allocator_stats_on_signal", NULL, VAL_NONE, NO_VALUE, set_stats_on_signal},
    {"log_allocator_stats_on_exit", NULL, VAL_NONE, NO_VALUE, set_stats_on_exit},
    /* Not malloc_debug's: LeakSanitizer's exit-time check (exit_check.c). */
    {"leak_check_at_exit", NULL, VAL_NONE, NO_VALUE, set_leak_check_at_exit},
    {"leak_check_exitcode", NULL, VAL_REQUIRED, 0, 0, 255, set_leak_check_exitcode},
};
#define NUM_OPTIONS (sizeof options / sizeof options[0])
_Static_assert(NUM_OPTIONS <= UR_MAX_OPTIONS, "grow UR_MAX_OPTIONS");

const char *ur_options_name(unsigned i) { return i < NUM_OPTIONS ? options[i].name : "?"; }

struct parser {
  const char *progname;
  ur_options_log_fn log;
  void *ctx;
};

__attribute__((format(printf, 2, 3))) static bool fail(const struct parser *p, const char *fmt,
                                                       ...) {
  if (!p->log) return false;
  char msg[512];
  int n = snprintf(msg, sizeof msg, "%s: ", p->progname);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  p->log(p->ctx, msg);
  return false;
}

/* Mirrors Config::ParseValue, including its checks' order and wording. An
 * empty value for an option that needs one fails like bionic's release build
 * (strtol consumes nothing: "bad value"). */
static bool parse_number(const struct parser *p, const char *name, const char *value, size_t min,
                         size_t max, size_t *out) {
  errno = 0;
  char *end;
  long v = strtol(value, &end, 10);
  if (errno != 0) return fail(p, "bad value for option '%s': %s", name, strerrordesc_np(errno));
  if (end == value) return fail(p, "bad value for option '%s'", name);
  if (*end != '\0')
    return fail(p, "bad value for option '%s', non space found after option: %s", name, end);
  if (v < 0) return fail(p, "bad value for option '%s', value cannot be negative: %ld", name, v);
  if ((size_t)v < min)
    return fail(p, "bad value for option '%s', value must be >= %zu: %ld", name, min, v);
  if ((size_t)v > max)
    return fail(p, "bad value for option '%s', value must be <= %zu: %ld", name, max, v);
  *out = (size_t)v;
  return true;
}

static const struct option_def *find(const char *name, size_t len) {
  for (size_t i = 0; i < NUM_OPTIONS; i++) {
    const struct option_def *d = &options[i];
    if ((strlen(d->name) == len && memcmp(d->name, name, len) == 0) ||
        (d->alias && strlen(d->alias) == len && memcmp(d->alias, name, len) == 0))
      return d;
  }
  return NULL;
}

bool ur_options_parse(const char *str, struct ur_options *out, const char *progname,
                      ur_options_log_fn log, void *ctx) {
  const struct parser p = {progname ? progname : "<unknown>", log, ctx};
  memset(out, 0, sizeof *out);
  out->backtrace_max_size = SIZE_MAX;
  out->leak_check_exitcode = UR_DEFAULT_LEAK_CHECK_EXITCODE;
  set_string(out->backtrace_dump_prefix, NULL, UR_DEFAULT_DUMP_PREFIX);
  set_string(out->record_allocs_file, NULL, UR_DEFAULT_RECORD_FILE);
  bool seen[NUM_OPTIONS] = {false};
  const char *cur = str ? str : "";
  char name[1024], value[1024];
  for (;;) {
    /* Config::GetOption: name up to space or '=', optional spaces, '=', spaces, value. */
    while (isspace((unsigned char)*cur)) cur++;
    if (*cur == '\0') break;
    const char *start = cur;
    while (*cur && !isspace((unsigned char)*cur) && *cur != '=') cur++;
    snprintf(name, sizeof name, "%.*s", (int)(cur - start), start);
    while (isspace((unsigned char)*cur)) cur++;
    value[0] = '\0';
    if (*cur == '=') {
      cur++;
      while (isspace((unsigned char)*cur)) cur++;
      start = cur;
      while (*cur && !isspace((unsigned char)*cur)) cur++;
      snprintf(value, sizeof value, "%.*s", (int)(cur - start), start);
    }

    const struct option_def *d = find(name, strlen(name));
    if (!d) return fail(&p, "unknown option %s", name);
    size_t v = d->def;
    switch (d->kind) {
      case VAL_NONE:
        if (value[0]) return fail(&p, "value set for option '%s' which does not take a value", name);
        break;
      case VAL_OPTIONAL:
        if (value[0] && !parse_number(&p, name, value, d->min, d->max, &v)) return false;
        break;
      case VAL_REQUIRED:
        if (!parse_number(&p, name, value, d->min, d->max, &v)) return false;
        break;
      case VAL_STRING:
        break;
    }
    unsigned idx = (unsigned)(d - options);
    if (d->apply) {
      d->apply(out, v, value);
    } else if (!seen[idx]) {
      out->unimplemented[out->num_unimplemented++] = idx;
    }
    seen[idx] = true;
  }
  return true;
}
