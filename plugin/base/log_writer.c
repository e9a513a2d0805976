/* The log writer (log_writer.h). DLPG_DEBUG_SUBSYS is kept as given and matched against the
 * subsystems registered so far, again at each registration, so a name a module registers
 * after the first log line is selected too. A leading "^" inverts the list, as in
 * NCCL_DEBUG_SUBSYS. Lines go to stderr, one fprintf each so lines of several threads do not
 * interleave mid-line, or (DLPG_DEBUG_FILE, as NCCL_DEBUG_FILE) to a file of the process,
 * one write(2) each on a descriptor opened for appending. */
#include "base/log_writer.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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

int dlpg__log_level_known(const char *lv) {
  return !lv || strcasecmp(lv, "NONE") == 0 || strcasecmp(lv, "WARN") == 0 ||
         strcasecmp(lv, "INFO") == 0 || strcasecmp(lv, "TRACE") == 0;
}

int dlpg__log_subsys_unknown(const char *spec, char *name, size_t cap) {
  const char *p = spec ? spec + (spec[0] == '^') : "";
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len > 0 && !(len == 3 && strncasecmp(p, "ALL", 3) == 0) && !dlpg__sub_bit(p, len)) {
      snprintf(name, cap, "%.*s", (int)len, p);
      return 1;
    }
    p += len;
    if (*p == ',') p++;
  }
  return 0;
}

void dlpg__log_subsys_names(char *buf, size_t cap) {
  int n = __atomic_load_n(&dlpg__sub_count, __ATOMIC_ACQUIRE);
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o < cap; i++) {
    int w = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", dlpg__sub_names[i]);
    if (w < 0) break;
    o += (size_t)w;
  }
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

/* ------------------------------------------------------------------ the log file */

/* DLPG_DEBUG_FILE as configured (NULL: stderr), and the descriptor of this process's file:
 * opened for pid dlpg__log_fd_pid, so a forked child (another pid) opens its own. A pid
 * whose file could not be opened writes to stderr (dlpg__log_failed_pid). */
static pthread_mutex_t dlpg__log_file_mu = PTHREAD_MUTEX_INITIALIZER;
static char *dlpg__log_file_pattern;
static int dlpg__log_file_set;
static int dlpg__log_fd = -1;
static pid_t dlpg__log_fd_pid, dlpg__log_failed_pid;

void dlpg__log_set_file(const char *pattern) {
  pthread_mutex_lock(&dlpg__log_file_mu);
  if (!dlpg__log_file_set) {
    dlpg__log_file_pattern = pattern && pattern[0] ? strdup(pattern) : NULL;
    __atomic_store_n(&dlpg__log_file_set, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&dlpg__log_file_mu);
}

/* pattern with %h (host), %p (pid) and %% expanded into buf; 0 when it does not fit. */
static int dlpg__log_file_path(const char *pattern, char *buf, size_t cap) {
  size_t n = 0;
  for (const char *c = pattern; *c; c++) {
    char tmp[64];
    const char *add = tmp;
    if (c[0] == '%' && c[1] == 'h') {
      add = dlpg__log_host;
      c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      snprintf(tmp, sizeof tmp, "%d", (int)getpid());
      c++;
    } else if (c[0] == '%' && c[1] == '%') {
      snprintf(tmp, sizeof tmp, "%%");
      c++;
    } else {
      tmp[0] = *c;
      tmp[1] = '\0';
    }
    size_t l = strlen(add);
    if (n + l >= cap) return 0;
    memcpy(buf + n, add, l);
    n += l;
  }
  buf[n] = '\0';
  return 1;
}

/* The descriptor lines of this process go to: the file's, or -1 for stderr (under
 * dlpg__log_file_mu). */
static int dlpg__log_file_fd(void) {
  if (!dlpg__log_file_pattern) return -1;
  pid_t pid = getpid();
  if (dlpg__log_fd >= 0 && dlpg__log_fd_pid == pid) return dlpg__log_fd;
  if (dlpg__log_failed_pid == pid) return -1;
  if (dlpg__log_fd >= 0) close(dlpg__log_fd); /* the parent's, inherited by this child */
  dlpg__log_fd = -1;
  char path[4096];
  int fd = -1, err = ENAMETOOLONG;
  if (dlpg__log_file_path(dlpg__log_file_pattern, path, sizeof path)) {
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    err = errno;
  }
  if (fd < 0) {
    dlpg__log_failed_pid = pid;
    fprintf(stderr, "%s:%d dlpg WARN INIT DLPG_DEBUG_FILE=\"%s\": cannot open \"%s\" (%s); "
            "logging to stderr\n", dlpg__log_host, (int)pid, dlpg__log_file_pattern,
            fd < 0 && err == ENAMETOOLONG ? dlpg__log_file_pattern : path, strerror(err));
    return -1;
  }
  dlpg__log_fd = fd;
  dlpg__log_fd_pid = pid;
  return fd;
}

void dlpg__log_write(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
                     va_list ap) {
  pthread_once(&dlpg__log_host_once, dlpg__log_host_init);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  char rk[16];
  if (rank < 0) snprintf(rk, sizeof rk, "-");
  else snprintf(rk, sizeof rk, "%d", rank);
  char line[1280];
  int len = snprintf(line, sizeof line, "%s:%d:%ld [%s] dlpg %s %s %s\n", dlpg__log_host,
                     (int)getpid(), (long)syscall(SYS_gettid), rk, dlpg__level_name(level),
                     sub ? dlpg__log_subsys_name(sub) : "-", msg);
  if (len < 0) return;
  if ((size_t)len >= sizeof line) {
    len = (int)sizeof line - 1;
    line[len - 1] = '\n';
  }
  if (__atomic_load_n(&dlpg__log_file_set, __ATOMIC_ACQUIRE) && dlpg__log_file_pattern) {
    pthread_mutex_lock(&dlpg__log_file_mu);
    int fd = dlpg__log_file_fd();
    ssize_t w = fd >= 0 ? write(fd, line, (size_t)len) : -1;
    pthread_mutex_unlock(&dlpg__log_file_mu);
    if (w >= 0) return;
  }
  fputs(line, stderr);
}
