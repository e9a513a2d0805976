/* The NCCL type and op of a reducing operation on one device slot: the table's pair
 * (types.c), or for premul_sum an op made by ncclRedOpCreatePreMulSum and kept per
 * communicator, type and factor (dlpg__nccl_comm_t.premul), since a training loop repeats
 * one factor and making an op per call would cost an NCCL call each time. Shared by the
 * operations of issue.c and the uneven ones of issue_v.c. */
#include <stdint.h>
#include <string.h>

#include "nccl/nccl_internal.h"

/* float to IEEE half / bfloat16, to nearest even (the factor of a 16-bit premul_sum, which
 * NCCL reads in the reduction's type). */
static uint16_t dlpg__nccl_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static uint16_t dlpg__nccl_f2h(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;            /* NaN */
  if (a >= 0x477ff000u) return sign | 0x7c00u;           /* rounds past 65504: infinity */
  if (a < 0x38800000u) {                                 /* half subnormal (or zero) */
    float m;
    memcpy(&m, &a, 4);
    float x = m * 16777216.0f; /* units of 2^-24, below 1024: exact */
    uint32_t q = (uint32_t)x;
    float fr = x - (float)q;
    if (fr > 0.5f || (fr == 0.5f && (q & 1u))) q++;
    return sign | (uint16_t)q;
  }
  uint32_t r = a - 0x38000000u;                          /* rebias 127 -> 15 */
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return sign | (uint16_t)r;
}

/* The premul_sum op for factor s on comm (device slot i of c), made once per (comm, type,
 * factor) and kept (dlpg__nccl_comm_t.premul); issue_mu held. */
static dlpg_status_t dlpg__nccl_premul_op(const char *fn, dlpg__nccl_comm_t *c, int i,
                                          ncclComm_t comm, ncclDataType_t type, double s,
                                          ncclRedOp_t *out) {
  for (int k = 0; k < c->npremul[i]; k++) {
    struct dlpg__nccl_premul *e = &c->premul[i][k];
    if (e->comm == comm && e->type == type && e->scalar == s) {
      *out = e->op;
      return DLPG_OK;
    }
  }
  union { float f; double d; uint16_t h; } v;
  switch (type) {
    case ncclFloat64: v.d = s; break;
    case ncclFloat16: v.h = dlpg__nccl_f2h((float)s); break;
    case ncclBfloat16: v.h = dlpg__nccl_f2bf((float)s); break;
    default: v.f = (float)s; break; /* ncclFloat32 (and complex64's parts) */
  }
  ncclRedOp_t op;
  ncclResult_t r = ncclRedOpCreatePreMulSum(&op, &v, type, ncclScalarHostImmediate, comm);
  if (r != ncclSuccess) return dlpg__nccl_result(r, comm, fn, "ncclRedOpCreatePreMulSum");
  int k = c->npremul[i];
  if (k == DLPG__NCCL_PREMUL_CACHE) { /* full: replace the oldest */
    k = c->premul_next[i];
    c->premul_next[i] = (k + 1) % DLPG__NCCL_PREMUL_CACHE;
    ncclRedOpDestroy(c->premul[i][k].op, c->premul[i][k].comm);
  } else {
    c->npremul[i]++;
  }
  c->premul[i][k] = (struct dlpg__nccl_premul){comm, type, s, op};
  *out = op;
  return DLPG_OK;
}

/* The NCCL type, op and count multiplier of a reducing op on device slot i. */
dlpg_status_t dlpg__nccl_reduce_args(const char *fn, const dlpg__be_op_t *op,
                                     dlpg__nccl_comm_t *c, int i, ncclComm_t comm,
                                     ncclDataType_t *type, ncclRedOp_t *rop,
                                     size_t *mult) {
  *mult = dlpg__nccl_reduce_type(op->in[i].dtype, op->rop, type, rop);
  if (op->rop == DLPG_PREMUL_SUM)
    return dlpg__nccl_premul_op(fn, c, i, comm, *type, dlpg__be_op_scalar(op), rop);
  return DLPG_OK;
}

