/* How messages name a rank of a group (group.h): a child of dlpg_group_split adds the
 * parent rank where it differs, since its users launched, and log, by parent rank. */
#include <stdio.h>

#include "core/group/group.h"

const char *dlpg__rank_num(const struct dlpg_group *g, int r, char *buf, size_t cap) {
  if (g && g->parent_ranks && r >= 0 && r < g->size && g->parent_ranks[r] != r)
    snprintf(buf, cap, "%d (parent rank %d)", r, g->parent_ranks[r]);
  else
    snprintf(buf, cap, "%d", r);
  return buf;
}

const char *dlpg__rank_label(const struct dlpg_group *g, int r, char *buf, size_t cap) {
  char num[DLPG__RANK_LABEL_MAX];
  snprintf(buf, cap, "rank %s", dlpg__rank_num(g, r, num, sizeof num));
  return buf;
}
