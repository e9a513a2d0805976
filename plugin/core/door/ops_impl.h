/* Private to the door: building a validated dlpg__op_t from a public call's arguments
 * (ops_validate.c); issuing it is the executor's (dispatch.h). */
#ifndef DLPG_CORE_OPS_IMPL_H_
#define DLPG_CORE_OPS_IMPL_H_

#include "core/exec/dispatch.h"
#include "core/group/group.h"
#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The arguments of one public operation, as the caller gave them. */
typedef struct dlpg__op_args {
  dlpg__op_kind_t kind;
  struct dlpg_group *g;
  DLTensor *const *inputs;
  DLTensor *const *outputs;
  int ntensors;
  dlpg_reduce_op_t rop;
  int root, peer, tag;
  void *const *streams;
  /* The _ex forms: the descriptor as given (NULL for the plain functions, whose rop is
   * above); fn names the public function in messages. */
  const dlpg_reduce_desc_t *desc;
  const char *fn;
  /* The v-forms' per-rank arrays as the caller gave them (ALLTOALLV: counts and displs are
   * the send side); NULL for the other kinds. */
  const int64_t *counts, *displs, *recv_counts, *recv_displs;
} dlpg__op_args_t;

/* Bytes the op record needs past sizeof(dlpg__op_t) for a's per-rank arrays (0 for kinds
 * without them): ops_counts.c copies them there, so they go with the op (free(op)). */
size_t dlpg__op_counts_space(const dlpg__op_args_t *a);
/* The checks and copies of a's per-rank arrays into op (the kinds whose shape rule is
 * COUNTS; op's tensors already validated, space of dlpg__op_counts_space after op). */
dlpg_status_t dlpg__op_build_counts(const dlpg__op_args_t *a, const char *fn, dlpg__op_t *op);

/* Validate a's arguments at the door and fill *op (op->work is left NULL); op has
 * dlpg__op_counts_space(a) bytes after it. Every failure
 * returns a status with a message naming the function, the argument and the values. */
dlpg_status_t dlpg__op_build(const dlpg__op_args_t *a, dlpg__op_t *op);

#ifdef __cplusplus
}
#endif
#endif
