/* Options, read once at start-up from TROVE_* environment variables without allocating, and
 * the messages trove prints (a small formatter of its own: stdio may allocate).
 *
 * A malformed value, one out of range, or an unknown TROVE_ name gets one warning on stderr
 * and the default; it never stops the program. */
#include "internal.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_INT, OPT_BOOL, OPT_PERCENT, OPT_MISUSE } opt_kind_t;
typedef struct {
  const char *env;        /* TROVE_<name> */
  opt_kind_t kind;
  long def, min, max;
  const char *doc;
} opt_desc_t;

/* One row per option, in the order of trove_option_t. The README's table mirrors this. */
static const opt_desc_t options[TROVE_OPT_COUNT] = {
  [TROVE_OPT_PURGE_DELAY_MS] = {"TROVE_PURGE_DELAY_MS", OPT_INT, 250, 0, 3600000,
                                "free pages older than this (ms) go back to the OS"},
  [TROVE_OPT_BLOWUP_K] = {"TROVE_BLOWUP_K", OPT_INT, 24, 0, 4096,
                          "f-empty superblocks a thread heap may keep, in 64 KiB units (Hoard's K)"},
  [TROVE_OPT_BLOWUP_F_PCT] = {"TROVE_BLOWUP_F", OPT_PERCENT, 50, 1, 99,
                              "empty fraction that makes a superblock sparse (Hoard's f)"},
  [TROVE_OPT_SHOW_STATS] = {"TROVE_SHOW_STATS", OPT_BOOL, 0, 0, 1, "print statistics at exit"},
  [TROVE_OPT_VERBOSE] = {"TROVE_VERBOSE", OPT_INT, 0, 0, 3, "messages about trove's work"},
  [TROVE_OPT_ON_MISUSE] = {"TROVE_ON_MISUSE", OPT_MISUSE, TROVE_MISUSE_ABORT, 0, 1,
                           "abort or warn (and leak the block) on a double/invalid free"},
  [TROVE_OPT_DIRTY_MAX_MB] = {"TROVE_DIRTY_MAX_MB", OPT_INT, 8, 0, 1 << 20,
                              "free dirty pages beyond this (MiB) or 1.5x the in-use pages go back at once"
                              " (unset: 1.25x the recent peak waits for the purge delay too)"},
  [TROVE_OPT_LARGE_CACHE_MB] = {"TROVE_LARGE_CACHE_MB", OPT_INT, 64, 0, 1 << 20,
                                "freed large mappings kept resident for reuse (MiB; or a third of the live large bytes)"},
  [TROVE_OPT_ARENAS] = {"TROVE_ARENAS", OPT_INT, 0, 0, 64,
                        "page heap arenas (0: one per CPU; each thread heap takes runs from its own)"},
  [TROVE_OPT_SHARED_THREADS] = {"TROVE_SHARED_THREADS", OPT_INT, 0, 0, 1 << 24,
                                "with more live threads than this, classes above 256 B come from shared heaps"
                                " (0: max(63, 8 per CPU))"},
  [TROVE_OPT_THP] = {"TROVE_THP", OPT_INT, 1, 0, 2,
                     "transparent huge pages for segments: 0 never; 1 once an arena holds 32 MiB, for"
                     " memory the program writes whole; 2 always (a segment's first purge turns them"
                     " off for it)"},
  [TROVE_OPT_THP_SLOW_US] = {"TROVE_THP_SLOW_US", OPT_INT, 1000, 0, 1000000,
                             "with TROVE_THP=1, a huge page that takes longer than this (us; unset: or"
                             " than 512 small pages here) to fault in, twice in a row, pauses huge"
                             " pages for the next 16 segments, twice as many after each slow one"
                             " (0: never)"},
  [TROVE_OPT_BACKGROUND] = {"TROVE_BACKGROUND", OPT_INT, 2, 0, 2,
                            "a thread of trove's gives free memory back after the purge delay while"
                            " the program makes no calls: 2 while 64 MiB or more of free pages wait,"
                            " 1 always, 0 never (only the program's calls do)"},
  [TROVE_OPT_COLOUR] = {"TROVE_COLOUR", OPT_BOOL, 0, 0, 1,
                        "cache colour for blocks of 4-60 KiB: malloc's classes for multiples of 1"
                        " KiB 64 B larger, their runs' first block at an offset, so that their"
                        " heads spread over the cache's sets (up to a 4 KiB page more a block)"},
};

long _trove_options[TROVE_OPT_COUNT];
bool _trove_options_set[TROVE_OPT_COUNT];
char _trove_heap_map_path[256];

/* ------------------------------------------------------------------ formatting */
static size_t fmt_unsigned(char *out, unsigned long long v, unsigned base) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

/* %s %c %d %u %x %p with l/ll/z modifiers: what trove's messages need, nothing that allocates */
static int trove_vsnprintf(char *buf, size_t cap, const char *fmt, va_list ap) {
  size_t n = 0;
#define PUT(ch) do { if (n + 1 < cap) buf[n] = (ch); n++; } while (0)
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') { PUT(*f); continue; }
    f++;
    int lng = 0;
    while (*f == 'l' || *f == 'z') { lng++; f++; }
    char num[32];
    size_t len = 0;
    const char *s = num;
    switch (*f) {
    case 's': s = va_arg(ap, const char *); if (!s) s = "(null)"; len = strlen(s); break;
    case 'c': num[0] = (char)va_arg(ap, int); len = 1; break;
    case 'd': {
      long long v = lng ? va_arg(ap, long long) : va_arg(ap, int);
      if (v < 0) { num[len++] = '-'; v = -v; }
      len += fmt_unsigned(num + len, (unsigned long long)v, 10);
      break;
    }
    case 'u': case 'x': {
      unsigned long long v = lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned);
      len = fmt_unsigned(num, v, *f == 'x' ? 16 : 10);
      break;
    }
    case 'p': {
      uintptr_t v = (uintptr_t)va_arg(ap, void *);
      if (v == 0) { s = "(nil)"; len = 5; break; }
      num[0] = '0'; num[1] = 'x';
      len = 2 + fmt_unsigned(num + 2, v, 16);
      break;
    }
    case '%': num[0] = '%'; len = 1; break;
    default: num[0] = '?'; len = 1; break;
    }
    for (size_t i = 0; i < len; i++) PUT(s[i]);
  }
  if (cap) buf[n < cap ? n : cap - 1] = 0;
#undef PUT
  return (int)n;
}

int _trove_snprintf(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = trove_vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  return r;
}

void _trove_message(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = trove_vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  _trove_os_write_stderr(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void _trove_misuse(const char *what, const void *p, const char *detail) {
  _trove_message("trove: error: %s of %p: %s\n", what, p, detail);
  if (TROVE_OPT(ON_MISUSE) == TROVE_MISUSE_WARN) return;   /* the block is leaked */
  abort();
}

/* ------------------------------------------------------------------ parsing */
static bool parse_long(const char *s, long *out) {
  if (*s == 0) return false;
  long v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (1L << 50)) return false;
    v = v * 10 + (*s - '0');
  }
  if (*s == 'k' || *s == 'K') { v <<= 10; s++; }
  else if (*s == 'm' || *s == 'M') { v <<= 20; s++; }
  else if (*s == 'g' || *s == 'G') { v <<= 30; s++; }
  if (*s) return false;
  *out = v;
  return true;
}

static bool ieq(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if ((*a | 32) != (*b | 32)) return false;
  return *a == *b;
}

static bool parse_value(const opt_desc_t *d, const char *s, long *out) {
  switch (d->kind) {
  case OPT_BOOL:
    if (ieq(s, "1") || ieq(s, "yes") || ieq(s, "true") || ieq(s, "on")) { *out = 1; return true; }
    if (ieq(s, "0") || ieq(s, "no") || ieq(s, "false") || ieq(s, "off")) { *out = 0; return true; }
    return false;
  case OPT_MISUSE:
    if (ieq(s, "abort")) { *out = TROVE_MISUSE_ABORT; return true; }
    if (ieq(s, "warn")) { *out = TROVE_MISUSE_WARN; return true; }
    return false;
  case OPT_PERCENT: {                   /* "0.5", ".25" or "50%" */
    size_t len = strlen(s);
    if (len && s[len - 1] == '%') {
      char tmp[16];
      if (len > sizeof tmp) return false;
      memcpy(tmp, s, len - 1);
      tmp[len - 1] = 0;
      return parse_long(tmp, out);
    }
    if (s[0] == '0' && s[1] == 0) { *out = 0; return true; }
    const char *p = s;
    if (*p == '0') p++;
    if (*p != '.') return false;
    long v = 0, scale = 100;
    for (p++; *p >= '0' && *p <= '9'; p++) {
      scale /= 10;
      v += (*p - '0') * scale;
    }
    if (*p || p == s + 1) return false;
    *out = v;
    return true;
  }
  case OPT_INT:
  default:
    return parse_long(s, out);
  }
}

static void warn_unknown_names(void);

void _trove_options_init(void) {
  for (int i = 0; i < TROVE_OPT_COUNT; i++) {
    const opt_desc_t *d = &options[i];
    _trove_options[i] = d->def;
    const char *s = _trove_os_getenv(d->env);
    if (s == NULL) continue;
    long v;
    if (!parse_value(d, s, &v) || v < d->min || v > d->max) {
      _trove_message("trove: warning: %s=%s is not valid (%s); using the default %ld\n", d->env,
                     s, d->doc, d->def);
      continue;
    }
    _trove_options[i] = v;
    _trove_options_set[i] = true;
  }
  const char *map = _trove_os_getenv("TROVE_HEAP_MAP");
  if (map) {
    if (strlen(map) < sizeof _trove_heap_map_path && *map)
      memcpy(_trove_heap_map_path, map, strlen(map) + 1);
    else
      _trove_message("trove: warning: TROVE_HEAP_MAP is empty or too long; no heap map\n");
  }
  warn_unknown_names();
}

/* Every TROVE_ variable must be one we know: a typo should not be silently ignored. */
static void warn_unknown_names(void) {
  size_t cursor = 0;
  for (const char *e; (e = _trove_os_env_next(&cursor)) != NULL;) {
    if (strncmp(e, "TROVE_", 6) != 0) continue;
    const char *eq = strchr(e, '=');
    size_t len = eq ? (size_t)(eq - e) : strlen(e);
    bool known = len == 14 && strncmp(e, "TROVE_HEAP_MAP", 14) == 0;
    for (int i = 0; i < TROVE_OPT_COUNT && !known; i++)
      known = strlen(options[i].env) == len && strncmp(e, options[i].env, len) == 0;
    if (!known)
      _trove_message("trove: warning: unknown option %s (see the README's option table)\n", e);
  }
}

/* Used by trove_stats_print to list the options in force. */
void _trove_options_print(void (*line)(void *, const char *), void *arg) TROVE_HIDDEN;
void _trove_options_print(void (*line)(void *, const char *), void *arg) {
  char buf[200];
  for (int i = 0; i < TROVE_OPT_COUNT; i++) {
    _trove_snprintf(buf, sizeof buf, "  %s = %ld  (%s)", options[i].env, _trove_options[i],
                    options[i].doc);
    line(arg, buf);
  }
}
