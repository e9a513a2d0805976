/* DLPack rules in one place (ABI.md, "Tensors"): a DLTensor is checked and normalised into
 * a dlpg__tensor_t at the door; backends never see a DLTensor. Type and reduce-op support
 * are tables with an explicit "unsupported" entry (model: UCC tl_nccl), so an unsupported
 * pair fails in validation, never inside NCCL or Gloo. */
#ifndef DLPG_CORE_TENSOR_H_
#define DLPG_CORE_TENSOR_H_

#include <stddef.h>
#include <stdint.h>
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every dtype of ABI.md. */
typedef enum dlpg__dtype {
  DLPG__DT_INT8, DLPG__DT_INT16, DLPG__DT_INT32, DLPG__DT_INT64,
  DLPG__DT_UINT8, DLPG__DT_UINT16, DLPG__DT_UINT32, DLPG__DT_UINT64,
  DLPG__DT_FLOAT16, DLPG__DT_BFLOAT16, DLPG__DT_FLOAT32, DLPG__DT_FLOAT64,
  DLPG__DT_BOOL, DLPG__DT_FLOAT8_E4M3FN, DLPG__DT_FLOAT8_E5M2,
  DLPG__DT_COUNT
} dlpg__dtype_t;

typedef enum dlpg__backend { DLPG__BACKEND_GLOO = 0, DLPG__BACKEND_NCCL = 1 } dlpg__backend_t;

/* A validated tensor. */
typedef struct dlpg__tensor {
  void *ptr;             /* data + byte_offset */
  int64_t numel;
  size_t nbytes;
  dlpg__dtype_t dtype;
  dlpg__backend_t backend; /* GLOO for kDLCPU/kDLCUDAHost, NCCL for kDLCUDA/kDLCUDAManaged */
  int device_type;       /* the DLDeviceType as given */
  int device_id;
} dlpg__tensor_t;

const char *dlpg__dtype_name(dlpg__dtype_t dt); /* "float32", ... */
size_t dlpg__dtype_size(dlpg__dtype_t dt);
const char *dlpg__device_name(int device_type); /* "cpu", "cuda", ... */
const char *dlpg__reduce_op_name(dlpg_reduce_op_t op); /* "sum", ...; "op(N)" invalid */

/* Check one DLTensor and normalise it. fn and arg name the caller and argument for the
 * message ("dlpg_allreduce", "inputs", index 1 -> "inputs[1]"; index < 0 -> "tensor"). */
dlpg_status_t dlpg__tensor_from_dl(const char *fn, const char *arg, int index, const DLTensor *t,
                                   dlpg__tensor_t *out);

/* Whether backend can reduce dtype with op; else UNSUPPORTED (or INVALID_ARGUMENT for an op
 * outside the enum) with a message naming fn, dtype, op and backend. */
dlpg_status_t dlpg__check_reduce(const char *fn, dlpg__backend_t backend, dlpg__dtype_t dt,
                                 dlpg_reduce_op_t op);
/* Whether backend can move dtype at all (NCCL: fp8 only where the build supports it). */
dlpg_status_t dlpg__check_dtype(const char *fn, dlpg__backend_t backend, dlpg__dtype_t dt);

#ifdef __cplusplus
}
#endif
#endif
