/* The NCCL path's support rule (rules.c), apart so unit tests can drive it. */
#ifndef DLPG_NCCL_RULES_H_
#define DLPG_NCCL_RULES_H_

#include "dlpg/dlpg.h"
#include "core/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL_VERSION(2, 24, 0): the first NCCL with ncclFloat8e4m3 / ncclFloat8e5m2. */
#define DLPG__NCCL_FP8_VERSION 22400

int dlpg__nccl_is_fp8(dlpg__dtype_t dt);

/* Whether NCCL nccl_version (NCCL_VERSION_CODE form, 22809 = 2.28.9) can reduce dt with op on
 * device dev of compute capability major cc_major (read only for fp8); dt and op are
 * validated by core. OK, or UNSUPPORTED with a message naming fn, dtype and op. */
dlpg_status_t dlpg__nccl_reduce_rule(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op,
                                     int nccl_version, int dev, int cc_major);

#ifdef __cplusplus
}
#endif
#endif
