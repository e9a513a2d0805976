/* Backend lookup and loading (see backend.h): the registry's device masks, the lazy dlopen of
 * a module with the host services it gets instead of linking core, the per-group state slots
 * and the build-info line. */
#include "core/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/group.h"
#include "base/status.h"
#include "core/tensor.h"

/* Load state of each registry slot. vtbl is published once (release) and read lock-free. */
typedef struct dlpg__slot {
  const dlpg__backend_vtbl_t *vtbl;
  int tried;
  char path[1024];     /* where the module was looked for */
  char why[768];       /* the load failure, repeated to every later call */
} dlpg__slot_t;

static dlpg__slot_t dlpg__slots[DLPG__BACKEND_MAX];
_Static_assert(DLPG__BACKEND_MAX == DLPG__GROUP_BACKEND_SLOTS, "one group slot per backend");
static pthread_mutex_t dlpg__slots_mu = PTHREAD_MUTEX_INITIALIZER;

int dlpg__backend_for_device(int device_type) {
  if (device_type < 0 || device_type >= 32) return -1;
  for (int i = 0; i < dlpg__backend_count && i < DLPG__BACKEND_MAX; i++)
    if (dlpg__backend_registry[i].devices & DLPG__DEV_BIT(device_type)) return i;
  return -1;
}

void dlpg__backend_devices(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < dlpg__backend_count && len < cap; i++) {
    len += (size_t)snprintf(buf + len, cap - len, "%s", i ? "; " : "");
    int first = 1;
    for (int d = 0; d < 32 && len < cap; d++)
      if (dlpg__backend_registry[i].devices & DLPG__DEV_BIT(d)) {
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", first ? "" : ", ",
                                dlpg__device_name(d));
        first = 0;
      }
    if (len < cap)
      len += (size_t)snprintf(buf + len, cap - len, " (%s)", dlpg__backend_registry[i].name);
  }
}

const char *dlpg__backend_name(int slot) {
  if (slot < 0 || slot >= dlpg__backend_count) return "no backend";
  return dlpg__backend_registry[slot].name;
}

static dlpg_status_t dlpg__host_store_get(dlpg_store_t *s, const char *key, double timeout_s,
                                          void *buf, size_t cap, size_t *len) {
  return dlpg_store_get(s, key, timeout_s, buf, cap, len);
}

static const dlpg__host_t dlpg__host = {
    .struct_size = sizeof(dlpg__host_t),
    .abi = DLPG__HOST_ABI,
    .verror = dlpg__verror,
    .error_prefix = dlpg__error_prefix,
    .last_error = dlpg__last_error,
    .clear_error = dlpg__clear_error,
    .log_enabled = dlpg__log_enabled,
    .vlog = dlpg__vlog,
    .params_register = dlpg__params_register,
    .param_get = dlpg__param_get,
    .param_get_long = dlpg__param_get_long,
    .param_set_default_env = dlpg__param_set_default_env,
    .log_subsys_register = dlpg__log_subsys_register,
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

/* Load slot's module (under dlpg__slots_mu, once). */
static void dlpg__module_load(int slot) {
  dlpg__slot_t *s = &dlpg__slots[slot];
  const dlpg__backend_entry_t *e = &dlpg__backend_registry[slot];
  s->tried = 1;
  dlpg__module_path(e, s->path, sizeof s->path);
  DLPG_INFO(INIT, -1, "loading the %s backend module %s", e->name, s->path);
  void *h = dlopen(s->path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *err = dlerror();
    snprintf(s->why, sizeof s->why, "dlopen failed: %s", err ? err : "unknown error");
    return;
  }
  dlpg__module_init_fn init = NULL;
  *(void **)&init = dlsym(h, e->module_entry);
  if (!init) {
    const char *err = dlerror();
    snprintf(s->why, sizeof s->why, "it has no entry point %s: %s", e->module_entry,
             err ? err : "dlsym failed");
    dlclose(h);
    return;
  }
  const dlpg__backend_vtbl_t *vt = NULL;
  dlpg__clear_error();
  dlpg_status_t st = init(&dlpg__host, &vt);
  if (st != DLPG_OK || !vt) {
    snprintf(s->why, sizeof s->why, "its initialisation failed: %s",
             dlpg__last_error()[0] ? dlpg__last_error() : dlpg_status_name(st));
    dlclose(h);
    return;
  }
  if ((vt->devices & e->devices) != e->devices || !vt->check || !vt->issue ||
      !vt->state_create || !vt->abort || !vt->destroy || !vt->build_info) {
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
  __atomic_store_n(&s->vtbl, vt, __ATOMIC_RELEASE);
}

const dlpg__backend_vtbl_t *dlpg__backend_loaded(int slot) {
  if (slot < 0 || slot >= dlpg__backend_count) return NULL;
  const dlpg__backend_entry_t *e = &dlpg__backend_registry[slot];
  if (e->builtin) return e->builtin;
  return __atomic_load_n(&dlpg__slots[slot].vtbl, __ATOMIC_ACQUIRE);
}

dlpg_status_t dlpg__backend_get(const char *fn, int slot, const dlpg__backend_vtbl_t **out) {
  const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(slot);
  if (vt) {
    *out = vt;
    return DLPG_OK;
  }
  if (slot < 0 || slot >= dlpg__backend_count)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: backend slot %d out of range", fn, slot);
  pthread_mutex_lock(&dlpg__slots_mu);
  if (!dlpg__slots[slot].tried) dlpg__module_load(slot);
  vt = dlpg__slots[slot].vtbl;
  char path[sizeof dlpg__slots[slot].path], why[sizeof dlpg__slots[slot].why];
  memcpy(path, dlpg__slots[slot].path, sizeof path);
  memcpy(why, dlpg__slots[slot].why, sizeof why);
  pthread_mutex_unlock(&dlpg__slots_mu);
  if (vt) {
    *out = vt;
    return DLPG_OK;
  }
  const dlpg__backend_entry_t *e = &dlpg__backend_registry[slot];
  return dlpg__error(DLPG_ERR_UNSUPPORTED,
                     "%s: the %s backend module %s could not be loaded (%s); set %s to its "
                     "path, or use CPU tensors",
                     fn, e->name, path, why, dlpg__param_env_name(e->module_param));
}

dlpg_status_t dlpg__backend_state(struct dlpg_group *g, int slot, void **state) {
  void *s = __atomic_load_n(&g->be_state[slot], __ATOMIC_ACQUIRE);
  if (s) {
    *state = s;
    return DLPG_OK;
  }
  const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(slot);
  if (!vt) return dlpg__error(DLPG_ERR_INTERNAL, "backend %s is not loaded", dlpg__backend_name(slot));
  dlpg_status_t st = DLPG_OK;
  /* Set once, under be_mu, and never cleared while operations run: only the first
   * operation takes the lock. */
  pthread_mutex_lock(&g->be_mu);
  s = g->be_state[slot];
  if (!s) {
    st = vt->state_create(g, &s);
    if (st == DLPG_OK) __atomic_store_n(&g->be_state[slot], s, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g->be_mu);
  if (st == DLPG_OK) *state = s;
  return st;
}

void dlpg__backend_info(char *buf, size_t cap, int load) {
  size_t len = 0;
  for (int i = 0; i < dlpg__backend_count && len < cap; i++) {
    const dlpg__backend_entry_t *e = &dlpg__backend_registry[i];
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
