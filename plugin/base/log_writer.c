/* The log writer (log_writer.h). DLPG_DEBUG_SUBSYS is kept as given and matched against the
 * subsystems registered so far, again at each registration, so a name a module registers
 * after the first log line is selected too. A leading "^" inverts the list, as in
 * NCCL_DEBUG_SUBSYS. Lines go to stderr, one fprintf each so lines of several threads do not
 * interleave mid-line. */
#include "base/log_writer.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DLPG__SUBSYS_MAX 31 /* bits of a positive int */
#define DLPG__SUBSYS_ALL 0x7fffffff
#define DLPG__SUBSYS_NAME_MAX 16

/* Subsystem i is bit 1 << i. Names below dlpg__sub_count are written before the count is
 * published (release), so readers need no lock. */
static char dlpg__sub_names[DLPG__SUBSYS_MAX][DLPG__SUBSYS_NAME_MAX] = {"INIT", "STORE", "COLL",
                                                                       "P2P"};
static int dlpg__sub_count = 4;
_Static_assert(DLPG__SUB_INIT == 1 && DLPG__SUB_STORE == 2 && DLPG__SUB_COLL == 4 &&
                   DLPG__SUB_P2P == 8,
               "core's subsystems are the first four names");

static pthread_mutex_t dlpg__log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *dlpg__sub_spec;      /* DLPG_DEBUG_SUBSYS as configured; NULL: ALL */
static int dlpg__log_level = -1;  /* -1 until configured */
static int dlpg__log_mask = 0;

/* Bit of name[0..len) among the registered names, or 0 (under dlpg__log_mu or after). */
static int dlpg__sub_bit(const char *name, size_t len) {
  int n = __atomic_load_n(&dlpg__sub_count, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (strlen(dlpg__sub_names[i]) == len && strncasecmp(dlpg__sub_names[i], name, len) == 0)
      return 1 << i;
  return 0;
}

/* The mask spec selects among the names registered now (under dlpg__log_mu). */
static int dlpg__sub_mask(const char *spec) {
  if (!spec || !spec[0]) return DLPG__SUBSYS_ALL;
  int invert = spec[0] == '^';
  const char *p = spec + invert;
  int m = 0;
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len == 3 && strncasecmp(p, "ALL", 3) == 0) m = DLPG__SUBSYS_ALL;
    else m |= dlpg__sub_bit(p, len);
    p += len;
    if (*p == ',') p++;
  }
  return invert ? (DLPG__SUBSYS_ALL & ~m) : m;
}

static int dlpg__level_parse(const char *lv) {
  if (!lv) return DLPG__LOG_WARN;
  if (strcasecmp(lv, "NONE") == 0) return DLPG__LOG_NONE;
  if (strcasecmp(lv, "INFO") == 0) return DLPG__LOG_INFO;
  if (strcasecmp(lv, "TRACE") == 0) return DLPG__LOG_TRACE;
  return DLPG__LOG_WARN; /* WARN, and what is not a level */
}

void dlpg__log_configure(const char *level, const char *subsys) {
  pthread_mutex_lock(&dlpg__log_mu);
  if (__atomic_load_n(&dlpg__log_level, __ATOMIC_ACQUIRE) < 0) {
    dlpg__sub_spec = subsys ? strdup(subsys) : NULL;
    __atomic_store_n(&dlpg__log_mask, dlpg__sub_mask(dlpg__sub_spec), __ATOMIC_RELAXED);
    __atomic_store_n(&dlpg__log_level, dlpg__level_parse(level), __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&dlpg__log_mu);
}

int dlpg__log_configured(void) { return __atomic_load_n(&dlpg__log_level, __ATOMIC_ACQUIRE) >= 0; }

int dlpg__log_would(dlpg__log_level_t level, dlpg__log_subsys_t sub) {
  int cur = __atomic_load_n(&dlpg__log_level, __ATOMIC_ACQUIRE);
  if ((int)level > cur) return 0;
  return sub == 0 || (__atomic_load_n(&dlpg__log_mask, __ATOMIC_RELAXED) & sub) != 0;
}

dlpg__log_subsys_t dlpg__log_subsys_register(const char *name) {
  size_t len = name ? strlen(name) : 0;
  if (len == 0 || len >= DLPG__SUBSYS_NAME_MAX) return 0;
  for (size_t i = 0; i < len; i++)
    if (!isalnum((unsigned char)name[i]) && name[i] != '_') return 0;
  pthread_mutex_lock(&dlpg__log_mu);
  int bit = dlpg__sub_bit(name, len);
  if (!bit && dlpg__sub_count < DLPG__SUBSYS_MAX) {
    int i = dlpg__sub_count;
    memcpy(dlpg__sub_names[i], name, len + 1);
    __atomic_store_n(&dlpg__sub_count, i + 1, __ATOMIC_RELEASE);
    bit = 1 << i;
    if (__atomic_load_n(&dlpg__log_level, __ATOMIC_ACQUIRE) >= 0)
      __atomic_store_n(&dlpg__log_mask, dlpg__sub_mask(dlpg__sub_spec), __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&dlpg__log_mu);
  return bit;
}

const char *dlpg__log_subsys_name(dlpg__log_subsys_t sub) {
  int n = __atomic_load_n(&dlpg__sub_count, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (sub == 1 << i) return dlpg__sub_names[i];
  return "?";
}

static const char *dlpg__level_name(dlpg__log_level_t level) {
  switch (level) {
    case DLPG__LOG_WARN: return "WARN";
    case DLPG__LOG_INFO: return "INFO";
    case DLPG__LOG_TRACE: return "TRACE";
    default: return "NONE";
  }
}

static char dlpg__log_host[64];
static pthread_once_t dlpg__log_host_once = PTHREAD_ONCE_INIT;
static void dlpg__log_host_init(void) {
  if (gethostname(dlpg__log_host, sizeof dlpg__log_host) != 0)
    snprintf(dlpg__log_host, sizeof dlpg__log_host, "?");
  dlpg__log_host[sizeof dlpg__log_host - 1] = '\0';
  char *dot = strchr(dlpg__log_host, '.');
  if (dot) *dot = '\0';
}

void dlpg__log_write(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
                     va_list ap) {
  pthread_once(&dlpg__log_host_once, dlpg__log_host_init);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  char rk[16];
  if (rank < 0) snprintf(rk, sizeof rk, "-");
  else snprintf(rk, sizeof rk, "%d", rank);
  fprintf(stderr, "%s:%d:%ld [%s] dlpg %s %s %s\n", dlpg__log_host, (int)getpid(),
          (long)syscall(SYS_gettid), rk, dlpg__level_name(level),
          sub ? dlpg__log_subsys_name(sub) : "-", msg);
}
