/* Element-wise reductions of the engine, one loop per dtype and reduce op, so the compiler
 * vectorises each and the engine calls a function once per chunk, never per element. The
 * rules and rounding are the Gloo path's (plugin/gloo/reduce_fns.cc): integers wrap (sum and
 * prod in the unsigned type), float16/bfloat16 are reduced in float and rounded back after
 * each pair, bool reduces logically (sum/max/bor = or, prod/min/band = and, bxor = xor) to
 * 0 or 1, avg is sum then a division by the number of ranks. */
#ifndef DLPG_SHM_REDUCE_H_
#define DLPG_SHM_REDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "core/lines/tensor.h"
#include "dlpg/dlpg.h"

/* dst = a op b, for n elements (dst, a, b distinct). */
typedef void (*dlpg__shm_comb_fn)(void *restrict dst, const void *restrict a,
                                  const void *restrict b, size_t n);
/* dst = dst op b. */
typedef void (*dlpg__shm_acc_fn)(void *restrict dst, const void *restrict b, size_t n);

typedef struct dlpg__shm_reducer {
  dlpg__shm_comb_fn comb;
  dlpg__shm_acc_fn acc;
  size_t elem; /* bytes per element */
  int avg;     /* divide by the number of ranks after the sum */
  dlpg__dtype_t dt;
} dlpg__shm_reducer_t;

/* 1 and *r filled when op reduces dt; 0 otherwise. */
int dlpg__shm_reducer(dlpg__dtype_t dt, dlpg_reduce_op_t op, dlpg__shm_reducer_t *r);
/* p[i] /= d (the avg step; floating dtypes only). */
void dlpg__shm_divide(dlpg__dtype_t dt, void *p, size_t n, int d);
/* dst[i] = src[i] * s in dt (float16/bfloat16 through float, float32 with s as a float: the
 * factor in the dtype, as NCCL's premul-sum applies it); the premul_sum step, floating
 * dtypes only (a complex tensor is handed over as its real parts). 0 for another dtype. */
int dlpg__shm_premul(dlpg__dtype_t dt, void *dst, const void *src, size_t n, double s);
/* Bytes of one element of dt (0 for a dtype the engine does not know). */
size_t dlpg__shm_elem_size(dlpg__dtype_t dt);

float dlpg__shm_half_to_float(uint16_t h);
uint16_t dlpg__shm_float_to_half(float f); /* nearest even; overflow to infinity */
float dlpg__shm_bf16_to_float(uint16_t b);
uint16_t dlpg__shm_float_to_bf16(float f); /* nearest even; NaN stays NaN */

#endif
