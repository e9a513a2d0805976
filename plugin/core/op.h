/* One validated operation, as handed by core to a backend. Everything is copied out of the
 * caller's arguments, so the DLTensor structs need not outlive the call. */
#ifndef DLPG_CORE_OP_H_
#define DLPG_CORE_OP_H_

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most devices one rank may drive in one call. */
#define DLPG__MAX_LOCAL_DEVICES 16

typedef enum dlpg__op_kind {
  DLPG__OP_ALLREDUCE, DLPG__OP_BROADCAST, DLPG__OP_REDUCE, DLPG__OP_ALLGATHER,
  DLPG__OP_REDUCE_SCATTER, DLPG__OP_ALLTOALL, DLPG__OP_SEND, DLPG__OP_RECV, DLPG__OP_BARRIER,
  DLPG__OP_COUNT
} dlpg__op_kind_t;

const char *dlpg__op_name(dlpg__op_kind_t kind); /* "dlpg_allreduce", ... */

typedef struct dlpg__op {
  dlpg__op_kind_t kind;
  int backend;               /* registry slot (core/backend.h); BARRIER: the host backend's */
  int ntensors;              /* 0 for BARRIER */
  int in_place;              /* out[i] is a copy of in[i] */
  dlpg__tensor_t in[DLPG__MAX_LOCAL_DEVICES];
  dlpg__tensor_t out[DLPG__MAX_LOCAL_DEVICES];
  void *streams[DLPG__MAX_LOCAL_DEVICES]; /* NULL: the device's default stream */
  dlpg_reduce_op_t rop;      /* ALLREDUCE, REDUCE, REDUCE_SCATTER */
  int root;                  /* BROADCAST, REDUCE: group rank */
  int peer, tag;             /* SEND, RECV */
  struct dlpg_group *group;  /* the group it was issued on (a batch may span groups) */
  struct dlpg_work *work;    /* the completion target: internal when the caller passed
                                work == NULL for an on_worker op; NULL for such an op of a
                                caller-thread backend (CUDA) */
  void *state;               /* the backend's state of group, set by core before issue */
} dlpg__op_t;

#ifdef __cplusplus
}
#endif
#endif
