// Loads a dlpg plugin by path through dlopen + dlpg_get_api, so the same test binary checks
// any library that implements the ABI (the conformance suite a framework CI runs).
// The path comes from DLPG_PLUGIN, else the libdlpg.so this build made (DLPG_DEFAULT_PLUGIN).
#pragma once

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "dlpg/dlpg.h"

#ifndef DLPG_DEFAULT_PLUGIN
#define DLPG_DEFAULT_PLUGIN "libdlpg.so"
#endif

// The plugin's table, loaded once per process (after fork the child inherits it). Exits the
// test program with a message when the plugin cannot be loaded: nothing else can run then.
inline const dlpg_api_t *dlpg_test_api() {
  static const dlpg_api_t *api = nullptr;
  if (api) return api;
  const char *path = getenv("DLPG_PLUGIN");
  if (!path || !*path) path = DLPG_DEFAULT_PLUGIN;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot dlopen plugin %s: %s\n", path, dlerror());
    exit(2);
  }
  auto get = reinterpret_cast<dlpg_get_api_fn>(dlsym(h, "dlpg_get_api"));
  if (!get) {
    fprintf(stderr, "plugin %s has no dlpg_get_api\n", path);
    exit(2);
  }
  api = get(DLPG_ABI_MAJOR);
  if (!api || api->struct_size < sizeof(dlpg_api_t) || api->abi_major != DLPG_ABI_MAJOR) {
    fprintf(stderr, "plugin %s does not implement ABI %d\n", path, DLPG_ABI_MAJOR);
    exit(2);
  }
  return api;
}
