/* The engine's reduction loops (reduce.h): one pair of functions (dst = a op b and
 * dst op= b) per dtype and op, written by macros so each is a plain loop over restrict
 * pointers that the compiler vectorises. */
/* The build's -O2 vectorises only loops whose trip count needs no scalar epilogue; these
 * loops are the engine's bandwidth, so they get the dynamic cost model (as at -O3). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "shm/reduce.h"

#include <string.h>

static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal half: normalise into a float */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
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

static inline uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  if (absx >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: overflow */
  if (absx < 0x38800000u) {                       /* subnormal half or zero */
    if (absx < 0x33000000u) return sign;
    uint32_t e = absx >> 23, man = (absx & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t hm = man >> shift, rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (hm & 1u))) hm++;
    return sign | (uint16_t)hm;
  }
  uint32_t e = (absx >> 23) - 127 + 15, man = absx & 0x7fffffu, h = e << 10 | man >> 13;
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into the exponent */
  return sign | (uint16_t)h;
}

static inline float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float dlpg__shm_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t dlpg__shm_float_to_half(float f) { return float_to_half(f); }
float dlpg__shm_bf16_to_float(uint16_t b) { return bf16_to_float(b); }
uint16_t dlpg__shm_float_to_bf16(float f) { return float_to_bf16(f); }

/* One (comb, acc) pair: T the storage type, L the type the op is computed in, IN/OUT the
 * conversions between them, EXPR the op on x and y of type L. */
#define DLPG__SHM_KERNEL(NAME, T, L, IN, OUT, EXPR)                                        \
  static void comb_##NAME(void *restrict d_, const void *restrict a_,                      \
                          const void *restrict b_, size_t n) {                            \
    T *restrict d = d_;                                                                     \
    const T *restrict a = a_, *restrict b = b_;                                             \
    for (size_t i = 0; i < n; i++) {                                                        \
      L x = IN(a[i]), y = IN(b[i]);                                                         \
      d[i] = OUT(EXPR);                                                                     \
    }                                                                                       \
  }                                                                                         \
  static void acc_##NAME(void *restrict d_, const void *restrict b_, size_t n) {           \
    T *restrict d = d_;                                                                     \
    const T *restrict b = b_;                                                               \
    for (size_t i = 0; i < n; i++) {                                                        \
      L x = IN(d[i]), y = IN(b[i]);                                                         \
      d[i] = OUT(EXPR);                                                                     \
    }                                                                                       \
  }

#define DLPG__ID(v) (v)
/* Integers: computed in the unsigned type of their width, so sum and prod wrap instead of
 * overflowing (undefined behaviour); narrow products are taken in unsigned int, because
 * uint16 operands would promote to int, whose product can overflow. W is that wide type. */
#define DLPG__SHM_INT(SFX, T, U, W)                                                     \
  DLPG__SHM_KERNEL(sum_##SFX, T, U, (U), (T), (U)(x + y))                               \
  DLPG__SHM_KERNEL(prod_##SFX, T, U, (U), (T), (U)((W)x * (W)y))                         \
  DLPG__SHM_KERNEL(min_##SFX, T, T, DLPG__ID, DLPG__ID, (y < x ? y : x))                  \
  DLPG__SHM_KERNEL(max_##SFX, T, T, DLPG__ID, DLPG__ID, (x < y ? y : x))                  \
  DLPG__SHM_KERNEL(band_##SFX, T, T, DLPG__ID, DLPG__ID, (T)(x & y))                      \
  DLPG__SHM_KERNEL(bor_##SFX, T, T, DLPG__ID, DLPG__ID, (T)(x | y))                       \
  DLPG__SHM_KERNEL(bxor_##SFX, T, T, DLPG__ID, DLPG__ID, (T)(x ^ y))
DLPG__SHM_INT(i8, int8_t, uint8_t, unsigned)
DLPG__SHM_INT(i16, int16_t, uint16_t, unsigned)
DLPG__SHM_INT(i32, int32_t, uint32_t, uint32_t)
DLPG__SHM_INT(i64, int64_t, uint64_t, uint64_t)
DLPG__SHM_INT(u8, uint8_t, uint8_t, unsigned)
DLPG__SHM_INT(u16, uint16_t, uint16_t, unsigned)
DLPG__SHM_INT(u32, uint32_t, uint32_t, uint32_t)
DLPG__SHM_INT(u64, uint64_t, uint64_t, uint64_t)

/* Floats (min/max exactly as Gloo's: NaN handling follows the comparisons). */
#define DLPG__SHM_FLT(SFX, T, L, IN, OUT)                                     \
  DLPG__SHM_KERNEL(sum_##SFX, T, L, IN, OUT, x + y)                          \
  DLPG__SHM_KERNEL(prod_##SFX, T, L, IN, OUT, x * y)                         \
  DLPG__SHM_KERNEL(min_##SFX, T, L, IN, OUT, (y < x ? y : x))                 \
  DLPG__SHM_KERNEL(max_##SFX, T, L, IN, OUT, (x < y ? y : x))
DLPG__SHM_FLT(f32, float, float, DLPG__ID, DLPG__ID)
DLPG__SHM_FLT(f64, double, double, DLPG__ID, DLPG__ID)
DLPG__SHM_FLT(f16, uint16_t, float, half_to_float, float_to_half)
DLPG__SHM_FLT(bf16, uint16_t, float, bf16_to_float, float_to_bf16)

/* Bool: stored as bytes, any non-zero is true, results are 0 or 1. */
#define DLPG__B(v) ((v) != 0)
DLPG__SHM_KERNEL(or_b, uint8_t, int, DLPG__B, (uint8_t), (x | y))
DLPG__SHM_KERNEL(and_b, uint8_t, int, DLPG__B, (uint8_t), (x & y))
DLPG__SHM_KERNEL(xor_b, uint8_t, int, DLPG__B, (uint8_t), (x ^ y))

#define DLPG__PAIR(NAME) (r->comb = comb_##NAME, r->acc = acc_##NAME, 1)
#define DLPG__INT_CASE(DT, SFX)                          \
  case DT:                                               \
    switch (op) {                                        \
      case DLPG_SUM: return DLPG__PAIR(sum_##SFX);       \
      case DLPG_PROD: return DLPG__PAIR(prod_##SFX);     \
      case DLPG_MIN: return DLPG__PAIR(min_##SFX);       \
      case DLPG_MAX: return DLPG__PAIR(max_##SFX);       \
      case DLPG_BAND: return DLPG__PAIR(band_##SFX);     \
      case DLPG_BOR: return DLPG__PAIR(bor_##SFX);       \
      case DLPG_BXOR: return DLPG__PAIR(bxor_##SFX);     \
      default: return 0;                                 \
    }
#define DLPG__FLT_CASE(DT, SFX)                          \
  case DT:                                               \
    switch (op) {                                        \
      case DLPG_SUM: case DLPG_AVG: case DLPG_PREMUL_SUM: return DLPG__PAIR(sum_##SFX); \
      case DLPG_PROD: return DLPG__PAIR(prod_##SFX);     \
      case DLPG_MIN: return DLPG__PAIR(min_##SFX);       \
      case DLPG_MAX: return DLPG__PAIR(max_##SFX);       \
      default: return 0;                                 \
    }

size_t dlpg__shm_elem_size(dlpg__dtype_t dt) {
  switch (dt) {
    case DLPG__DT_INT8: case DLPG__DT_UINT8: case DLPG__DT_BOOL: return 1;
    case DLPG__DT_INT16: case DLPG__DT_UINT16: case DLPG__DT_FLOAT16: case DLPG__DT_BFLOAT16: return 2;
    case DLPG__DT_INT32: case DLPG__DT_UINT32: case DLPG__DT_FLOAT32: return 4;
    case DLPG__DT_INT64: case DLPG__DT_UINT64: case DLPG__DT_FLOAT64: return 8;
    default: return 0;
  }
}

static int dlpg__shm_pick(dlpg__dtype_t dt, dlpg_reduce_op_t op, dlpg__shm_reducer_t *r) {
  switch (dt) {
    DLPG__INT_CASE(DLPG__DT_INT8, i8)
    DLPG__INT_CASE(DLPG__DT_INT16, i16)
    DLPG__INT_CASE(DLPG__DT_INT32, i32)
    DLPG__INT_CASE(DLPG__DT_INT64, i64)
    DLPG__INT_CASE(DLPG__DT_UINT8, u8)
    DLPG__INT_CASE(DLPG__DT_UINT16, u16)
    DLPG__INT_CASE(DLPG__DT_UINT32, u32)
    DLPG__INT_CASE(DLPG__DT_UINT64, u64)
    DLPG__FLT_CASE(DLPG__DT_FLOAT16, f16)
    DLPG__FLT_CASE(DLPG__DT_BFLOAT16, bf16)
    DLPG__FLT_CASE(DLPG__DT_FLOAT32, f32)
    DLPG__FLT_CASE(DLPG__DT_FLOAT64, f64)
    case DLPG__DT_BOOL:
      switch (op) {
        case DLPG_SUM: case DLPG_MAX: case DLPG_BOR: return DLPG__PAIR(or_b);
        case DLPG_PROD: case DLPG_MIN: case DLPG_BAND: return DLPG__PAIR(and_b);
        case DLPG_BXOR: return DLPG__PAIR(xor_b);
        default: return 0;
      }
    default:
      return 0;
  }
}

int dlpg__shm_reducer(dlpg__dtype_t dt, dlpg_reduce_op_t op, dlpg__shm_reducer_t *r) {
  if (!dlpg__shm_pick(dt, op, r)) return 0;
  r->elem = dlpg__shm_elem_size(dt);
  r->avg = op == DLPG_AVG;
  r->dt = dt;
  return 1;
}

#define DLPG__DIV(T, IN, OUT)                                      \
  do {                                                             \
    T *x = p;                                                      \
    for (size_t i = 0; i < n; i++) x[i] = OUT(IN(x[i]) / (float)d); \
  } while (0)

void dlpg__shm_divide(dlpg__dtype_t dt, void *p, size_t n, int d) {
  switch (dt) {
    case DLPG__DT_FLOAT32: DLPG__DIV(float, DLPG__ID, DLPG__ID); break;
    case DLPG__DT_FLOAT64: {
      double *x = p;
      for (size_t i = 0; i < n; i++) x[i] = x[i] / (double)d;
      break;
    }
    case DLPG__DT_FLOAT16: DLPG__DIV(uint16_t, half_to_float, float_to_half); break;
    case DLPG__DT_BFLOAT16: DLPG__DIV(uint16_t, bf16_to_float, float_to_bf16); break;
    default: break; /* avg is refused on other dtypes (dlpg__shm_check_reduce) */
  }
}

#define DLPG__PREMUL(T, IN, OUT, F)                                          \
  do {                                                                       \
    T *restrict d = dst;                                                     \
    const T *restrict x = src;                                               \
    for (size_t i = 0; i < n; i++) d[i] = OUT(IN(x[i]) * (F)); \
  } while (0)

int dlpg__shm_premul(dlpg__dtype_t dt, void *dst, const void *src, size_t n, double s) {
  const float f = (float)s;
  switch (dt) {
    case DLPG__DT_FLOAT32: DLPG__PREMUL(float, DLPG__ID, DLPG__ID, f); return 1;
    case DLPG__DT_FLOAT64: DLPG__PREMUL(double, DLPG__ID, DLPG__ID, s); return 1;
    case DLPG__DT_FLOAT16: DLPG__PREMUL(uint16_t, half_to_float, float_to_half, f); return 1;
    case DLPG__DT_BFLOAT16: DLPG__PREMUL(uint16_t, bf16_to_float, float_to_bf16, f); return 1;
    default: return 0; /* premul_sum is refused on other dtypes (dlpg__shm_check_reduce) */
  }
}
