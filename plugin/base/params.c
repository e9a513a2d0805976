/* Every environment variable dlpg reads (params.h, DLPG__PARAM_MAP). This is the only file
 * that calls getenv(). Tuning variables are read once, under pthread_once, and cached for
 * the life of the process; launcher variables (RANK, WORLD_SIZE, MASTER_*) are read at each
 * use because a host may set them after loading the library. */
#include "base/params.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

typedef struct dlpg__param_def {
  const char *env;
  const char *def;
  int cached;
  const char *desc;
} dlpg__param_def_t;

static const dlpg__param_def_t dlpg__params[DLPG__PARAM_COUNT] = {
#define DLPG__PARAM_DEF(id, env, def, cached, desc) {env, def, cached, desc},
    DLPG__PARAM_MAP(DLPG__PARAM_DEF)
#undef DLPG__PARAM_DEF
};

/* Cached environment values (NULL when unset or empty). The strings are copies, so a later
 * setenv() by the host cannot invalidate them; they live until the process ends. */
static const char *dlpg__param_cache[DLPG__PARAM_COUNT];
static pthread_once_t dlpg__param_once = PTHREAD_ONCE_INIT;

const char *dlpg__param_env_name(dlpg__param_id_t id) {
  if ((int)id < 0 || id >= DLPG__PARAM_COUNT) return "?";
  return dlpg__params[id].env;
}

static const char *dlpg__env_value(const char *name) {
  const char *v = getenv(name);
  return (v && v[0]) ? v : NULL;
}

static void dlpg__params_load(void) {
  for (int i = 0; i < DLPG__PARAM_COUNT; i++) {
    if (!dlpg__params[i].cached) continue;
    const char *v = dlpg__env_value(dlpg__params[i].env);
    dlpg__param_cache[i] = v ? strdup(v) : NULL;
  }
}

/* The environment's value only (no default), cached or fresh as the table says. */
static const char *dlpg__param_env(dlpg__param_id_t id) {
  if ((int)id < 0 || id >= DLPG__PARAM_COUNT) return NULL;
  if (!dlpg__params[id].cached) return dlpg__env_value(dlpg__params[id].env);
  pthread_once(&dlpg__param_once, dlpg__params_load);
  return dlpg__param_cache[id];
}

const char *dlpg__param_str(dlpg__param_id_t id) {
  if ((int)id < 0 || id >= DLPG__PARAM_COUNT) return NULL;
  const char *v = dlpg__param_env(id);
  return v ? v : dlpg__params[id].def;
}

int dlpg__param_default_env(dlpg__param_id_t id, const char *value) {
  if ((int)id < 0 || id >= DLPG__PARAM_COUNT || !value) return 0;
  return dlpg__param_env(id) == NULL && setenv(dlpg__params[id].env, value, 0) == 0;
}

int dlpg__param_double(dlpg__param_id_t id, double *out) {
  const char *v = dlpg__param_str(id);
  if (!v) return 0;
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (end == v || (end && *end) || errno == ERANGE) {
    DLPG_WARN(INIT, -1, "%s=\"%s\" is not a number; ignored", dlpg__params[id].env, v);
    return 0;
  }
  if (out) *out = d;
  return 1;
}

int dlpg__param_parse_long(const char *env, const char *v, long *out) {
  char *end = NULL;
  errno = 0;
  long l = strtol(v, &end, 10);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (end == v || (end && *end) || errno == ERANGE) {
    DLPG_WARN(INIT, -1, "%s=\"%s\" is not an integer; ignored", env, v);
    return 0;
  }
  if (out) *out = l;
  return 1;
}

int dlpg__param_long(dlpg__param_id_t id, long *out) {
  const char *v = dlpg__param_str(id);
  return v ? dlpg__param_parse_long(dlpg__params[id].env, v, out) : 0;
}

void dlpg__params_print(FILE *f) {
  if (!f) return;
  for (int i = 0; i < DLPG__PARAM_COUNT; i++) {
    const dlpg__param_def_t *p = &dlpg__params[i];
    const char *env = dlpg__param_env((dlpg__param_id_t)i);
    const char *val = env ? env : p->def;
    if (env && i == DLPG__PARAM_STORE_TOKEN) val = "(hidden)"; /* a secret */
    fprintf(f, "  %-24s = %-12s (default %s%s) %s\n", p->env, val ? val : "(unset)",
            p->def ? p->def : "unset", env ? "; set in the environment" : "", p->desc);
  }
}

/* ------------------------------------------------------------------ owners' declarations */

/* Variables a backend declares in its own table: one cache line per declaration, filled at
 * its first read. Few exist (a handful per backend), so a short list under a lock serves;
 * the values are copies that live until the process ends. */
#define DLPG__PARAM_DECL_MAX 64
static struct {
  const void *decl;
  const char *value;
} dlpg__param_decls[DLPG__PARAM_DECL_MAX];
static int dlpg__param_ndecls;
static pthread_mutex_t dlpg__param_decls_mu = PTHREAD_MUTEX_INITIALIZER;

/* decl's line, read from the environment when new (caller holds the lock); -1 when full. */
static int dlpg__param_decl_line(const void *decl, const char *env) {
  for (int i = 0; i < dlpg__param_ndecls; i++)
    if (dlpg__param_decls[i].decl == decl) return i;
  if (dlpg__param_ndecls == DLPG__PARAM_DECL_MAX) return -1;
  const char *v = dlpg__env_value(env);
  int i = dlpg__param_ndecls++;
  dlpg__param_decls[i].decl = decl;
  dlpg__param_decls[i].value = v ? strdup(v) : NULL;
  return i;
}

const char *dlpg__param_decl_env(const void *decl, const char *env) {
  pthread_mutex_lock(&dlpg__param_decls_mu);
  int i = dlpg__param_decl_line(decl, env);
  const char *v = i >= 0 ? dlpg__param_decls[i].value : dlpg__env_value(env);
  pthread_mutex_unlock(&dlpg__param_decls_mu);
  return v;
}

int dlpg__param_decl_default_env(const void *decl, const char *env, const char *value) {
  if (!value) return 0;
  pthread_mutex_lock(&dlpg__param_decls_mu);
  int i = dlpg__param_decl_line(decl, env);
  int set = 0;
  if (i >= 0 ? dlpg__param_decls[i].value == NULL : dlpg__env_value(env) == NULL) {
    set = setenv(env, value, 0) == 0;
    if (set && i >= 0) dlpg__param_decls[i].value = strdup(value);
  }
  pthread_mutex_unlock(&dlpg__param_decls_mu);
  return set;
}
