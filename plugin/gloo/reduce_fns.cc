// Element-wise reductions for the Gloo path (see reduce_fns.h). float16 and bfloat16 are
// reduced in float and rounded back; bool is reduced logically (SUM/MAX/BOR = or,
// PROD/MIN/BAND = and, BXOR = xor) and always written as 0 or 1.
#include "gloo/reduce_fns.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace dlpg_gloo {

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      // Subnormal half: normalise into a float.
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or NaN
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  if (absx >= 0x477ff000u)  // rounds to >= 65520: overflow
    return sign | 0x7c00u;
  if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (absx < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    uint32_t e = absx >> 23;
    uint32_t man = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 + 1
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) half_man++;
    return sign | static_cast<uint16_t>(half_man);
  }
  uint32_t e = (absx >> 23) - 127 + 15;
  uint32_t man = absx & 0x7fffffu;
  uint32_t h = e << 10 | man >> 13;
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;  // may carry into the exponent
  return sign | static_cast<uint16_t>(h);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

namespace {

struct Sum { template <class T> static T f(T a, T b) { return a + b; } };
struct Prod {
  // Narrow unsigned operands promote to int, whose product can overflow (UB): multiply as
  // unsigned int, which wraps like the type itself.
  template <class T> static T f(T a, T b) {
    if constexpr (std::is_integral_v<T> && sizeof(T) < sizeof(unsigned))
      return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
    else
      return a * b;
  }
};
struct Min { template <class T> static T f(T a, T b) { return b < a ? b : a; } };
struct Max { template <class T> static T f(T a, T b) { return a < b ? b : a; } };
struct BAnd { template <class T> static T f(T a, T b) { return a & b; } };
struct BOr { template <class T> static T f(T a, T b) { return a | b; } };
struct BXor { template <class T> static T f(T a, T b) { return a ^ b; } };

// Integers and native floats. Integer arithmetic is done in the unsigned type of the same
// width, so SUM and PROD wrap around like NCCL and torch instead of overflowing (UB).
template <class T, class Op>
void native(void *out, const void *a, const void *b, size_t n) {
  T *o = static_cast<T *>(out);
  const T *x = static_cast<const T *>(a);
  const T *y = static_cast<const T *>(b);
  if constexpr (std::is_integral_v<T> &&
                (std::is_same_v<Op, Sum> || std::is_same_v<Op, Prod>)) {
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < n; i++)
      o[i] = static_cast<T>(Op::template f<U>(static_cast<U>(x[i]), static_cast<U>(y[i])));
  } else {
    for (size_t i = 0; i < n; i++) o[i] = Op::template f<T>(x[i], y[i]);
  }
}

// float16 and bfloat16: reduce in float, round back.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), class Op>
void half_like(void *out, const void *a, const void *b, size_t n) {
  uint16_t *o = static_cast<uint16_t *>(out);
  const uint16_t *x = static_cast<const uint16_t *>(a);
  const uint16_t *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; i++) o[i] = FromF(Op::template f<float>(ToF(x[i]), ToF(y[i])));
}

enum class BoolOp { Or, And, Xor };
template <BoolOp K>
void logical(void *out, const void *a, const void *b, size_t n) {
  uint8_t *o = static_cast<uint8_t *>(out);
  const uint8_t *x = static_cast<const uint8_t *>(a);
  const uint8_t *y = static_cast<const uint8_t *>(b);
  for (size_t i = 0; i < n; i++) {
    bool p = x[i] != 0, q = y[i] != 0;
    o[i] = K == BoolOp::Or ? (p || q) : K == BoolOp::And ? (p && q) : (p != q);
  }
}

template <class T>
ReduceFn integer_fn(dlpg_reduce_op_t op) {
  switch (op) {
    case DLPG_SUM: case DLPG_AVG: return native<T, Sum>;
    case DLPG_PROD: return native<T, Prod>;
    case DLPG_MIN: return native<T, Min>;
    case DLPG_MAX: return native<T, Max>;
    case DLPG_BAND: return native<T, BAnd>;
    case DLPG_BOR: return native<T, BOr>;
    case DLPG_BXOR: return native<T, BXor>;
    case DLPG_PREMUL_SUM: return nullptr;  // floating dtypes only
  }
  return nullptr;
}

template <class T>
ReduceFn float_fn(dlpg_reduce_op_t op) {
  switch (op) {
    case DLPG_SUM: case DLPG_AVG: case DLPG_PREMUL_SUM: return native<T, Sum>;
    case DLPG_PROD: return native<T, Prod>;
    case DLPG_MIN: return native<T, Min>;
    case DLPG_MAX: return native<T, Max>;
    default: return nullptr;
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
ReduceFn half_fn(dlpg_reduce_op_t op) {
  switch (op) {
    case DLPG_SUM: case DLPG_AVG: case DLPG_PREMUL_SUM: return half_like<ToF, FromF, Sum>;
    case DLPG_PROD: return half_like<ToF, FromF, Prod>;
    case DLPG_MIN: return half_like<ToF, FromF, Min>;
    case DLPG_MAX: return half_like<ToF, FromF, Max>;
    default: return nullptr;
  }
}

template <class T>
void divide_native(void *p, size_t n, int d) {
  T *x = static_cast<T *>(p);
  for (size_t i = 0; i < n; i++) x[i] = static_cast<T>(x[i] / static_cast<T>(d));
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divide_half(void *p, size_t n, int d) {
  uint16_t *x = static_cast<uint16_t *>(p);
  for (size_t i = 0; i < n; i++) x[i] = FromF(ToF(x[i]) / static_cast<float>(d));
}

template <class T, class S>
void premul_native(void *dst, const void *src, size_t n, S s) {
  T *d = static_cast<T *>(dst);
  const T *x = static_cast<const T *>(src);
  for (size_t i = 0; i < n; i++) d[i] = static_cast<T>(x[i] * s);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void premul_half(void *dst, const void *src, size_t n, float s) {
  uint16_t *d = static_cast<uint16_t *>(dst);
  const uint16_t *x = static_cast<const uint16_t *>(src);
  for (size_t i = 0; i < n; i++) d[i] = FromF(ToF(x[i]) * s);
}

}  // namespace

ReduceFn reduce_fn(dlpg__dtype_t dt, dlpg_reduce_op_t op) {
  switch (dt) {
    case DLPG__DT_INT8: return integer_fn<int8_t>(op);
    case DLPG__DT_INT16: return integer_fn<int16_t>(op);
    case DLPG__DT_INT32: return integer_fn<int32_t>(op);
    case DLPG__DT_INT64: return integer_fn<int64_t>(op);
    case DLPG__DT_UINT8: return integer_fn<uint8_t>(op);
    case DLPG__DT_UINT16: return integer_fn<uint16_t>(op);
    case DLPG__DT_UINT32: return integer_fn<uint32_t>(op);
    case DLPG__DT_UINT64: return integer_fn<uint64_t>(op);
    case DLPG__DT_FLOAT16: return half_fn<half_to_float, float_to_half>(op);
    case DLPG__DT_BFLOAT16: return half_fn<bf16_to_float, float_to_bf16>(op);
    case DLPG__DT_FLOAT32: return float_fn<float>(op);
    case DLPG__DT_FLOAT64: return float_fn<double>(op);
    case DLPG__DT_BOOL:
      switch (op) {
        case DLPG_SUM: case DLPG_MAX: case DLPG_BOR: case DLPG_AVG: return logical<BoolOp::Or>;
        case DLPG_PROD: case DLPG_MIN: case DLPG_BAND: return logical<BoolOp::And>;
        case DLPG_BXOR: return logical<BoolOp::Xor>;
        case DLPG_PREMUL_SUM: return nullptr;
      }
      return nullptr;
    default:
      return nullptr;
  }
}

bool divide_elements(dlpg__dtype_t dt, void *p, size_t n, int divisor) {
  switch (dt) {
    case DLPG__DT_INT8: divide_native<int8_t>(p, n, divisor); return true;
    case DLPG__DT_INT16: divide_native<int16_t>(p, n, divisor); return true;
    case DLPG__DT_INT32: divide_native<int32_t>(p, n, divisor); return true;
    case DLPG__DT_INT64: divide_native<int64_t>(p, n, divisor); return true;
    case DLPG__DT_UINT8: divide_native<uint8_t>(p, n, divisor); return true;
    case DLPG__DT_UINT16: divide_native<uint16_t>(p, n, divisor); return true;
    case DLPG__DT_UINT32: divide_native<uint32_t>(p, n, divisor); return true;
    case DLPG__DT_UINT64: divide_native<uint64_t>(p, n, divisor); return true;
    case DLPG__DT_FLOAT16: divide_half<half_to_float, float_to_half>(p, n, divisor); return true;
    case DLPG__DT_BFLOAT16: divide_half<bf16_to_float, float_to_bf16>(p, n, divisor); return true;
    case DLPG__DT_FLOAT32: divide_native<float>(p, n, divisor); return true;
    case DLPG__DT_FLOAT64: divide_native<double>(p, n, divisor); return true;
    case DLPG__DT_BOOL: return true;
    default: return false;
  }
}

bool premul_elements(dlpg__dtype_t dt, void *dst, const void *src, size_t n, double s) {
  const float f = static_cast<float>(s);
  switch (dt) {
    case DLPG__DT_FLOAT16: premul_half<half_to_float, float_to_half>(dst, src, n, f); return true;
    case DLPG__DT_BFLOAT16: premul_half<bf16_to_float, float_to_bf16>(dst, src, n, f); return true;
    case DLPG__DT_FLOAT32: premul_native<float>(dst, src, n, f); return true;
    case DLPG__DT_FLOAT64: premul_native<double>(dst, src, n, s); return true;
    default: return false;
  }
}

}  // namespace dlpg_gloo
