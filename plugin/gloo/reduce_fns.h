// Typed element-wise reduction functions for Gloo's type-erased reduce callback, for every
// dtype and reduce op the Gloo path serves, and the float16/bfloat16 conversions they use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gloo/c_headers.h"

namespace dlpg_gloo {

// Gloo's callback shape: out[i] = op(a[i], b[i]) for i < n (out may alias a or b).
using ReduceFn = void (*)(void *out, const void *a, const void *b, size_t n);

// The function for dtype and op (AVG reduces with SUM; divide afterwards), or nullptr when
// the pair is not served (the caller reports DLPG_ERR_UNSUPPORTED).
ReduceFn reduce_fn(dlpg__dtype_t dt, dlpg_reduce_op_t op);

// p[i] /= divisor for n elements (the AVG step). Integers divide with truncation; bool is
// left unchanged. Returns false for a dtype it does not know.
bool divide_elements(dlpg__dtype_t dt, void *p, size_t n, int divisor);

// dst[i] = src[i] * s for n elements (the premul_sum step): float16/bfloat16 through float,
// float32 with s as a float (the factor in the dtype, as NCCL applies it), float64 exactly.
// Returns false for another dtype (complex tensors come as their real parts).
bool premul_elements(dlpg__dtype_t dt, void *dst, const void *src, size_t n, double s);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even; overflow to infinity
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);  // round to nearest even; NaN stays NaN

}  // namespace dlpg_gloo
