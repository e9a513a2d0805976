/* Environment variables (params.h): the registry of declaration tables, core's own first.
 * This is the only file that calls getenv(). A table's cached variables are read together
 * at the first read of any of them, under its lock, and kept for the life of the process;
 * the others are read at each use. Unparsable or refused values are reported once per
 * variable through the log writer (log_writer.h), never through log.c, which reads its
 * configuration from here. */
#include "base/params.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log_writer.h"

const dlpg__param_decl_t dlpg__core_params[DLPG__PARAM_COUNT] = {
#define DLPG__PARAM_DEF(id, env, def, flags, desc) {env, def, flags, desc},
    DLPG__PARAM_MAP(DLPG__PARAM_DEF)
#undef DLPG__PARAM_DEF
};

/* Owners that register at once: core, each backend, room for a few more. */
#define DLPG__PARAM_TABLES_MAX 16

typedef struct dlpg__param_table {
  const char *owner;
  const dlpg__param_decl_t *decls;
  int n;
  /* Cached environment values (NULL when unset or empty), copies so a later setenv() by the
   * host cannot invalidate them; valid once loaded is set (release). */
  const char **cache;
  int loaded;
} dlpg__param_table_t;

static const char *dlpg__core_cache[DLPG__PARAM_COUNT];
static dlpg__param_table_t dlpg__tables[DLPG__PARAM_TABLES_MAX] = {
    {"core", dlpg__core_params, DLPG__PARAM_COUNT, dlpg__core_cache, 0}};
static int dlpg__ntables = 1; /* entries below it are complete (written under the lock) */
static pthread_mutex_t dlpg__params_mu = PTHREAD_MUTEX_INITIALIZER;

/* Lines of this file go through the writer, configured here from core's own DLPG_DEBUG*
 * when nothing has logged yet (log.c would configure it the same way). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void dlpg__param_warn(const char *fmt, ...) {
  if (!dlpg__log_configured()) {
    dlpg__log_set_file(dlpg__param_str(DLPG__PARAM_DEBUG_FILE));
    dlpg__log_configure(dlpg__param_str(DLPG__PARAM_DEBUG),
                        dlpg__param_str(DLPG__PARAM_DEBUG_SUBSYS));
  }
  /* A warning about dlpg's own variables passes any DLPG_DEBUG_SUBSYS (which may be the
   * variable at fault); only DLPG_DEBUG=NONE silences it. */
  if (!dlpg__log_would(DLPG__LOG_WARN, 0)) return;
  va_list ap;
  va_start(ap, fmt);
  dlpg__log_write(DLPG__LOG_WARN, DLPG__SUB_INIT, -1, fmt, ap);
  va_end(ap);
}

/* Variables already warned about: each gets one warning for the life of the process, however
 * often it is read (a long job reads some at every group or store). */
#define DLPG__WARNED_MAX 64
static const dlpg__param_decl_t *dlpg__warned[DLPG__WARNED_MAX];
static int dlpg__nwarned;

/* 1 the first time p is named here (then it is remembered), 0 after. Beyond the list's room
 * a variable is warned about at each read rather than never. */
static int dlpg__first_warning(const dlpg__param_decl_t *p) {
  int first = 1;
  pthread_mutex_lock(&dlpg__params_mu);
  for (int i = 0; i < dlpg__nwarned && first; i++)
    if (dlpg__warned[i] == p || strcmp(dlpg__warned[i]->env, p->env) == 0) first = 0;
  if (first && dlpg__nwarned < DLPG__WARNED_MAX) dlpg__warned[dlpg__nwarned++] = p;
  pthread_mutex_unlock(&dlpg__params_mu);
  return first;
}

void dlpg__param_reject(const dlpg__param_decl_t *p, const char *value, const char *part,
                        const char *accepted) {
  if (!p || !dlpg__first_warning(p)) return;
  if (!accepted) accepted = "see dlpg-info";
  if (part)
    dlpg__param_warn("%s=\"%s\": \"%s\" is ignored (accepted values: %s)", p->env,
                     value ? value : "", part, accepted);
  else
    dlpg__param_warn("%s=\"%s\" is ignored (accepted values: %s)", p->env, value ? value : "",
                     accepted);
}

static const char *dlpg__env_value(const char *name) {
  const char *v = getenv(name);
  return (v && v[0]) ? v : NULL;
}

/* The table holding p, and p's index in it, or NULL (under the lock, or for entries below
 * an acquire-read count). */
static dlpg__param_table_t *dlpg__table_of(const dlpg__param_decl_t *p, int *idx) {
  int n = __atomic_load_n(&dlpg__ntables, __ATOMIC_ACQUIRE);
  uintptr_t a = (uintptr_t)p;
  for (int t = 0; t < n; t++) {
    dlpg__param_table_t *tb = &dlpg__tables[t];
    uintptr_t lo = (uintptr_t)tb->decls, hi = (uintptr_t)(tb->decls + tb->n);
    if (a >= lo && a < hi && (a - lo) % sizeof *p == 0) {
      *idx = (int)((a - lo) / sizeof *p);
      return tb;
    }
  }
  return NULL;
}

int dlpg__params_register(const char *owner, const dlpg__param_decl_t *decls, int n) {
  if (!owner || !decls || n <= 0) return -1;
  char clash[160] = "";
  int rc = -1;
  pthread_mutex_lock(&dlpg__params_mu);
  for (int t = 0; t < dlpg__ntables; t++)
    if (dlpg__tables[t].decls == decls) {
      pthread_mutex_unlock(&dlpg__params_mu);
      return 0;
    }
  for (int t = 0; t < dlpg__ntables && !clash[0]; t++)
    for (int i = 0; i < dlpg__tables[t].n && !clash[0]; i++)
      for (int j = 0; j < n && !clash[0]; j++)
        if (strcmp(dlpg__tables[t].decls[i].env, decls[j].env) == 0)
          snprintf(clash, sizeof clash, "%s is declared by %s already", decls[j].env,
                   dlpg__tables[t].owner);
  if (!clash[0] && dlpg__ntables == DLPG__PARAM_TABLES_MAX)
    snprintf(clash, sizeof clash, "%d tables are registered already", DLPG__PARAM_TABLES_MAX);
  const char **cache = clash[0] ? NULL : (const char **)calloc((size_t)n, sizeof *cache);
  if (!clash[0] && !cache) snprintf(clash, sizeof clash, "out of memory");
  if (!clash[0]) {
    dlpg__tables[dlpg__ntables] = (dlpg__param_table_t){owner, decls, n, cache, 0};
    __atomic_store_n(&dlpg__ntables, dlpg__ntables + 1, __ATOMIC_RELEASE);
    rc = 0;
  }
  pthread_mutex_unlock(&dlpg__params_mu);
  if (rc != 0) dlpg__param_warn("parameters of %s not registered: %s", owner, clash);
  return rc;
}

/* The environment's value only (no default), cached or fresh as the declaration says. */
static const char *dlpg__param_env(const dlpg__param_decl_t *p) {
  if (!(p->flags & DLPG__PARAM_CACHED)) return dlpg__env_value(p->env);
  int i = 0;
  dlpg__param_table_t *tb = dlpg__table_of(p, &i);
  if (!tb) return dlpg__env_value(p->env); /* not registered: nothing to keep it in */
  if (!__atomic_load_n(&tb->loaded, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&dlpg__params_mu);
    if (!tb->loaded) {
      for (int k = 0; k < tb->n; k++) {
        if (!(tb->decls[k].flags & DLPG__PARAM_CACHED)) continue;
        const char *v = dlpg__env_value(tb->decls[k].env);
        tb->cache[k] = v ? strdup(v) : NULL;
      }
      __atomic_store_n(&tb->loaded, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&dlpg__params_mu);
  }
  return tb->cache[i];
}

const char *dlpg__param_get(const dlpg__param_decl_t *p) {
  if (!p) return NULL;
  const char *v = dlpg__param_env(p);
  return v ? v : p->def;
}

int dlpg__param_set_default_env(const dlpg__param_decl_t *p, const char *value) {
  if (!p || !value) return 0;
  return dlpg__param_env(p) == NULL && setenv(p->env, value, 0) == 0;
}

/* v parsed whole as a double (surrounding blanks allowed): 1, else 0. */
static int dlpg__parse_double(const char *v, double *out) {
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (end == v || (end && *end) || errno == ERANGE) return 0;
  *out = d;
  return 1;
}

int dlpg__param_get_double(const dlpg__param_decl_t *p, double *out) {
  const char *v = dlpg__param_get(p);
  if (!v) return 0;
  double d = 0;
  if (!dlpg__parse_double(v, &d)) {
    dlpg__param_reject(p, v, NULL, "a number");
    return 0;
  }
  if (out) *out = d;
  return 1;
}

int dlpg__param_get_double_min(const dlpg__param_decl_t *p, double min, int min_allowed,
                               const char *accepted, double *out) {
  const char *v = dlpg__param_get(p);
  if (!v) return 0;
  double d = 0;
  if (!dlpg__parse_double(v, &d) || !isfinite(d) || d < min || (d == min && !min_allowed)) {
    dlpg__param_reject(p, v, NULL, accepted);
    return 0;
  }
  if (out) *out = d;
  return 1;
}

int dlpg__param_get_long(const dlpg__param_decl_t *p, long *out) {
  const char *v = dlpg__param_get(p);
  if (!v) return 0;
  char *end = NULL;
  errno = 0;
  long l = strtol(v, &end, 10);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (end == v || (end && *end) || errno == ERANGE) {
    dlpg__param_reject(p, v, NULL, "an integer");
    return 0;
  }
  if (out) *out = l;
  return 1;
}

static const dlpg__param_decl_t *dlpg__core(dlpg__param_id_t id) {
  return ((int)id < 0 || id >= DLPG__PARAM_COUNT) ? NULL : &dlpg__core_params[id];
}

const char *dlpg__param_env_name(dlpg__param_id_t id) {
  return dlpg__core(id) ? dlpg__core(id)->env : "?";
}
const char *dlpg__param_str(dlpg__param_id_t id) { return dlpg__param_get(dlpg__core(id)); }
int dlpg__param_double(dlpg__param_id_t id, double *out) {
  return dlpg__core(id) && dlpg__param_get_double(dlpg__core(id), out);
}
int dlpg__param_double_min(dlpg__param_id_t id, double min, int min_allowed,
                           const char *accepted, double *out) {
  return dlpg__core(id) &&
         dlpg__param_get_double_min(dlpg__core(id), min, min_allowed, accepted, out);
}
void dlpg__param_reject_id(dlpg__param_id_t id, const char *value, const char *part,
                           const char *accepted) {
  dlpg__param_reject(dlpg__core(id), value, part, accepted);
}
int dlpg__param_long(dlpg__param_id_t id, long *out) {
  return dlpg__core(id) && dlpg__param_get_long(dlpg__core(id), out);
}

void dlpg__params_print(FILE *f) {
  if (!f) return;
  int n = __atomic_load_n(&dlpg__ntables, __ATOMIC_ACQUIRE);
  for (int t = 0; t < n; t++) {
    const dlpg__param_table_t *tb = &dlpg__tables[t];
    fprintf(f, "  %s:\n", tb->owner);
    for (int i = 0; i < tb->n; i++) {
      const dlpg__param_decl_t *p = &tb->decls[i];
      const char *env = dlpg__param_env(p);
      const char *val = env ? env : p->def;
      if (env && (p->flags & DLPG__PARAM_SECRET)) val = "(hidden)";
      fprintf(f, "    %-29s = %-12s (default %s%s) %s\n", p->env, val ? val : "(unset)",
              p->def ? p->def : "unset", env ? "; set in the environment" : "", p->desc);
    }
  }
}
