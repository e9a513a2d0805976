/* Functions of the header whose implementation has not landed yet: each refuses plainly,
 * so a host that finds it in the table learns that instead of crashing. Each moves to its
 * own file when implemented. */
#include "base/status.h"
#include "dlpg/dlpg.h"

#define DLPG__PENDING(fn) \
  return dlpg__error(DLPG_ERR_UNSUPPORTED, fn ": not implemented in this build of dlpg")

dlpg_status_t dlpg_group_split(dlpg_group_t *parent, int color, int key,
                               const dlpg_group_options_t *options, dlpg_group_t **child) {
  (void)parent, (void)color, (void)key, (void)options, (void)child;
  DLPG__PENDING("dlpg_group_split");
}
