/* The public operations of dlpg.h: each packs its arguments, validates them at the door
 * (ops_validate.c) and issues the op (ops_dispatch.c). Nothing else happens here but a flag a
 * later split reads (group.h, host_colls): what the group's diagnostics learn of the call,
 * the executor tells them (core/group/observer.h). */
#include <stdlib.h>

#include "core/door/ops_impl.h"
#include "core/group/group.h"
#include "core/lines/backend.h"
#include "base/status.h"

/* Validate into a heap op and issue it. The op record is large (every local device's
 * tensors), so it is built on the heap that the executor will own. */
static dlpg_status_t dlpg__op_run(const dlpg__op_args_t *a, dlpg_work_t **work) {
  /* The v-forms' arrays live in the same block, after the record: freed with it. */
  dlpg__op_t *op = malloc(sizeof *op + dlpg__op_counts_space(a));
  if (!op) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", dlpg__op_name(a->kind));
  dlpg_status_t st = dlpg__op_build(a, op);
  if (st != DLPG_OK) {
    free(op);
    return dlpg__op_refused(a->g, a->kind, a->peer, st);
  }
  /* Said once per group (one relaxed load after): a later dlpg_group_split may exchange
   * through the group's host-memory collectives, whose backend state this op makes. */
  if (!atomic_load_explicit(&a->g->host_colls, memory_order_relaxed) &&
      a->kind != DLPG__OP_SEND && a->kind != DLPG__OP_RECV) {
    const dlpg__backend_vtbl_t *be = dlpg__backend_loaded(op->backend);
    if (be && be->on_worker) atomic_store_explicit(&a->g->host_colls, 1, memory_order_relaxed);
  }
  return dlpg__op_issue(op, work);
}

dlpg_status_t dlpg_allreduce(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, dlpg_reduce_op_t op, void *const *streams,
                             dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_ALLREDUCE, .g = g, .inputs = inputs, .outputs = outputs,
                       .ntensors = ntensors, .rop = op, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_broadcast(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, int root, void *const *streams, dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_BROADCAST, .g = g, .inputs = inputs, .outputs = outputs,
                       .ntensors = ntensors, .root = root, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_reduce(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                          int ntensors, dlpg_reduce_op_t op, int root, void *const *streams,
                          dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_REDUCE, .g = g, .inputs = inputs, .outputs = outputs,
                       .ntensors = ntensors, .rop = op, .root = root, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_allgather(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, void *const *streams, dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_ALLGATHER, .g = g, .inputs = inputs, .outputs = outputs,
                       .ntensors = ntensors, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_reduce_scatter(dlpg_group_t *g, DLTensor *const *inputs,
                                  DLTensor *const *outputs, int ntensors, dlpg_reduce_op_t op,
                                  void *const *streams, dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_REDUCE_SCATTER, .g = g, .inputs = inputs,
                       .outputs = outputs, .ntensors = ntensors, .rop = op, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_allreduce_ex(dlpg_group_t *g, DLTensor *const *inputs,
                                DLTensor *const *outputs, int ntensors,
                                const dlpg_reduce_desc_t *op, void *const *streams,
                                dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_ALLREDUCE, .g = g, .inputs = inputs, .outputs = outputs,
                       .ntensors = ntensors, .streams = streams, .desc = op,
                       .fn = "dlpg_allreduce_ex"};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_reduce_ex(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, const dlpg_reduce_desc_t *op, int root,
                             void *const *streams, dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_REDUCE, .g = g, .inputs = inputs, .outputs = outputs,
                       .ntensors = ntensors, .root = root, .streams = streams, .desc = op,
                       .fn = "dlpg_reduce_ex"};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_reduce_scatter_ex(dlpg_group_t *g, DLTensor *const *inputs,
                                     DLTensor *const *outputs, int ntensors,
                                     const dlpg_reduce_desc_t *op, void *const *streams,
                                     dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_REDUCE_SCATTER, .g = g, .inputs = inputs,
                       .outputs = outputs, .ntensors = ntensors, .streams = streams,
                       .desc = op, .fn = "dlpg_reduce_scatter_ex"};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_alltoall(dlpg_group_t *g, DLTensor *input, DLTensor *output, void *stream,
                            dlpg_work_t **work) {
  DLTensor *in[1] = {input}, *out[1] = {output};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_ALLTOALL, .g = g, .inputs = in, .outputs = out,
                       .ntensors = 1, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_send(dlpg_group_t *g, DLTensor *tensor, int peer, int tag, void *stream,
                        dlpg_work_t **work) {
  DLTensor *in[1] = {tensor};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_SEND, .g = g, .inputs = in, .ntensors = 1, .peer = peer,
                       .tag = tag, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_recv(dlpg_group_t *g, DLTensor *tensor, int peer, int tag, void *stream,
                        dlpg_work_t **work) {
  DLTensor *in[1] = {tensor};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_RECV, .g = g, .inputs = in, .ntensors = 1, .peer = peer,
                       .tag = tag, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_recv_any(dlpg_group_t *g, DLTensor *tensor, int tag, int *source,
                            void *stream) {
  DLPG_ARG_CHECK(source != NULL, "dlpg_recv_any: source is NULL");
  /* The sender is known only once the receive is done, which a batch puts off to its end. */
  DLPG_ARG_CHECK(dlpg__batch_depth() == 0,
                 "dlpg_recv_any: called inside a dlpg_group_start/end batch (issue dlpg_recv "
                 "with DLPG_ANY_SOURCE and a work handle there, then dlpg_work_source)");
  DLTensor *in[1] = {tensor};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_RECV, .g = g, .inputs = in, .ntensors = 1,
                       .peer = DLPG_ANY_SOURCE, .tag = tag, .streams = streams};
  dlpg_work_t *w = NULL;
  dlpg_status_t st = dlpg__op_run(&a, &w);
  if (st != DLPG_OK) return st;
  st = dlpg_work_wait(w, 0);
  int src = -1;
  if (st == DLPG_OK) st = dlpg_work_source(w, &src);
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  dlpg_work_free(w);
  dlpg__error_restore(&se, st);
  if (st == DLPG_OK) *source = src;
  return st;
}

dlpg_status_t dlpg_barrier(dlpg_group_t *g, dlpg_work_t **work) {
  dlpg__op_args_t a = {.kind = DLPG__OP_BARRIER, .g = g};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_gather(dlpg_group_t *g, DLTensor *input, DLTensor *output, int root,
                          void *stream, dlpg_work_t **work) {
  DLTensor *in[1] = {input}, *out[1] = {output};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_GATHER, .g = g, .inputs = in, .outputs = out,
                       .ntensors = 1, .rop = DLPG_SUM, .root = root, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_scatter(dlpg_group_t *g, DLTensor *input, DLTensor *output, int root,
                           void *stream, dlpg_work_t **work) {
  DLTensor *in[1] = {input}, *out[1] = {output};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_SCATTER, .g = g, .inputs = in, .outputs = out,
                       .ntensors = 1, .rop = DLPG_SUM, .root = root, .streams = streams};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_allgatherv(dlpg_group_t *g, DLTensor *input, DLTensor *output,
                              const int64_t *counts, const int64_t *displs, void *stream,
                              dlpg_work_t **work) {
  DLTensor *in[1] = {input}, *out[1] = {output};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_ALLGATHERV, .g = g, .inputs = in, .outputs = out,
                       .ntensors = 1, .rop = DLPG_SUM, .streams = streams, .counts = counts,
                       .displs = displs};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_alltoallv(dlpg_group_t *g, DLTensor *input, const int64_t *send_counts,
                             const int64_t *send_displs, DLTensor *output,
                             const int64_t *recv_counts, const int64_t *recv_displs,
                             void *stream, dlpg_work_t **work) {
  DLTensor *in[1] = {input}, *out[1] = {output};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_ALLTOALLV, .g = g, .inputs = in, .outputs = out,
                       .ntensors = 1, .rop = DLPG_SUM, .streams = streams,
                       .counts = send_counts, .displs = send_displs,
                       .recv_counts = recv_counts, .recv_displs = recv_displs};
  return dlpg__op_run(&a, work);
}

dlpg_status_t dlpg_reduce_scatter_v(dlpg_group_t *g, DLTensor *input, DLTensor *output,
                                    const int64_t *counts, const int64_t *displs,
                                    const dlpg_reduce_desc_t *op, void *stream,
                                    dlpg_work_t **work) {
  DLTensor *in[1] = {input}, *out[1] = {output};
  void *streams[1] = {stream};
  dlpg__op_args_t a = {.kind = DLPG__OP_REDUCE_SCATTER_V, .g = g, .inputs = in, .outputs = out,
                       .ntensors = 1, .rop = DLPG_SUM, .streams = streams, .desc = op,
                       .fn = "dlpg_reduce_scatter_v", .counts = counts, .displs = displs};
  return dlpg__op_run(&a, work);
}
