/*
 * loader.c -- binding libdlpg_xla.so to the host's libdlpg.so (dlopen + dlpg_get_api) and
 * the table of groups that compiled JAX computations name by id.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "xla_ffi.h"

#define DLPG_XLA_SLOTS 256

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const dlpg_api_t *g_api;  /* written once under g_mu, then only read */
static char g_path[4096];
/* Slot s holds a group and a generation; the id is generation * DLPG_XLA_SLOTS + s + 1,
 * so an id that outlives its group never matches the slot's next tenant. */
static struct {
  dlpg_group_t *group;
  int64_t generation;
} g_slots[DLPG_XLA_SLOTS];
static _Thread_local char g_error[1024];

static dlpg_status_t fail(dlpg_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static dlpg_status_t fail(dlpg_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  return st;
}

const char *dlpg_xla_last_error(void) { return g_error; }

const char *dlpg_xla_build_info(void) {
  static char info[128];
  snprintf(info, sizeof info, "xla ffi api %d.%d (header), device ordinal: %s",
           XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR,
#ifdef DLPG_XLA_HAVE_DEVICE_ORDINAL
           "yes"
#else
           "no"
#endif
  );
  return info;
}

/* The last field this library uses; a table shorter than that is from an older dlpg. */
#define DLPG_XLA_API_NEEDED (offsetof(dlpg_api_t, work_free) + sizeof(void *))

dlpg_status_t dlpg_xla_load(const char *path) {
  g_error[0] = '\0';
  if (path == NULL || path[0] == '\0')
    return fail(DLPG_ERR_INVALID_ARGUMENT, "dlpg_xla_load: path is NULL or empty");
  pthread_mutex_lock(&g_mu);
  if (g_api != NULL) {
    int same = strcmp(g_path, path) == 0;
    pthread_mutex_unlock(&g_mu);
    if (same) return DLPG_OK;
    return fail(DLPG_ERR_INVALID_ARGUMENT,
                "dlpg_xla_load: already bound to %s; cannot rebind to %s (one libdlpg per "
                "process: its group handles are what the handlers use)", g_path, path);
  }
  /* The host loaded this path already, so dlopen returns that same copy. RTLD_NODELETE:
   * handlers may run until the process exits. */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (h == NULL) {
    const char *why = dlerror();
    pthread_mutex_unlock(&g_mu);
    return fail(DLPG_ERR_UNSUPPORTED, "dlpg_xla_load: cannot dlopen %s: %s", path,
                why ? why : "unknown error");
  }
  dlpg_get_api_fn get = (dlpg_get_api_fn)(uintptr_t)dlsym(h, "dlpg_get_api");
  const dlpg_api_t *api = get ? get(DLPG_ABI_MAJOR) : NULL;
  if (api == NULL || api->struct_size < DLPG_XLA_API_NEEDED) {
    pthread_mutex_unlock(&g_mu);
    return fail(DLPG_ERR_UNSUPPORTED,
                "dlpg_xla_load: %s has %s (ABI major %d, table of %zu bytes; need >= %zu)",
                path, get ? "no usable dlpg_get_api table" : "no dlpg_get_api symbol",
                DLPG_ABI_MAJOR, api ? api->struct_size : (size_t)0,
                (size_t)DLPG_XLA_API_NEEDED);
  }
  snprintf(g_path, sizeof g_path, "%s", path);
  __atomic_store_n(&g_api, api, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_mu);
  return DLPG_OK;
}

const dlpg_api_t *dlpg_xla__api(void) { return __atomic_load_n(&g_api, __ATOMIC_ACQUIRE); }

dlpg_status_t dlpg_xla_group_register(dlpg_group_t *group, int64_t *id) {
  g_error[0] = '\0';
  if (group == NULL || id == NULL)
    return fail(DLPG_ERR_INVALID_ARGUMENT, "dlpg_xla_group_register: %s is NULL",
                group == NULL ? "group" : "id");
  pthread_mutex_lock(&g_mu);
  for (int s = 0; s < DLPG_XLA_SLOTS; s++) {
    if (g_slots[s].group == NULL) {
      g_slots[s].group = group;
      g_slots[s].generation++;
      *id = g_slots[s].generation * DLPG_XLA_SLOTS + s + 1;
      pthread_mutex_unlock(&g_mu);
      return DLPG_OK;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return fail(DLPG_ERR_UNSUPPORTED,
              "dlpg_xla_group_register: all %d slots hold live groups (unregister one first)",
              DLPG_XLA_SLOTS);
}

static int slot_of(int64_t id) {
  if (id <= 0) return -1;
  return (int)((id - 1) % DLPG_XLA_SLOTS);
}

dlpg_status_t dlpg_xla_group_unregister(int64_t id) {
  g_error[0] = '\0';
  int s = slot_of(id);
  pthread_mutex_lock(&g_mu);
  if (s >= 0 && g_slots[s].group != NULL &&
      g_slots[s].generation == (id - 1) / DLPG_XLA_SLOTS) {
    g_slots[s].group = NULL;
    pthread_mutex_unlock(&g_mu);
    return DLPG_OK;
  }
  pthread_mutex_unlock(&g_mu);
  return fail(DLPG_ERR_INVALID_ARGUMENT, "dlpg_xla_group_unregister: id %lld is not registered",
              (long long)id);
}

dlpg_group_t *dlpg_xla__group(int64_t id) {
  int s = slot_of(id);
  if (s < 0) return NULL;
  pthread_mutex_lock(&g_mu);
  dlpg_group_t *g = g_slots[s].generation == (id - 1) / DLPG_XLA_SLOTS ? g_slots[s].group : NULL;
  pthread_mutex_unlock(&g_mu);
  return g;
}
