/* Logging (log.h). DLPG_DEBUG picks the level, DLPG_DEBUG_SUBSYS a comma list of
 * subsystems (a leading "^" inverts it, as in NCCL_DEBUG_SUBSYS). Lines go to stderr, one
 * fprintf each so lines of several threads do not interleave mid-line. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/params.h"

int dlpg__log_level = -1;
int dlpg__log_mask = 0;

static pthread_once_t dlpg__log_once = PTHREAD_ONCE_INIT;
static char dlpg__log_host[64];

static int dlpg__subsys_bit(const char *name, size_t len) {
  static const struct { const char *name; int bit; } subs[] = {
      {"INIT", DLPG__SUB_INIT}, {"STORE", DLPG__SUB_STORE}, {"COLL", DLPG__SUB_COLL},
      {"P2P", DLPG__SUB_P2P},   {"GLOO", DLPG__SUB_GLOO},
      {"ALL", 0x7fffffff}};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
    if (strlen(subs[i].name) == len && strncasecmp(subs[i].name, name, len) == 0)
      return subs[i].bit;
  return 0;
}

static void dlpg__log_load(void) {
  const char *lv = dlpg__param_str(DLPG__PARAM_DEBUG);
  int level = DLPG__LOG_WARN;
  if (lv) {
    if (strcasecmp(lv, "NONE") == 0) level = DLPG__LOG_NONE;
    else if (strcasecmp(lv, "WARN") == 0) level = DLPG__LOG_WARN;
    else if (strcasecmp(lv, "INFO") == 0) level = DLPG__LOG_INFO;
    else if (strcasecmp(lv, "TRACE") == 0) level = DLPG__LOG_TRACE;
  }
  const char *sub = dlpg__param_str(DLPG__PARAM_DEBUG_SUBSYS);
  int mask = 0x7fffffff;
  if (sub && sub[0]) {
    int invert = sub[0] == '^';
    const char *p = sub + invert;
    int m = 0;
    while (*p) {
      size_t len = strcspn(p, ",");
      m |= dlpg__subsys_bit(p, len);
      p += len;
      if (*p == ',') p++;
    }
    mask = invert ? (0x7fffffff & ~m) : m;
  }
  if (gethostname(dlpg__log_host, sizeof dlpg__log_host) != 0)
    snprintf(dlpg__log_host, sizeof dlpg__log_host, "?");
  dlpg__log_host[sizeof dlpg__log_host - 1] = '\0';
  char *dot = strchr(dlpg__log_host, '.');
  if (dot) *dot = '\0';
  dlpg__log_mask = mask;
  __atomic_store_n(&dlpg__log_level, level, __ATOMIC_RELEASE);
}

void dlpg__log_init(void) { pthread_once(&dlpg__log_once, dlpg__log_load); }

int dlpg__log_enabled(dlpg__log_level_t level, dlpg__log_subsys_t sub) {
  int cur = __atomic_load_n(&dlpg__log_level, __ATOMIC_ACQUIRE);
  if (cur < 0) {
    dlpg__log_init();
    cur = __atomic_load_n(&dlpg__log_level, __ATOMIC_ACQUIRE);
  }
  return (int)level <= cur && (dlpg__log_mask & (int)sub) != 0;
}

static const char *dlpg__level_name(dlpg__log_level_t level) {
  switch (level) {
    case DLPG__LOG_WARN: return "WARN";
    case DLPG__LOG_INFO: return "INFO";
    case DLPG__LOG_TRACE: return "TRACE";
    default: return "NONE";
  }
}

static const char *dlpg__subsys_extra_name(int bit);

static const char *dlpg__subsys_name(dlpg__log_subsys_t sub) {
  const char *extra = dlpg__subsys_extra_name((int)sub);
  if (extra) return extra;
  switch (sub) {
    case DLPG__SUB_INIT: return "INIT";
    case DLPG__SUB_STORE: return "STORE";
    case DLPG__SUB_COLL: return "COLL";
    case DLPG__SUB_P2P: return "P2P";
    case DLPG__SUB_GLOO: return "GLOO";
  }
  return "?";
}

void dlpg__vlog(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
                va_list ap) {
  dlpg__log_init();
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  char rk[16];
  if (rank < 0) snprintf(rk, sizeof rk, "-");
  else snprintf(rk, sizeof rk, "%d", rank);
  fprintf(stderr, "%s:%d:%ld [%s] dlpg %s %s %s\n", dlpg__log_host, (int)getpid(),
          (long)syscall(SYS_gettid), rk, dlpg__level_name(level), dlpg__subsys_name(sub), msg);
}

void dlpg__log(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dlpg__vlog(level, sub, rank, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------------ owners' subsystems */

/* Subsystems registered by name beyond the fixed ones: bits from DLPG__SUB_GLOO << 1 up. */
#define DLPG__SUBSYS_EXTRA_MAX 8
static struct {
  char name[16];
  int bit;
} dlpg__subsys_extra[DLPG__SUBSYS_EXTRA_MAX];
static int dlpg__nsubsys_extra;
static pthread_mutex_t dlpg__subsys_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *dlpg__subsys_extra_name(int bit) {
  int n = __atomic_load_n(&dlpg__nsubsys_extra, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (dlpg__subsys_extra[i].bit == bit) return dlpg__subsys_extra[i].name;
  return NULL;
}

/* Whether DLPG_DEBUG_SUBSYS selects name (a comma list; "^" inverts; unset or ALL: all). */
static int dlpg__subsys_selected(const char *name) {
  const char *sub = dlpg__param_str(DLPG__PARAM_DEBUG_SUBSYS);
  if (!sub || !sub[0]) return 1;
  int invert = sub[0] == '^', named = 0;
  for (const char *p = sub + invert; *p;) {
    size_t len = strcspn(p, ",");
    if ((len == strlen(name) && strncasecmp(p, name, len) == 0) ||
        (len == 3 && strncasecmp(p, "ALL", 3) == 0))
      named = 1;
    p += len;
    if (*p == ',') p++;
  }
  return invert ? !named : named;
}

int dlpg__log_subsys_register(const char *name) {
  if (!name || !name[0]) return 0;
  int bit = dlpg__subsys_bit(name, strlen(name));
  if (bit == 0x7fffffff) return 0; /* "ALL" names no subsystem */
  if (bit) return bit;
  dlpg__log_init();
  pthread_mutex_lock(&dlpg__subsys_mu);
  bit = 0;
  for (int i = 0; i < dlpg__nsubsys_extra && !bit; i++)
    if (strcasecmp(dlpg__subsys_extra[i].name, name) == 0) bit = dlpg__subsys_extra[i].bit;
  if (!bit && dlpg__nsubsys_extra < DLPG__SUBSYS_EXTRA_MAX) {
    int i = dlpg__nsubsys_extra;
    bit = DLPG__SUB_GLOO << (i + 1);
    snprintf(dlpg__subsys_extra[i].name, sizeof dlpg__subsys_extra[i].name, "%s", name);
    dlpg__subsys_extra[i].bit = bit;
    /* The mask was computed from the fixed names; settle the new bit by its name. */
    if (dlpg__subsys_selected(name)) __atomic_or_fetch(&dlpg__log_mask, bit, __ATOMIC_RELAXED);
    else __atomic_and_fetch(&dlpg__log_mask, ~bit, __ATOMIC_RELAXED);
    __atomic_store_n(&dlpg__nsubsys_extra, i + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&dlpg__subsys_mu);
  return bit;
}
