/* Core's reading of the operation-kind table (core/group/op_kinds.h): each kind's facts as values
 * validation steers by (outputs, argument names, shape rule), its public name and the names
 * of a kinds mask. Generated from the table in op_kind.c; core only (a module reads the
 * table itself, and gets names through the host's op_name). */
#ifndef DLPG_CORE_OP_KIND_H_
#define DLPG_CORE_OP_KIND_H_

#include <stddef.h>

#include "core/group/op_kinds.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table's columns, as values (names as in the table's tokens). */
typedef enum dlpg__op_outputs {
  DLPG__OUTPUTS_NONE,     /* no outputs */
  DLPG__OUTPUTS_INPLACE,  /* outputs optional: NULL means in place */
  DLPG__OUTPUTS_REQUIRED, /* outputs must be given */
  DLPG__OUTPUTS_ROOT,     /* the root's own tensor given on the root only (GATHER, SCATTER) */
} dlpg__op_outputs_t;

typedef enum dlpg__op_args_style {
  DLPG__ARGS_LIST,   /* inputs[i], outputs[i] */
  DLPG__ARGS_PAIR,   /* input, output */
  DLPG__ARGS_TENSOR, /* tensor */
  DLPG__ARGS_NONE,   /* no tensors */
} dlpg__op_args_style_t;

typedef enum dlpg__shape_rule {
  DLPG__SHAPE_SAME,     /* out = in */
  DLPG__SHAPE_GATHER,   /* out = world_size * ntensors * in */
  DLPG__SHAPE_SCATTER,  /* in = world_size * ntensors * out */
  DLPG__SHAPE_ALLTOALL, /* out = in, divisible by world_size */
  DLPG__SHAPE_COUNTS,   /* per-rank counts and displacements (door/ops_counts.c) */
  DLPG__SHAPE_NONE,     /* no rule */
} dlpg__shape_rule_t;

typedef struct dlpg__op_kind_info {
  const char *name;                  /* "dlpg_allreduce" */
  unsigned char reduces, root, p2p;  /* 0 or 1 */
  dlpg__op_outputs_t outputs;
  dlpg__op_args_style_t args;
  dlpg__shape_rule_t shape;
} dlpg__op_kind_info_t;

/* kind's line of the table; NULL for a value outside it. */
const dlpg__op_kind_info_t *dlpg__op_kind_info(dlpg__op_kind_t kind);

/* "dlpg_allreduce", ...; "dlpg_operation" for a value outside the table. */
const char *dlpg__op_name(dlpg__op_kind_t kind);

/* "dlpg_send, dlpg_recv": the kinds of mask, in the table's order ("none" when empty). */
void dlpg__op_kinds_names(unsigned mask, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
