/* Loading a backend module (see backend.h): the lazy dlopen through its versioned entry
 * point (core/group/backend_abi.h), the host services it gets instead of linking core, the load
 * failure repeated to every later call, and the build-info line that says where each module
 * was looked for. */
#include "core/lines/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "core/lines/tensor.h"
#include "core/group/work.h"

/* Load state of each module slot, under dlpg__modules_mu. */
typedef struct dlpg__slot {
  int tried, loaded;
  char path[1024];     /* where the module was looked for */
  char why[768];       /* the load failure, repeated to every later call */
} dlpg__slot_t;

static dlpg__slot_t dlpg__slots[DLPG__BACKEND_MAX];
static pthread_mutex_t dlpg__slots_mu = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------ the host table */

_Static_assert(DLPG__BE_LOG_WARN == DLPG__LOG_WARN && DLPG__BE_LOG_INFO == DLPG__LOG_INFO &&
                   DLPG__BE_LOG_TRACE == DLPG__LOG_TRACE,
               "the ABI's log levels are base/log.h's");

static int dlpg__host_log_enabled(int level, int subsys) {
  return dlpg__log_enabled((dlpg__log_level_t)level, (dlpg__log_subsys_t)subsys);
}

static void dlpg__host_vlog(int level, int subsys, int rank, const char *fmt, va_list ap) {
  dlpg__vlog((dlpg__log_level_t)level, (dlpg__log_subsys_t)subsys, rank, fmt, ap);
}

/* A backend's declared variables, read through base/params (its table is registered when
 * the module loads): cached ones once, the others at each use. */

static const char *dlpg__host_param_str(const dlpg__be_param_t *p) {
  return p ? dlpg__param_get(dlpg__be_param_decl(p)) : NULL;
}

static int dlpg__host_param_long(const dlpg__be_param_t *p, long *out) {
  return p ? dlpg__param_get_long(dlpg__be_param_decl(p), out) : 0;
}

static int dlpg__host_param_default_env(const dlpg__be_param_t *p, const char *value) {
  return p ? dlpg__param_set_default_env(dlpg__be_param_decl(p), value) : 0;
}

static dlpg_status_t dlpg__host_store_get(dlpg_store_t *s, const char *key, double timeout_s,
                                          void *buf, size_t cap, size_t *len) {
  return dlpg_store_get(s, key, timeout_s, buf, cap, len);
}

static const dlpg__host_t dlpg__host = {
    .struct_size = sizeof(dlpg__host_t),
    .version = DLPG__BACKEND_ABI_VERSION,
    .verror = dlpg__verror,
    .error_prefix = dlpg__error_prefix,
    .last_error = dlpg__last_error,
    .clear_error = dlpg__clear_error,
    .log_subsys = dlpg__log_subsys_register,
    .log_enabled = dlpg__host_log_enabled,
    .vlog = dlpg__host_vlog,
    .param_str = dlpg__host_param_str,
    .param_long = dlpg__host_param_long,
    .param_default_env = dlpg__host_param_default_env,
    .op_name = dlpg__op_name,
    .dtype_name = dlpg__dtype_name,
    .reduce_op_name = dlpg__reduce_op_name,
    .work_complete = dlpg__work_complete,
    .work_set_backend = dlpg__work_set_backend,
    .store_set = dlpg_store_set,
    .store_get = dlpg__host_store_get,
};

/* The module's path: its parameter when set, else module_file beside the object holding
 * core (libdlpg.so, or the executable a tool or white-box test links core into); when no
 * such file exists, the bare file name, for the loader's search path (the RUNPATH of such
 * an executable, LD_LIBRARY_PATH). */
static void dlpg__module_path(const dlpg__backend_entry_t *e, char *out, size_t cap) {
  const char *p = dlpg__param_str(e->module_param);
  if (p && p[0]) {
    snprintf(out, cap, "%s", p);
    return;
  }
  Dl_info info;
  const char *self = NULL;
  if (dladdr((void *)&dlpg__backend_get, &info) && info.dli_fname) self = info.dli_fname;
  const char *slash = self ? strrchr(self, '/') : NULL;
  if (slash) {
    snprintf(out, cap, "%.*s/%s", (int)(slash - self), self, e->module_file);
    if (access(out, F_OK) == 0) return;
  }
  snprintf(out, cap, "%s", e->module_file);
}

/* The file name of path, for the version messages. */
static const char *dlpg__base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* A module without this version's entry point: does it export another version's? Then the
 * message names both; a module can export only one (its version script). */
static void dlpg__module_no_entry(void *h, const char *path, char *why, size_t cap) {
  /* Copied: the next dlsym frees dlerror's string. */
  const char *e = dlerror();
  char err[512];
  snprintf(err, sizeof err, "%s", e ? e : "dlsym failed");
  char other[64];
  for (int v = 0; v < 100; v++) {
    if (v == DLPG__BACKEND_ABI_VERSION) continue;
    snprintf(other, sizeof other, DLPG__BACKEND_INIT_PREFIX "%d", v);
    if (dlsym(h, other)) {
      snprintf(why, cap, "%s: module speaks backend ABI v%d, this libdlpg.so speaks v%d "
               "(rebuild the module from the same dlpg version)", dlpg__base_name(path), v,
               DLPG__BACKEND_ABI_VERSION);
      return;
    }
  }
  snprintf(why, cap, "it has no entry point %s: %s", DLPG__BACKEND_INIT_NAME, err);
}

/* Whether the module's table is of this version and size, else why not (naming both). Only
 * the header (struct_size, version, host_size, the same in every version) is read first. */
static int dlpg__module_table_ok(const dlpg__backend_vtbl_t *vt, const char *path, char *why,
                                 size_t cap) {
  const char *base = dlpg__base_name(path);
  /* A table of this version may end before fields appended since (core reads those only
   * when struct_size covers them), never after the last one core knows. */
  if (vt->version != DLPG__BACKEND_ABI_VERSION || vt->struct_size < DLPG__BACKEND_VTBL_MIN_SIZE ||
      vt->struct_size > sizeof *vt) {
    snprintf(why, cap, "%s: module speaks backend ABI v%d (a backend table of %zu bytes), this "
             "libdlpg.so speaks v%d (%zu bytes) (rebuild the module from the same dlpg version)",
             base, vt->version, vt->struct_size, DLPG__BACKEND_ABI_VERSION, sizeof *vt);
    return 0;
  }
  if (vt->host_size > sizeof(dlpg__host_t)) {
    snprintf(why, cap, "%s: module needs a host table of %zu bytes, this libdlpg.so (backend "
             "ABI v%d) offers %zu (rebuild the module from the same dlpg version)", base,
             vt->host_size, DLPG__BACKEND_ABI_VERSION, sizeof(dlpg__host_t));
    return 0;
  }
  return 1;
}

/* Load slot's module (under dlpg__slots_mu, once). */
static void dlpg__module_load(int slot) {
  dlpg__slot_t *s = &dlpg__slots[slot];
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  s->tried = 1;
  dlpg__module_path(e, s->path, sizeof s->path);
  DLPG_INFO(INIT, -1, "loading the %s backend module %s", e->name, s->path);
  void *h = dlopen(s->path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *err = dlerror();
    snprintf(s->why, sizeof s->why, "dlopen failed: %s", err ? err : "unknown error");
    return;
  }
  dlpg__backend_init_fn init = NULL;
  *(void **)&init = dlsym(h, DLPG__BACKEND_INIT_NAME);
  if (!init) {
    dlpg__module_no_entry(h, s->path, s->why, sizeof s->why);
    dlclose(h);
    return;
  }
  const dlpg__backend_vtbl_t *vt = NULL;
  dlpg__clear_error();
  dlpg_status_t st = init(&dlpg__host, &vt);
  if (st != DLPG_OK) {
    /* A module that could not report (the host table too small for its verror) still
     * hands its table, whose header says what it speaks. */
    if (dlpg__last_error()[0] || !vt || dlpg__module_table_ok(vt, s->path, s->why, sizeof s->why))
      snprintf(s->why, sizeof s->why, "its initialisation failed: %s",
               dlpg__last_error()[0] ? dlpg__last_error() : dlpg_status_name(st));
    dlclose(h);
    return;
  }
  if (!vt) {
    snprintf(s->why, sizeof s->why, "its initialisation returned no backend table");
    dlclose(h);
    return;
  }
  if (!dlpg__module_table_ok(vt, s->path, s->why, sizeof s->why)) {
    dlclose(h);
    return;
  }
  if ((vt->devices & e->devices) != e->devices || !vt->check || !vt->issue ||
      !vt->state_create || !vt->abort || !vt->destroy || !vt->build_info ||
      vt->nparams < 0 || (vt->nparams > 0 && !vt->params)) {
    snprintf(s->why, sizeof s->why, "its table is incomplete or does not serve the devices "
             "the registry lists");
    dlclose(h); /* never loaded for good: no state of it exists */
    return;
  }
  /* Record where the loader found it (a bare name resolves through the search path). */
  Dl_info where;
  if (dladdr(*(void **)&init, &where) && where.dli_fname)
    snprintf(s->path, sizeof s->path, "%s", where.dli_fname);
  /* Kept loaded for the life of the process: groups and pollers hold its state. */
  DLPG_INFO(INIT, -1, "loaded the %s backend module %s (%s)", e->name, s->path,
            vt->build_info());
  s->loaded = 1;
  dlpg__backend_publish(slot, vt);
}

dlpg_status_t dlpg__backend_get(const char *fn, int slot, const dlpg__backend_vtbl_t **out) {
  const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(slot);
  if (vt) {
    *out = vt;
    return DLPG_OK;
  }
  if (!dlpg__backend_entry(slot))
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: backend slot %d out of range", fn, slot);
  pthread_mutex_lock(&dlpg__slots_mu);
  if (!dlpg__slots[slot].tried) dlpg__module_load(slot);
  vt = dlpg__backend_loaded(slot);
  char path[sizeof dlpg__slots[slot].path], why[sizeof dlpg__slots[slot].why];
  memcpy(path, dlpg__slots[slot].path, sizeof path);
  memcpy(why, dlpg__slots[slot].why, sizeof why);
  pthread_mutex_unlock(&dlpg__slots_mu);
  if (vt) {
    *out = vt;
    return DLPG_OK;
  }
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  return dlpg__error(DLPG_ERR_UNSUPPORTED,
                     "%s: the %s backend module %s could not be loaded (%s); set %s to its "
                     "path, or use CPU tensors",
                     fn, e->name, path, why, dlpg__param_env_name(e->module_param));
}

void dlpg__backend_info(char *buf, size_t cap, int load) {
  size_t len = 0;
  int n = dlpg__backend_count();
  for (int i = 0; i < n && len < cap; i++) {
    const dlpg__backend_entry_t *e = dlpg__backend_entry(i);
    const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(i);
    if (!vt && load) dlpg__backend_get("dlpg", i, &vt) == DLPG_OK ? (void)0 : dlpg__clear_error();
    const char *sep = i ? "; " : "";
    if (vt && e->builtin) {
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, vt->build_info());
      continue;
    }
    pthread_mutex_lock(&dlpg__slots_mu);
    dlpg__slot_t s = dlpg__slots[i];
    pthread_mutex_unlock(&dlpg__slots_mu);
    if (vt) {
      len += (size_t)snprintf(buf + len, cap - len, "%s%s (module %s, loaded)", sep,
                              vt->build_info(), s.path);
      continue;
    }
    char path[1024];
    if (s.tried) snprintf(path, sizeof path, "%s", s.path);
    else dlpg__module_path(e, path, sizeof path);
    /* A bare name was not beside core: the loader's search path decides. */
    const char *found = !strchr(path, '/') ? "searched on the loader's path"
                        : access(path, R_OK) == 0 ? "found" : "not found";
    if (s.tried)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s none (module %s %s, not loaded: %s)",
                              sep, e->name, path, found, s.why);
    else
      len += (size_t)snprintf(buf + len, cap - len, "%s%s module %s %s, not loaded yet", sep,
                              e->name, path, found);
  }
}

