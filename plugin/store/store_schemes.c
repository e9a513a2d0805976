/* The registry of store URL schemes served outside plugin/store (store.h,
 * dlpg__store_register_scheme): file:// registers from the Gloo island when the plugin
 * loads, so the store never includes its backends. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "store/store.h"
#include "store/store_internal.h"

/* Schemes registered from outside the store (static constructors run before any open). */
static struct {
  char scheme[16];
  dlpg__store_opener_t open;
} dlpg__schemes[DLPG__STORE_MAX_SCHEMES];
static int dlpg__nschemes;
static pthread_mutex_t dlpg__schemes_mu = PTHREAD_MUTEX_INITIALIZER;

dlpg_status_t dlpg__store_register_scheme(const char *scheme, dlpg__store_opener_t open) {
  static const char fn[] = "dlpg__store_register_scheme";
  DLPG_ARG_CHECK(scheme && open, "%s: scheme or open is NULL", fn);
  size_t n = strlen(scheme);
  DLPG_ARG_CHECK(n > 3 && n < sizeof dlpg__schemes[0].scheme && strcmp(scheme + n - 3, "://") == 0,
                 "%s: scheme \"%s\" is not of the form NAME:// (at most %zu bytes)", fn, scheme,
                 sizeof dlpg__schemes[0].scheme - 1);
  dlpg_status_t st = DLPG_OK;
  pthread_mutex_lock(&dlpg__schemes_mu);
  int i = 0;
  while (i < dlpg__nschemes && strcmp(dlpg__schemes[i].scheme, scheme) != 0) ++i;
  if (i == DLPG__STORE_MAX_SCHEMES) {
    st = dlpg__error(DLPG_ERR_INTERNAL, "%s: no room for scheme \"%s\" (%d registered)", fn,
                     scheme, DLPG__STORE_MAX_SCHEMES);
  } else {
    memcpy(dlpg__schemes[i].scheme, scheme, n + 1);
    dlpg__schemes[i].open = open;
    if (i == dlpg__nschemes) ++dlpg__nschemes;
  }
  pthread_mutex_unlock(&dlpg__schemes_mu);
  return st;
}

/* The registered opener for url's scheme, or NULL; names lists every registered scheme. */
dlpg__store_opener_t dlpg__store_find_scheme(const char *url, char *names, size_t cap) {
  dlpg__store_opener_t found = NULL;
  size_t used = 0;
  names[0] = '\0';
  pthread_mutex_lock(&dlpg__schemes_mu);
  for (int i = 0; i < dlpg__nschemes; ++i) {
    if (strncmp(url, dlpg__schemes[i].scheme, strlen(dlpg__schemes[i].scheme)) == 0)
      found = dlpg__schemes[i].open;
    int w = snprintf(names + used, cap - used, ", %s...", dlpg__schemes[i].scheme);
    if (w > 0 && (size_t)w < cap - used) used += (size_t)w;
  }
  pthread_mutex_unlock(&dlpg__schemes_mu);
  return found;
}

