/* dtype and reduce-op mapping of the NCCL path: the NCCL type and op each supported pair is
 * issued as. Which pairs are supported is rules.c's, checked at the call; movement
 * operations (broadcast, allgather, alltoall, send, recv) move bytes as ncclUint8. */
#include "nccl/nccl_internal.h"

#define DLPG__NCCL_NO_TYPE ((int)-1)

/* fp8 reductions arrived in NCCL 2.24 (ncclFloat8e4m3 / ncclFloat8e5m2). */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
#define DLPG__NCCL_FP8_E4M3 ((int)ncclFloat8e4m3)
#define DLPG__NCCL_FP8_E5M2 ((int)ncclFloat8e5m2)
#else
#define DLPG__NCCL_FP8_E4M3 DLPG__NCCL_NO_TYPE
#define DLPG__NCCL_FP8_E5M2 DLPG__NCCL_NO_TYPE
#endif

/* Compute capability major of each device, cached (0: not read yet). */
static atomic_int dlpg__cc_major[DLPG__NCCL_MAX_DEVICE];

static const int dlpg__nccl_types[DLPG__DT_COUNT] = {
    [DLPG__DT_INT8] = (int)ncclInt8,
    [DLPG__DT_INT16] = DLPG__NCCL_NO_TYPE,
    [DLPG__DT_INT32] = (int)ncclInt32,
    [DLPG__DT_INT64] = (int)ncclInt64,
    [DLPG__DT_UINT8] = (int)ncclUint8,
    [DLPG__DT_UINT16] = DLPG__NCCL_NO_TYPE,
    [DLPG__DT_UINT32] = (int)ncclUint32,
    [DLPG__DT_UINT64] = (int)ncclUint64,
    [DLPG__DT_FLOAT16] = (int)ncclFloat16,
    [DLPG__DT_BFLOAT16] = (int)ncclBfloat16,
    [DLPG__DT_FLOAT32] = (int)ncclFloat32,
    [DLPG__DT_FLOAT64] = (int)ncclFloat64,
    [DLPG__DT_BOOL] = (int)ncclUint8, /* reduced logically with ncclMax / ncclMin */
    [DLPG__DT_FLOAT8_E4M3FN] = DLPG__NCCL_FP8_E4M3,
    [DLPG__DT_FLOAT8_E5M2] = DLPG__NCCL_FP8_E5M2,
};

dlpg_status_t dlpg__nccl_reduce_type(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op,
                                     ncclDataType_t *type, ncclRedOp_t *rop) {
  int t = (int)dt >= 0 && dt < DLPG__DT_COUNT ? dlpg__nccl_types[dt] : DLPG__NCCL_NO_TYPE;
  ncclRedOp_t r;
  switch (op) {
    case DLPG_SUM: r = ncclSum; break;
    case DLPG_PROD: r = ncclProd; break;
    case DLPG_MIN: r = ncclMin; break;
    case DLPG_MAX: r = ncclMax; break;
    case DLPG_AVG: r = ncclAvg; break;
    default: t = DLPG__NCCL_NO_TYPE; r = ncclSum; break;
  }
  /* The backend's check (rules.c) rejected every other pair at the call. */
  if (t == DLPG__NCCL_NO_TYPE)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: reduce op %s on %s reached NCCL unchecked", fn,
                       dlpg__reduce_op_name(op), dlpg__dtype_name(dt));
  if (dt == DLPG__DT_BOOL) {
    /* Logical reductions on 0/1 bytes: OR is max, AND is min. */
    if (op == DLPG_SUM || op == DLPG_MAX) r = ncclMax;
    else if (op == DLPG_PROD || op == DLPG_MIN) r = ncclMin;
  }
  *type = (ncclDataType_t)t;
  *rop = r;
  return DLPG_OK;
}

int dlpg__nccl_device_cc_major(int dev) {
  if (dev < 0 || dev >= DLPG__NCCL_MAX_DEVICE) return 0;
  int cc = atomic_load(&dlpg__cc_major[dev]);
  if (cc > 0) return cc;
  if (cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
  atomic_store(&dlpg__cc_major[dev], cc);
  return cc;
}
