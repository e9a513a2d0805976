/* The group's NCCL communicator settings (dlpg_group_options_t's nccl_* fields, which core
 * hands over in the group's view) applied to the ncclConfig_t of each communicator made for
 * it: at ncclCommInitRankConfig and at every ncclCommSplit. Fields left to NCCL stay
 * NCCL_CONFIG_UNDEF_*. */
#include <stdio.h>

#include "nccl/nccl_internal.h"

void dlpg__nccl_apply_config(const struct dlpg__nccl *st, ncclConfig_t *cfg) {
  const dlpg__be_comm_config_t *c = st && st->g ? dlpg__be_group_comm(st->g) : NULL;
  if (!c) return;
  if (c->cga_cluster_size >= 0) cfg->cgaClusterSize = c->cga_cluster_size;
  if (c->min_ctas > 0) cfg->minCTAs = c->min_ctas;
  if (c->max_ctas > 0) cfg->maxCTAs = c->max_ctas;
  if (c->net_name) cfg->netName = c->net_name;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  /* trafficClass and commName came with NCCL 2.23's ncclConfig_t (NCCL reads only the
   * fields its version knows: the config carries the version it was compiled with). */
  if (c->traffic_class >= 0) cfg->trafficClass = c->traffic_class;
  if (c->comm_name) cfg->commName = c->comm_name;
#endif
}

void dlpg__nccl_describe_config(const struct dlpg__nccl *st, char *buf, size_t cap) {
  const dlpg__be_comm_config_t *c = st && st->g ? dlpg__be_group_comm(st->g) : NULL;
  buf[0] = '\0';
  if (!c) return;
  size_t n = 0;
#define DLPG__ADD(...)                                                          \
  do {                                                                          \
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, __VA_ARGS__);          \
  } while (0)
  if (c->cga_cluster_size >= 0) DLPG__ADD(" cgaClusterSize=%d", c->cga_cluster_size);
  if (c->min_ctas > 0) DLPG__ADD(" minCTAs=%d", c->min_ctas);
  if (c->max_ctas > 0) DLPG__ADD(" maxCTAs=%d", c->max_ctas);
  if (c->net_name) DLPG__ADD(" netName=%s", c->net_name);
  if (c->traffic_class >= 0) DLPG__ADD(" trafficClass=%d", c->traffic_class);
  if (c->comm_name) DLPG__ADD(" commName=%s", c->comm_name);
#undef DLPG__ADD
}
