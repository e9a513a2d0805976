/* The operation kinds' facts, names and mask names, generated from the one table
 * (core/group/op_kinds.h), so that no switch over kinds repeats what a line of the table says. */
#include "core/group/op_kind.h"

#include <stdio.h>

/* The module ABI fixes each kind's value (a module built earlier passes them): the table
 * only grows at its end. */
_Static_assert(DLPG__OP_ALLREDUCE == 0 && DLPG__OP_BROADCAST == 1 && DLPG__OP_REDUCE == 2 &&
                   DLPG__OP_ALLGATHER == 3 && DLPG__OP_REDUCE_SCATTER == 4 &&
                   DLPG__OP_ALLTOALL == 5 && DLPG__OP_SEND == 6 && DLPG__OP_RECV == 7 &&
                   DLPG__OP_BARRIER == 8,
               "the kinds of backend ABI v1 keep their values: append new kinds at the end");
_Static_assert(DLPG__OP_GATHER == 9 && DLPG__OP_SCATTER == 10 && DLPG__OP_ALLGATHERV == 11 &&
                   DLPG__OP_ALLTOALLV == 12 && DLPG__OP_REDUCE_SCATTER_V == 13,
               "the rooted and uneven kinds keep their values once released");
_Static_assert(DLPG__OP_COUNT <= 32, "a kinds mask is an unsigned: at most 32 kinds");
_Static_assert((DLPG__KINDS_V1 & ~DLPG__KINDS_ALL) == 0, "ABI v1's kinds are in the table");

static const dlpg__op_kind_info_t dlpg__op_kinds[DLPG__OP_COUNT] = {
#define DLPG__OP_KIND_INFO_(NAME, name, reduces, outputs, root, p2p, args, shape)          \
  [DLPG__OP_##NAME] = {"dlpg_" #name, reduces, root, p2p, DLPG__OUTPUTS_##outputs,         \
                       DLPG__ARGS_##args, DLPG__SHAPE_##shape},
    DLPG__OP_KIND_MAP(DLPG__OP_KIND_INFO_)
#undef DLPG__OP_KIND_INFO_
};

const dlpg__op_kind_info_t *dlpg__op_kind_info(dlpg__op_kind_t kind) {
  return (unsigned)kind < DLPG__OP_COUNT ? &dlpg__op_kinds[kind] : NULL;
}

const char *dlpg__op_name(dlpg__op_kind_t kind) {
  const dlpg__op_kind_info_t *k = dlpg__op_kind_info(kind);
  return k ? k->name : "dlpg_operation";
}

void dlpg__op_kinds_names(unsigned mask, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < DLPG__OP_COUNT && len < cap; k++)
    if (mask & DLPG__KIND_BIT(k))
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "",
                              dlpg__op_kinds[k].name);
  if (!len && cap) snprintf(buf, cap, "none");
}
