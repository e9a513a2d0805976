/* DLPack rules in one place (ABI.md, "Tensors"): a DLTensor is checked and normalised into
 * a dlpg__tensor_t at the door; backends never see a DLTensor. Which dtypes and reduce ops
 * a device can reduce is each backend's rule (its check in core/backend.h), asked during
 * validation, so an unsupported pair fails at the call, never inside NCCL or Gloo. */
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

/* A validated tensor. */
typedef struct dlpg__tensor {
  void *ptr;             /* data + byte_offset */
  int64_t numel;
  size_t nbytes;
  dlpg__dtype_t dtype;
  int backend;           /* registry slot of the backend serving the device */
  int device_type;       /* the DLDeviceType as given */
  int device_id;
} dlpg__tensor_t;

const char *dlpg__dtype_name(dlpg__dtype_t dt); /* "float32", ... */
size_t dlpg__dtype_size(dlpg__dtype_t dt);
const char *dlpg__device_name(int device_type); /* "cpu", "cuda", ... */
const char *dlpg__reduce_op_name(dlpg_reduce_op_t op); /* "sum", ...; "op(N)" invalid */
/* The dtype of DLPack's (code, bits); 0 when dlpg has none (lanes are checked apart). */
int dlpg__dtype_from_dl(uint8_t code, uint8_t bits, dlpg__dtype_t *out);

/* Check one DLTensor and normalise it. fn and arg name the caller and argument for the
 * message ("dlpg_allreduce", "inputs", index 1 -> "inputs[1]"; index < 0 -> "tensor"). */
dlpg_status_t dlpg__tensor_from_dl(const char *fn, const char *arg, int index, const DLTensor *t,
                                   dlpg__tensor_t *out);

/* 1 for the floating dtypes (float8/16/32/64, bfloat16): those reduce op avg accepts. */
static inline int dlpg__dtype_is_float(dlpg__dtype_t dt) {
  return dt == DLPG__DT_FLOAT16 || dt == DLPG__DT_BFLOAT16 || dt == DLPG__DT_FLOAT32 ||
         dt == DLPG__DT_FLOAT64 || dt == DLPG__DT_FLOAT8_E4M3FN || dt == DLPG__DT_FLOAT8_E5M2;
}

#ifdef __cplusplus
}
#endif
#endif
