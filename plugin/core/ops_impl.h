/* Private to core: building a validated dlpg__op_t from a public call's arguments
 * (ops_validate.c) and issuing it (ops_dispatch.c). */
#ifndef DLPG_CORE_OPS_IMPL_H_
#define DLPG_CORE_OPS_IMPL_H_

#include "core/group.h"
#include "core/op.h"

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
} dlpg__op_args_t;

/* Validate a's arguments at the door and fill *op (op->work is left NULL). Every failure
 * returns a status with a message naming the function, the argument and the values. */
dlpg_status_t dlpg__op_build(const dlpg__op_args_t *a, dlpg__op_t *op);

/* How deep the calling thread is in dlpg_group_start/end batches (0: outside any). Read by
 * validation: a send or receive to this rank itself is matched only inside a batch. */
int dlpg__batch_depth(void);

/* Issue a heap-allocated op built by dlpg__op_build (takes ownership). work == NULL: a CPU
 * operation is waited for (the group's timeout) and its status returned; a CUDA one
 * returns once enqueued. Inside dlpg_group_start/end the op is only queued on the thread's
 * batch. */
dlpg_status_t dlpg__op_issue(dlpg__op_t *op, dlpg_work_t **work);

#ifdef __cplusplus
}
#endif
#endif
