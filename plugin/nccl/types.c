/* The NCCL type and op of each reduction, read from the table of rules.h (whose support
 * column the backend's check applied at the call), the devices' compute capability, and the
 * element sizes by which the uneven collectives turn counts into bytes (the module cannot
 * link core's dtype table). */
#include "nccl/nccl_internal.h"
#include "nccl/rules.h"

/* No NCCL type or op: an entry the rule rejects, never issued. */
#define DLPG__NCCL_NO_VALUE (-1)

/* An entry's NCCL name. fp8 types exist only in NCCL 2.24's headers and later: with older
 * headers the module runs as an older NCCL (backend.c), whose rule rejects fp8. */
#define DLPG__TYPE_YES(nccl) ((int)(nccl))
#define DLPG__TYPE_FLOAT(nccl) ((int)(nccl))
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
#define DLPG__TYPE_FP8(nccl) ((int)(nccl))
#else
#define DLPG__TYPE_FP8(nccl) DLPG__NCCL_NO_VALUE
#endif
#define DLPG__TYPE_CPLX(nccl) ((int)(nccl))
#define DLPG__TYPE_NONE DLPG__NCCL_NO_VALUE

static const int dlpg__nccl_types[DLPG__DT_COUNT] = {
#define DLPG__TYPE_DTYPE(dt, entry) [DLPG__DT_##dt] = DLPG__TYPE_##entry,
    DLPG__NCCL_DTYPE_MAP(DLPG__TYPE_DTYPE)
#undef DLPG__TYPE_DTYPE
};

static const int dlpg__nccl_ops[DLPG_PREMUL_SUM + 1][2] = {
#define DLPG__TYPE_OP(op, entry, bool_entry) [DLPG_##op] = {DLPG__TYPE_##entry, DLPG__TYPE_##bool_entry},
    DLPG__NCCL_REDOP_MAP(DLPG__TYPE_OP)
#undef DLPG__TYPE_OP
};

/* Compute capability major of each device, cached (0: not read yet). */
static atomic_int dlpg__cc_major[DLPG__NCCL_MAX_DEVICE];

size_t dlpg__nccl_reduce_type(dlpg__dtype_t dt, dlpg_reduce_op_t op, ncclDataType_t *type,
                              ncclRedOp_t *rop) {
  *type = (ncclDataType_t)dlpg__nccl_types[dt];
  *rop = (ncclRedOp_t)dlpg__nccl_ops[op][dt == DLPG__DT_BOOL];
  return dlpg__dtype_is_complex(dt) ? 2 : 1;
}

int dlpg__nccl_device_cc_major(int dev) {
  if (dev < 0 || dev >= DLPG__NCCL_MAX_DEVICE) return 0;
  int cc = atomic_load(&dlpg__cc_major[dev]);
  if (cc > 0) return cc;
  if (cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
  atomic_store(&dlpg__cc_major[dev], cc);
  return cc;
}

size_t dlpg__nccl_elem_size(dlpg__dtype_t dt) {
  switch (dt) {
    case DLPG__DT_INT8: case DLPG__DT_UINT8: case DLPG__DT_BOOL:
    case DLPG__DT_FLOAT8_E4M3FN: case DLPG__DT_FLOAT8_E5M2:
      return 1;
    case DLPG__DT_INT16: case DLPG__DT_UINT16: case DLPG__DT_FLOAT16: case DLPG__DT_BFLOAT16:
      return 2;
    case DLPG__DT_INT32: case DLPG__DT_UINT32: case DLPG__DT_FLOAT32:
      return 4;
    case DLPG__DT_INT64: case DLPG__DT_UINT64: case DLPG__DT_FLOAT64: case DLPG__DT_COMPLEX64:
      return 8;
    case DLPG__DT_COMPLEX128:
      return 16;
    case DLPG__DT_COUNT:
      break;
  }
  return 0;
}
