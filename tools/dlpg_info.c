/* dlpg-info: prints the library's version, what it was built with, each backend (built in or
 * a module: where it was looked for, whether it loaded and why not), and every parameter
 * (environment variable) with its current value, default and meaning, owner by owner: core's,
 * each built-in backend's and each loaded module's (a module registers its own when it
 * loads, so the backends are loaded first). */
#include <stdio.h>
#include <string.h>

#include "core/lines/backend.h"
#include "base/params.h"
#include "dlpg/dlpg.h"

static void dlpg__usage(FILE *f) {
  fprintf(f,
          "usage: dlpg-info\n"
          "  Print dlpg's version, what it was built with, each backend (built in or a module:\n"
          "  whether it loaded and why not) and every DLPG_* environment variable with its\n"
          "  value, default and meaning. Takes no arguments.\n");
}

int main(int argc, char **argv) {
  if (argc > 1) {
    int help = strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0;
    if (!help) fprintf(stderr, "dlpg-info: unknown argument '%s'\n", argv[1]);
    dlpg__usage(help ? stdout : stderr);
    return help ? 0 : 2;
  }
  int code = 0;
  const char *info = NULL;
  if (dlpg_get_version(&code) != DLPG_OK || dlpg_get_build_info(&info) != DLPG_OK) {
    fprintf(stderr, "dlpg-info: %s\n", dlpg_last_error());
    return 1;
  }
  printf("dlpg version code %d (header %d), ABI major %d\n", code, DLPG_VERSION_CODE,
         DLPG_ABI_MAJOR);
  printf("build: %s\n", info);
  printf("backends:\n");
  for (int i = 0; i < dlpg__backend_count(); i++) {
    const dlpg__backend_entry_t *e = dlpg__backend_entry(i);
    const dlpg__backend_vtbl_t *be = NULL;
    if (dlpg__backend_get("dlpg-info", i, &be) == DLPG_OK) {
      char devices[128];
      dlpg__backend_line_devices(i, devices, sizeof devices);
      printf("  %-6s %s: %s; serves %s\n", e->name, e->builtin ? "built in" : "module loaded",
             be->build_info(), devices);
      /* Where a backend of several for one device serves a group, and what this process
       * would publish (the per-group choice, DLPG_CPU_BACKEND, core/lines/backend.h). */
      char where[512];
      if (be->locality && be->locality(where, sizeof where) == DLPG_OK)
        printf("         collectives of groups whose ranks all run at \"%s\" (this process)\n",
               where);
      if (be->kinds && !(be->kinds & DLPG__KIND_BIT(DLPG__OP_SEND)))
        printf("         sends and receives: the next backend serving these devices\n");
    } else
      printf("  %-6s not loaded: %s\n", e->name, dlpg_last_error());
  }
  printf("host memory: each group chooses, at its first collective, the first backend above\n"
         "whose locality all its ranks share (DLPG_CPU_BACKEND=%s)\n",
         dlpg__param_str(DLPG__PARAM_CPU_BACKEND));
  printf("parameters (by owner; a module's once it is loaded, as above):\n");
  dlpg__params_print(stdout);
  return 0;
}
