/* The names core and the backends print, and the dtype table behind them: dtypes (with
 * their DLPack code, bits and size), devices and reduce ops (operations' names come from
 * their table, op_kind.c). Pure functions of their argument, below everything that prints
 * them (the backend table, validation, the flight recorder, the backends' own messages). */
#include <stdio.h>

#include "core/group/op.h"
#include "core/group/names.h"

/* ------------------------------------------------------------------ dtypes */

typedef struct dlpg__dtype_def {
  uint8_t code, bits;
  const char *name;
} dlpg__dtype_def_t;

/* Indexed by dlpg__dtype_t. */
static const dlpg__dtype_def_t dlpg__dtypes[DLPG__DT_COUNT] = {
    [DLPG__DT_INT8] = {kDLInt, 8, "int8"},
    [DLPG__DT_INT16] = {kDLInt, 16, "int16"},
    [DLPG__DT_INT32] = {kDLInt, 32, "int32"},
    [DLPG__DT_INT64] = {kDLInt, 64, "int64"},
    [DLPG__DT_UINT8] = {kDLUInt, 8, "uint8"},
    [DLPG__DT_UINT16] = {kDLUInt, 16, "uint16"},
    [DLPG__DT_UINT32] = {kDLUInt, 32, "uint32"},
    [DLPG__DT_UINT64] = {kDLUInt, 64, "uint64"},
    [DLPG__DT_FLOAT16] = {kDLFloat, 16, "float16"},
    [DLPG__DT_BFLOAT16] = {kDLBfloat, 16, "bfloat16"},
    [DLPG__DT_FLOAT32] = {kDLFloat, 32, "float32"},
    [DLPG__DT_FLOAT64] = {kDLFloat, 64, "float64"},
    [DLPG__DT_BOOL] = {DLPG_DL_BOOL, 8, "bool"},
    [DLPG__DT_FLOAT8_E4M3FN] = {DLPG_DL_FLOAT8_E4M3FN, 8, "float8_e4m3fn"},
    [DLPG__DT_FLOAT8_E5M2] = {DLPG_DL_FLOAT8_E5M2, 8, "float8_e5m2"},
    [DLPG__DT_COMPLEX64] = {kDLComplex, 64, "complex64"},
    [DLPG__DT_COMPLEX128] = {kDLComplex, 128, "complex128"},
};

const char *dlpg__dtype_name(dlpg__dtype_t dt) {
  if ((int)dt < 0 || dt >= DLPG__DT_COUNT) return "invalid dtype";
  return dlpg__dtypes[dt].name;
}

size_t dlpg__dtype_size(dlpg__dtype_t dt) {
  if ((int)dt < 0 || dt >= DLPG__DT_COUNT) return 0;
  return dlpg__dtypes[dt].bits / 8u;
}

int dlpg__dtype_from_dl(uint8_t code, uint8_t bits, dlpg__dtype_t *out) {
  for (int i = 0; i < DLPG__DT_COUNT; i++)
    if (dlpg__dtypes[i].code == code && dlpg__dtypes[i].bits == bits) {
      *out = (dlpg__dtype_t)i;
      return 1;
    }
  return 0;
}

/* ------------------------------------------------------------------ devices */

const char *dlpg__device_name(int device_type) {
  switch (device_type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 9: return "vpi";
    case 10: return "rocm";
    case 11: return "rocm_host";
    case 12: return "ext_dev";
    case 13: return "cuda_managed";
    case 14: return "oneapi";
    case 15: return "webgpu";
    case 16: return "hexagon";
    case 17: return "maia";
  }
  return "unknown device";
}

const char *dlpg__reduce_op_name(dlpg_reduce_op_t op) {
  static const char *names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor",
                                "premul_sum"};
  if ((int)op >= 0 && (int)op < (int)(sizeof names / sizeof names[0])) return names[op];
  static _Thread_local char buf[32];
  snprintf(buf, sizeof buf, "op(%d)", (int)op);
  return buf;
}
