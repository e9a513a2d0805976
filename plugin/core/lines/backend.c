/* Backend registration and lookup (see backend.h): the lines the registry hands core, their
 * device masks and names, each slot's table once loaded, and the per-group state slots.
 * Loading a module is core/lines/module.c's, above this file (it hands modules the work functions
 * that sit above these lookups). */
#include "core/lines/backend.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/group/group.h"
#include "base/status.h"
#include "core/lines/tensor.h"

/* Each slot's table once loaded: a module's is published once (release) by core/lines/module.c,
 * and read lock-free. */
static const dlpg__backend_vtbl_t *dlpg__published[DLPG__BACKEND_MAX];
_Static_assert(DLPG__BACKEND_MAX == DLPG__GROUP_BACKEND_SLOTS, "one group slot per backend");
static pthread_mutex_t dlpg__slots_mu = PTHREAD_MUTEX_INITIALIZER;

/* The registered lines, in registration order. Written by the registry's constructor before
 * any operation; the count is published last (release), so readers need no lock. */
static const dlpg__backend_entry_t *dlpg__entries[DLPG__BACKEND_MAX];
static int dlpg__nentries;

/* The table a backend hands core must be of this version and size: a built-in one always
 * is (it is compiled with this header); a module's is checked at load. */
static int dlpg__table_known(const dlpg__backend_vtbl_t *vt) {
  return vt->version == DLPG__BACKEND_ABI_VERSION && vt->struct_size >= DLPG__BACKEND_VTBL_MIN_SIZE &&
         vt->struct_size <= sizeof *vt &&
         vt->host_size <= sizeof(dlpg__host_t);
}

_Static_assert(sizeof(dlpg__be_param_t) == sizeof(dlpg__param_decl_t) &&
                   offsetof(dlpg__be_param_t, env) == offsetof(dlpg__param_decl_t, env) &&
                   offsetof(dlpg__be_param_t, def) == offsetof(dlpg__param_decl_t, def) &&
                   offsetof(dlpg__be_param_t, flags) == offsetof(dlpg__param_decl_t, flags) &&
                   offsetof(dlpg__be_param_t, desc) == offsetof(dlpg__param_decl_t, desc) &&
                   DLPG__BE_PARAM_CACHED == DLPG__PARAM_CACHED &&
                   DLPG__BE_PARAM_SECRET == DLPG__PARAM_SECRET,
               "the ABI's parameter declaration is base/params.h's");

/* A table's variables are listed under its name (dlpg-info) and its log subsystem becomes
 * known by name (DLPG_DEBUG_SUBSYS may select it): at registration for a built-in table, at
 * load for a module's. */
static void dlpg__table_settings_register(const dlpg__backend_vtbl_t *vt) {
  if (vt->log_subsys) dlpg__log_subsys_register(vt->log_subsys);
  if (vt->nparams > 0) dlpg__params_register(vt->name, dlpg__be_param_decl(vt->params), vt->nparams);
}

/* A module's log subsystem is known before the module loads, by the registry's name for it
 * in capitals (as a module names its own subsystem), so DLPG_DEBUG_SUBSYS, read at the first
 * line, may name it without being warned about; the module's registration finds the same
 * bit (names match without case). */
static void dlpg__module_subsys_expect(const char *name) {
  char up[16];
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n >= sizeof up) return;
  for (size_t i = 0; i <= n; i++) up[i] = (char)toupper((unsigned char)name[i]);
  dlpg__log_subsys_register(up);
}

int dlpg__backend_register(const dlpg__backend_entry_t *e) {
  pthread_mutex_lock(&dlpg__slots_mu);
  int slot = dlpg__nentries;
  /* A built-in table is compiled with this kinds table: it lists its kinds (0 is left to
   * modules built when it meant every kind, backend_abi.h). */
  int no_kinds = e && e->builtin && e->builtin->kinds == 0;
  if (slot < DLPG__BACKEND_MAX && e && !no_kinds &&
      (!e->builtin || dlpg__table_known(e->builtin))) {
    dlpg__entries[slot] = e;
    __atomic_store_n(&dlpg__nentries, slot + 1, __ATOMIC_RELEASE);
  } else {
    slot = -1;
  }
  pthread_mutex_unlock(&dlpg__slots_mu);
  if (slot >= 0 && e->builtin) dlpg__table_settings_register(e->builtin);
  if (slot >= 0 && !e->builtin) dlpg__module_subsys_expect(e->name);
  if (slot < 0)
    DLPG_WARN(INIT, -1, "backend %s not registered: %s", e && e->name ? e->name : "(null)",
              dlpg__nentries >= DLPG__BACKEND_MAX ? "DLPG__BACKEND_MAX backends are registered"
              : no_kinds ? "its table lists no operation kinds (kinds is 0)"
                         : "its table is of another ABI version");
  return slot;
}

int dlpg__backend_count(void) { return __atomic_load_n(&dlpg__nentries, __ATOMIC_ACQUIRE); }

const dlpg__backend_entry_t *dlpg__backend_entry(int slot) {
  return slot >= 0 && slot < dlpg__backend_count() ? dlpg__entries[slot] : NULL;
}

int dlpg__backend_for_device(int device_type) {
  if (device_type < 0 || device_type >= 32) return -1;
  int n = dlpg__backend_count();
  for (int i = 0; i < n; i++)
    if (dlpg__entries[i]->devices & DLPG__DEV_BIT(device_type)) return i;
  return -1;
}

void dlpg__backend_devices(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  int n = dlpg__backend_count();
  for (int i = 0; i < n && len < cap; i++) {
    len += (size_t)snprintf(buf + len, cap - len, "%s", i ? "; " : "");
    int first = 1;
    for (int d = 0; d < 32 && len < cap; d++)
      if (dlpg__entries[i]->devices & DLPG__DEV_BIT(d)) {
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", first ? "" : ", ",
                                dlpg__device_name(d));
        first = 0;
      }
    if (len < cap)
      len += (size_t)snprintf(buf + len, cap - len, " (%s)", dlpg__entries[i]->name);
  }
}

void dlpg__backend_line_devices(int slot, char *buf, size_t cap) {
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  size_t len = 0;
  buf[0] = 0;
  for (int d = 0; e && d < 32 && len < cap; d++)
    if (e->devices & DLPG__DEV_BIT(d))
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", dlpg__device_name(d));
}

const char *dlpg__backend_name(int slot) {
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  return e ? e->name : "no backend";
}

const dlpg__backend_vtbl_t *dlpg__backend_loaded(int slot) {
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  if (!e) return NULL;
  if (e->builtin) return e->builtin;
  return __atomic_load_n(&dlpg__published[slot], __ATOMIC_ACQUIRE);
}

void dlpg__backend_publish(int slot, const dlpg__backend_vtbl_t *vt) {
  dlpg__table_settings_register(vt);
  __atomic_store_n(&dlpg__published[slot], vt, __ATOMIC_RELEASE);
}

dlpg_status_t dlpg__backend_p2p_state(struct dlpg_group *g, int slot, void **state) {
  void *s = __atomic_load_n(&g->p2p_state[slot], __ATOMIC_ACQUIRE);
  if (s) {
    *state = s;
    return DLPG_OK;
  }
  const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(slot);
  if (!vt || !dlpg__vtbl_has(vt, p2p_state_create))
    return dlpg__error(DLPG_ERR_INTERNAL, "backend %s has no state for sends and receives",
                       dlpg__backend_name(slot));
  dlpg_status_t st = DLPG_OK;
  pthread_mutex_lock(&g->be_mu);
  s = g->p2p_state[slot];
  if (!s) {
    st = vt->p2p_state_create(&g->view, &s);
    if (st == DLPG_OK) __atomic_store_n(&g->p2p_state[slot], s, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g->be_mu);
  if (st == DLPG_OK) *state = s;
  return st;
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
    /* A child seeded by its parent's state starts from the seed, which the backend owns
     * from here whatever the outcome. */
    void *seed = g->be_seed[slot];
    g->be_seed[slot] = NULL;
    if (seed && dlpg__vtbl_has(vt, state_create_seeded))
      st = vt->state_create_seeded(&g->view, seed, &s);
    else
      st = vt->state_create(&g->view, &s);
    if (st == DLPG_OK) __atomic_store_n(&g->be_state[slot], s, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g->be_mu);
  if (st == DLPG_OK) *state = s;
  return st;
}
