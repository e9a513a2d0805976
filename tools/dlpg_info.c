/* dlpg-info: prints the library's version, what it was built with, and every parameter
 * (DLPG_* environment variable) with its current value, default and meaning. */
#include <stdio.h>

#include "core/params.h"
#include "dlpg/dlpg.h"

int main(void) {
  int code = 0;
  const char *info = NULL;
  if (dlpg_get_version(&code) != DLPG_OK || dlpg_get_build_info(&info) != DLPG_OK) {
    fprintf(stderr, "dlpg-info: %s\n", dlpg_last_error());
    return 1;
  }
  printf("dlpg version code %d (header %d), ABI major %d\n", code, DLPG_VERSION_CODE,
         DLPG_ABI_MAJOR);
  printf("build: %s\n", info);
  printf("parameters:\n");
  dlpg__params_print(stdout);
  return 0;
}
