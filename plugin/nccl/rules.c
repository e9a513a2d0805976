/* What the NCCL path can reduce, written once (model: UCC tl_nccl's tables): the backend's
 * check (backend.c) applies it at the call, with the NCCL version the module runs on and the
 * device's compute capability. No CUDA or NCCL header here, so unit tests can drive the rule
 * with any version and architecture. Movement operations (broadcast, allgather, alltoall,
 * send, recv) move bytes and never ask. */
#include "nccl/rules.h"

#include "base/status.h"
#include "nccl/host.h"

/* Which dtypes NCCL reduces: fp8 only from NCCL 2.24 on sm_90 or newer; bool as uint8 with
 * max/min (logical or/and); no 16-bit integers. */
typedef enum { NO = 0, YES = 1, FP8 = 2 } dlpg__nccl_reducible_t;

static const unsigned char dlpg__nccl_reducible[DLPG__DT_COUNT] = {
    [DLPG__DT_INT8] = YES,    [DLPG__DT_INT16] = NO,    [DLPG__DT_INT32] = YES,
    [DLPG__DT_INT64] = YES,   [DLPG__DT_UINT8] = YES,   [DLPG__DT_UINT16] = NO,
    [DLPG__DT_UINT32] = YES,  [DLPG__DT_UINT64] = YES,  [DLPG__DT_FLOAT16] = YES,
    [DLPG__DT_BFLOAT16] = YES, [DLPG__DT_FLOAT32] = YES, [DLPG__DT_FLOAT64] = YES,
    [DLPG__DT_BOOL] = YES,    [DLPG__DT_FLOAT8_E4M3FN] = FP8, [DLPG__DT_FLOAT8_E5M2] = FP8,
};

int dlpg__nccl_is_fp8(dlpg__dtype_t dt) {
  return dt == DLPG__DT_FLOAT8_E4M3FN || dt == DLPG__DT_FLOAT8_E5M2;
}

dlpg_status_t dlpg__nccl_reduce_rule(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op,
                                     int nccl_version, int dev, int cc_major) {
  const char *opn = dlpg__reduce_op_name(op), *dtn = dlpg__dtype_name(dt);
  if (op == DLPG_BAND || op == DLPG_BOR || op == DLPG_BXOR)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s on %s: bitwise reductions are not supported by NCCL; "
                       "use CPU tensors (Gloo)", fn, opn, dtn);
  int r = dlpg__nccl_reducible[dt];
  if (r == NO)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: NCCL cannot reduce %s tensors (reduce op %s); use CPU tensors "
                       "(Gloo) or a wider dtype", fn, dtn, opn);
  if (op == DLPG_AVG && !dlpg__dtype_is_float(dt))
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op avg needs a floating dtype, got %s (NCCL)", fn, dtn);
  if (r == FP8 && nccl_version < DLPG__NCCL_FP8_VERSION)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: NCCL %d.%d.%d cannot reduce %s tensors (fp8 reductions need NCCL "
                       "2.24 or newer); use a wider dtype", fn, nccl_version / 10000,
                       nccl_version / 100 % 100, nccl_version % 100, dtn);
  if (r == FP8 && cc_major < 9)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: NCCL reduces %s only on sm_90 or newer; cuda:%d is sm_%d", fn, dtn,
                       dev, cc_major * 10);
  return DLPG_OK;
}
