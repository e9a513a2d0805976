/* What the NCCL path can reduce, and as which NCCL type and op, in one table (model: UCC
 * tl_nccl's ucc_to_nccl_dtype / ucc_to_nccl_reduce_op, whose unsupported entries are
 * explicit). The support rule (rules.c) reads whether an entry is YES, FP8, FLOAT or NONE
 * and needs no CUDA or NCCL header, so unit tests can drive it with any version and
 * architecture; the mapping (types.c) reads the NCCL names inside the same entries. Movement
 * operations (broadcast, allgather, alltoall, send, recv) move bytes and never ask. */
#ifndef DLPG_NCCL_RULES_H_
#define DLPG_NCCL_RULES_H_

#include "dlpg/dlpg.h"
#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(dtype, entry). entry: YES(nccl type); FP8(nccl type), reduced only from NCCL 2.24
 * (DLPG__NCCL_FP8_VERSION) on sm_90 or newer; NONE, no NCCL type reduces it (16-bit
 * integers). Bool is reduced as its 0/1 bytes, with the bool column of the op table. */
#define DLPG__NCCL_DTYPE_MAP(X)           \
  X(INT8, YES(ncclInt8))                  \
  X(INT16, NONE)                          \
  X(INT32, YES(ncclInt32))                \
  X(INT64, YES(ncclInt64))                \
  X(UINT8, YES(ncclUint8))                \
  X(UINT16, NONE)                         \
  X(UINT32, YES(ncclUint32))              \
  X(UINT64, YES(ncclUint64))              \
  X(FLOAT16, YES(ncclFloat16))            \
  X(BFLOAT16, YES(ncclBfloat16))          \
  X(FLOAT32, YES(ncclFloat32))            \
  X(FLOAT64, YES(ncclFloat64))            \
  X(BOOL, YES(ncclUint8))                 \
  X(FLOAT8_E4M3FN, FP8(ncclFloat8e4m3))   \
  X(FLOAT8_E5M2, FP8(ncclFloat8e5m2))     \
  X(COMPLEX64, CPLX(ncclFloat32))         \
  X(COMPLEX128, CPLX(ncclFloat64))

/* X(reduce op, entry on every dtype but bool, entry on bool). entry: YES(nccl op);
 * FLOAT(nccl op), on floating dtypes only; NONE, NCCL has no such reduction (the bitwise
 * ops). Bool reduces logically: OR is max, AND is min (as torch does). */
#define DLPG__NCCL_REDOP_MAP(X)                 \
  X(SUM, YES(ncclSum), YES(ncclMax))            \
  X(PROD, YES(ncclProd), YES(ncclMin))          \
  X(MIN, YES(ncclMin), YES(ncclMin))            \
  X(MAX, YES(ncclMax), YES(ncclMax))            \
  X(AVG, FLOAT(ncclAvg), NONE)                  \
  X(BAND, NONE, NONE)                           \
  X(BOR, NONE, NONE)                            \
  X(BXOR, NONE, NONE)                           \
  X(PREMUL_SUM, FLOAT(ncclSum), NONE)

/* The support of an entry, as the rule reads it. */
/* CPLX(nccl type of a part): a complex dtype, reduced as pairs of reals of that type (twice
 * the count) with sum, avg and premul_sum only. PREMUL_SUM's op is made per communicator
 * and factor (issue.c, ncclRedOpCreatePreMulSum); its entry's ncclSum is a placeholder. */
typedef enum {
  DLPG__NCCL_NONE = 0, DLPG__NCCL_YES, DLPG__NCCL_FP8, DLPG__NCCL_FLOAT, DLPG__NCCL_CPLX
} dlpg__nccl_support_t;

/* NCCL_VERSION(2, 24, 0): the first NCCL with ncclFloat8e4m3 / ncclFloat8e5m2. */
#define DLPG__NCCL_FP8_VERSION 22400

int dlpg__nccl_is_fp8(dlpg__dtype_t dt);

/* Whether NCCL nccl_version (NCCL_VERSION_CODE form, 22809 = 2.28.9) can reduce dt with op on
 * device dev of compute capability major cc_major (read only for fp8); dt and op are
 * validated by core. OK, or UNSUPPORTED with a message naming fn, dtype and op. */
dlpg_status_t dlpg__nccl_reduce_rule(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op,
                                     int nccl_version, int dev, int cc_major);

/* Whether NCCL can run a send or receive of kind with peer: a receive from DLPG_ANY_SOURCE is
 * UNSUPPORTED with the reason (ncclRecv names its peer); everything else is core's to judge. */
dlpg_status_t dlpg__nccl_p2p_rule(const char *fn, dlpg__op_kind_t kind, int peer);

#ifdef __cplusplus
}
#endif
#endif
