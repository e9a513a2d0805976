/* The operation kinds: one table, one line per kind with its facts (model: libuv's
 * UV_ERRNO_MAP, dlpg.h's DLPG_STATUS_MAP). The enum, the public names, validation's
 * predicates, argument names and shape rules (core/group/op_kind.c) and the masks of the kinds a
 * backend serves are generated from it, so adding a collective is one line here plus its
 * implementations. Part of the backend ABI (core/group/backend_abi.h includes it): a kind's value
 * is its line's index, so lines are only ever appended, never reordered or removed.
 *
 *   X(NAME, name, reduces, outputs, root, p2p, args, shape)
 *     NAME     DLPG__OP_<NAME>; the public function is dlpg_<name>
 *     reduces  1: takes a reduce op (a dlpg_reduce_op_t the backend's check judges)
 *     outputs  NONE: no outputs; INPLACE: outputs optional (NULL: in place);
 *              REQUIRED: outputs must be given (the output's size differs, or the backend
 *              needs distinct buffers); ROOT: the tensor only the root uses (a gather's
 *              output, a scatter's input by its shape) must be given on the root and is
 *              ignored (may be NULL) elsewhere, the other one is required
 *     root     1: takes a root rank
 *     p2p      1: point to point (takes a peer and a tag; a transfer with this rank itself
 *              only inside a dlpg_group_start/end batch)
 *     args     how messages name its tensors: LIST inputs[i]/outputs[i] (ntensors of them),
 *              PAIR input/output (one), TENSOR tensor (one), NONE (no tensors)
 *     shape    per local device i: SAME out = in; GATHER out = world * ntensors * in;
 *              SCATTER in = world * ntensors * out; ALLTOALL out = in, divisible by world;
 *              COUNTS per-rank counts and displacements decide (door/ops_counts.c);
 *              NONE no rule */
#ifndef DLPG_CORE_OP_KINDS_H_
#define DLPG_CORE_OP_KINDS_H_

#define DLPG__OP_KIND_MAP(X)                                                              \
  X(ALLREDUCE, allreduce, 1, INPLACE, 0, 0, LIST, SAME)                                   \
  X(BROADCAST, broadcast, 0, INPLACE, 1, 0, LIST, SAME)                                   \
  X(REDUCE, reduce, 1, INPLACE, 1, 0, LIST, SAME)                                         \
  X(ALLGATHER, allgather, 0, REQUIRED, 0, 0, LIST, GATHER)                                \
  X(REDUCE_SCATTER, reduce_scatter, 1, REQUIRED, 0, 0, LIST, SCATTER)                     \
  X(ALLTOALL, alltoall, 0, REQUIRED, 0, 0, PAIR, ALLTOALL)                                \
  X(SEND, send, 0, NONE, 0, 1, TENSOR, NONE)                                              \
  X(RECV, recv, 0, NONE, 0, 1, TENSOR, NONE)                                              \
  X(BARRIER, barrier, 0, NONE, 0, 0, NONE, NONE)                                         \
  X(GATHER, gather, 0, ROOT, 1, 0, PAIR, GATHER)                                          \
  X(SCATTER, scatter, 0, ROOT, 1, 0, PAIR, SCATTER)                                       \
  X(ALLGATHERV, allgatherv, 0, REQUIRED, 0, 0, PAIR, COUNTS)                              \
  X(ALLTOALLV, alltoallv, 0, REQUIRED, 0, 0, PAIR, COUNTS)                                \
  X(REDUCE_SCATTER_V, reduce_scatter_v, 1, REQUIRED, 0, 0, PAIR, COUNTS)

typedef enum dlpg__op_kind {
#define DLPG__OP_KIND_ENUM_(NAME, name, reduces, outputs, root, p2p, args, shape) DLPG__OP_##NAME,
  DLPG__OP_KIND_MAP(DLPG__OP_KIND_ENUM_)
#undef DLPG__OP_KIND_ENUM_
  DLPG__OP_COUNT
} dlpg__op_kind_t;

/* Bit of an operation kind in a kinds mask (a backend table's kinds). */
#define DLPG__KIND_BIT(kind) (1u << (unsigned)(kind))

/* Every kind of this table: for a backend that implements each one. A backend listing its
 * kinds one by one instead claims no kind a later table adds before it implements it. */
#define DLPG__KINDS_ALL                                                                    \
  (0u DLPG__OP_KIND_MAP(DLPG__KINDS_ALL_BIT_))
#define DLPG__KINDS_ALL_BIT_(NAME, name, reduces, outputs, root, p2p, args, shape) \
  | DLPG__KIND_BIT(DLPG__OP_##NAME)

/* The kinds of backend ABI v1's first table, frozen (never generated): what a module's
 * kinds of 0 means. A module built before tables listed their kinds left the field 0 for
 * "every kind", and every kind it knew was one of these nine. */
#define DLPG__KINDS_V1                                                                     \
  (DLPG__KIND_BIT(0) | DLPG__KIND_BIT(1) | DLPG__KIND_BIT(2) | DLPG__KIND_BIT(3) |           \
   DLPG__KIND_BIT(4) | DLPG__KIND_BIT(5) | DLPG__KIND_BIT(6) | DLPG__KIND_BIT(7) |           \
   DLPG__KIND_BIT(8))

#endif
