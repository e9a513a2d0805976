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
      {"P2P", DLPG__SUB_P2P},   {"GLOO", DLPG__SUB_GLOO},   {"NCCL", DLPG__SUB_NCCL},
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

static const char *dlpg__subsys_name(dlpg__log_subsys_t sub) {
  switch (sub) {
    case DLPG__SUB_INIT: return "INIT";
    case DLPG__SUB_STORE: return "STORE";
    case DLPG__SUB_COLL: return "COLL";
    case DLPG__SUB_P2P: return "P2P";
    case DLPG__SUB_GLOO: return "GLOO";
    case DLPG__SUB_NCCL: return "NCCL";
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
