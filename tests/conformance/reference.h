// Independent reference math for the conformance suite: dtype descriptors, float16 and
// bfloat16 conversions, reproducible per-rank random data and element-wise reductions.
// Nothing here calls the plugin, so a plugin bug cannot hide in its own reference.
#pragma once

#include <stdint.h>
#include <string.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "dlpg/dlpg.h"

namespace dlpgt {

// ------------------------------------------------------------------ dtypes

enum class DT { I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64, BOOL, F8E4M3, F8E5M2 };

struct DTInfo {
  DT dt;
  const char *name;
  uint8_t code;
  uint8_t bits;
  bool is_float;  // float16/bfloat16/float32/float64 (not float8)
  bool is_int;    // signed or unsigned integer
  bool is_signed;
  bool is_bool;
  bool is_fp8;
};

inline const std::vector<DTInfo> &AllDTypes() {
  static const std::vector<DTInfo> v = {
      {DT::I8, "int8", kDLInt, 8, false, true, true, false, false},
      {DT::I16, "int16", kDLInt, 16, false, true, true, false, false},
      {DT::I32, "int32", kDLInt, 32, false, true, true, false, false},
      {DT::I64, "int64", kDLInt, 64, false, true, true, false, false},
      {DT::U8, "uint8", kDLUInt, 8, false, true, false, false, false},
      {DT::U16, "uint16", kDLUInt, 16, false, true, false, false, false},
      {DT::U32, "uint32", kDLUInt, 32, false, true, false, false, false},
      {DT::U64, "uint64", kDLUInt, 64, false, true, false, false, false},
      {DT::F16, "float16", kDLFloat, 16, true, false, true, false, false},
      {DT::BF16, "bfloat16", kDLBfloat, 16, true, false, true, false, false},
      {DT::F32, "float32", kDLFloat, 32, true, false, true, false, false},
      {DT::F64, "float64", kDLFloat, 64, true, false, true, false, false},
      {DT::BOOL, "bool", DLPG_DL_BOOL, 8, false, false, false, true, false},
      {DT::F8E4M3, "float8_e4m3fn", DLPG_DL_FLOAT8_E4M3FN, 8, false, false, true, false, true},
      {DT::F8E5M2, "float8_e5m2", DLPG_DL_FLOAT8_E5M2, 8, false, false, true, false, true},
  };
  return v;
}

inline const DTInfo &Info(DT dt) { return AllDTypes()[static_cast<int>(dt)]; }
inline size_t ElemSize(DT dt) { return Info(dt).bits / 8u; }
inline DLDataType DLType(DT dt) {
  DLDataType t;
  t.code = Info(dt).code;
  t.bits = Info(dt).bits;
  t.lanes = 1;
  return t;
}

inline const char *OpName(dlpg_reduce_op_t op) {
  static const char *n[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor",
                            "premul_sum"};
  return (op >= 0 && op <= 8) ? n[op] : "op(?)";
}
inline std::vector<dlpg_reduce_op_t> AllOps() {
  return {DLPG_SUM, DLPG_PROD, DLPG_MIN, DLPG_MAX, DLPG_AVG, DLPG_BAND, DLPG_BOR, DLPG_BXOR};
}

// The reductions dlpg.h ("Operations", "Tensors") promises on every backend: sum, prod, min
// and max on every integer, floating and bool dtype, avg on the floating ones. Beyond these
// (bitwise ops, avg on integers, float8) a plugin says what it serves through its capability
// query (dlpg_reduce_supported; harness.h ReduceSupported), which the suite then holds it to.
inline bool AbiRequiresReduce(DT dt, dlpg_reduce_op_t op) {
  const DTInfo &i = Info(dt);
  if (i.is_fp8) return false;
  switch (op) {
    case DLPG_SUM: case DLPG_PROD: case DLPG_MIN: case DLPG_MAX: return true;
    case DLPG_AVG: return i.is_float;
    default: return false;
  }
}

// ------------------------------------------------------------------ float16 / bfloat16

inline float BitsToF32(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
inline uint32_t F32ToBits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

// IEEE binary16, round to nearest even (written here, not taken from any library).
inline uint16_t F32ToF16(float f) {
  uint32_t x = F32ToBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0u));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    uint32_t m = man | 0x800000u;
    int shift = 14 - e;
    uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    uint32_t r = m >> shift;
    if (rem > half || (rem == half && (r & 1u))) r++;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return static_cast<uint16_t>(h);
}

inline float F16ToF32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) ? 1u : 0u;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = BitsToF32(((exp - 15 + 127) << 23) | (man << 13));
  return sign ? -v : v;
}

inline uint16_t F32ToBF16(float f) {
  uint32_t x = F32ToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = ((x >> 16) & 1u) + 0x7fffu;
  return static_cast<uint16_t>((x + rounding) >> 16);
}
inline float BF16ToF32(uint16_t b) { return BitsToF32(static_cast<uint32_t>(b) << 16); }

// ------------------------------------------------------------------ random data

// splitmix64: small, fast, reproducible on every rank.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int64_t Range(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

inline uint64_t Mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xff51afd7ed558ccdull));
  return r.Next();
}
inline uint64_t HashStr(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Store the double v (exactly representable by construction) or the integer bits into
// element i of buf.
inline void StoreF(DT dt, void *buf, size_t i, double v) {
  switch (dt) {
    case DT::F16: static_cast<uint16_t *>(buf)[i] = F32ToF16(static_cast<float>(v)); break;
    case DT::BF16: static_cast<uint16_t *>(buf)[i] = F32ToBF16(static_cast<float>(v)); break;
    case DT::F32: static_cast<float *>(buf)[i] = static_cast<float>(v); break;
    case DT::F64: static_cast<double *>(buf)[i] = v; break;
    default: break;
  }
}
inline double LoadF(DT dt, const void *buf, size_t i) {
  switch (dt) {
    case DT::F16: return F16ToF32(static_cast<const uint16_t *>(buf)[i]);
    case DT::BF16: return BF16ToF32(static_cast<const uint16_t *>(buf)[i]);
    case DT::F32: return static_cast<const float *>(buf)[i];
    case DT::F64: return static_cast<const double *>(buf)[i];
    default: return 0;
  }
}
// Integer element as uint64 bits (sign-extended for signed types).
inline uint64_t LoadU(DT dt, const void *buf, size_t i) {
  switch (dt) {
    case DT::I8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int8_t *>(buf)[i]));
    case DT::I16: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int16_t *>(buf)[i]));
    case DT::I32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t *>(buf)[i]));
    case DT::I64: return static_cast<uint64_t>(static_cast<const int64_t *>(buf)[i]);
    case DT::U8: case DT::BOOL: case DT::F8E4M3: case DT::F8E5M2: return static_cast<const uint8_t *>(buf)[i];
    case DT::U16: return static_cast<const uint16_t *>(buf)[i];
    case DT::U32: return static_cast<const uint32_t *>(buf)[i];
    case DT::U64: return static_cast<const uint64_t *>(buf)[i];
    default: return 0;
  }
}
inline void StoreU(DT dt, void *buf, size_t i, uint64_t v) {
  switch (ElemSize(dt)) {
    case 1: static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(v); break;
    case 2: static_cast<uint16_t *>(buf)[i] = static_cast<uint16_t>(v); break;
    case 4: static_cast<uint32_t *>(buf)[i] = static_cast<uint32_t>(v); break;
    case 8: static_cast<uint64_t *>(buf)[i] = v; break;
  }
}

// Fill n elements of buf with data for (rank, seed) suited to op: every reduction of up to
// 16 contributions of such data is exact in the dtype (floats: multiples of 1/4 with small
// magnitude, products of powers of two and 1.5), integer sums and products may wrap, which
// the reference reproduces.
inline void Generate(DT dt, dlpg_reduce_op_t op, uint64_t seed, int rank, void *buf, size_t n) {
  Rng r(Mix(seed, static_cast<uint64_t>(rank) + 1));
  const DTInfo &in = Info(dt);
  static const double kProd[] = {-2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2};
  for (size_t i = 0; i < n; i++) {
    if (in.is_float) {
      double v = (op == DLPG_PROD) ? kProd[r.Next() % 8] : static_cast<double>(r.Range(-32, 32)) / 4.0;
      StoreF(dt, buf, i, v);
    } else if (in.is_bool) {
      StoreU(dt, buf, i, r.Next() & 1u);
    } else if (in.is_fp8) {
      StoreU(dt, buf, i, r.Next() & 0xffu);
    } else if (op == DLPG_BAND || op == DLPG_BOR || op == DLPG_BXOR) {
      StoreU(dt, buf, i, r.Next());
    } else if (op == DLPG_PROD) {
      StoreU(dt, buf, i, static_cast<uint64_t>(in.is_signed ? r.Range(-3, 3) : r.Range(0, 3)));
    } else if (in.bits == 8) {
      StoreU(dt, buf, i, static_cast<uint64_t>(in.is_signed ? r.Range(-100, 100) : r.Range(0, 200)));
    } else if (in.bits == 64) {
      int64_t big = int64_t(1) << 40;
      StoreU(dt, buf, i, static_cast<uint64_t>(in.is_signed ? r.Range(-big, big) : r.Range(0, 2 * big)));
    } else {
      StoreU(dt, buf, i, static_cast<uint64_t>(in.is_signed ? r.Range(-1000, 1000) : r.Range(0, 2000)));
    }
  }
}

// out[i] = reduction over contributions c of ins[c][i]; avg divides the exact sum by the
// number of contributions (in double for floats).
inline void Reduce(DT dt, dlpg_reduce_op_t op, const std::vector<const void *> &ins, void *out,
                   size_t n) {
  const DTInfo &in = Info(dt);
  const size_t k = ins.size();
  for (size_t i = 0; i < n; i++) {
    if (in.is_float) {
      double acc = LoadF(dt, ins[0], i);
      for (size_t c = 1; c < k; c++) {
        double v = LoadF(dt, ins[c], i);
        switch (op) {
          case DLPG_SUM: case DLPG_AVG: acc += v; break;
          case DLPG_PROD: acc *= v; break;
          case DLPG_MIN: acc = v < acc ? v : acc; break;
          case DLPG_MAX: acc = v > acc ? v : acc; break;
          default: break;
        }
      }
      if (op == DLPG_AVG) acc /= static_cast<double>(k);
      StoreF(dt, out, i, acc);
    } else if (in.is_bool) {
      uint64_t acc = LoadU(dt, ins[0], i) != 0;
      for (size_t c = 1; c < k; c++) {
        uint64_t v = LoadU(dt, ins[c], i) != 0;
        switch (op) {
          case DLPG_SUM: case DLPG_MAX: case DLPG_BOR: acc = acc | v; break;
          case DLPG_PROD: case DLPG_MIN: case DLPG_BAND: acc = acc & v; break;
          case DLPG_BXOR: acc = acc ^ v; break;
          default: break;
        }
      }
      StoreU(dt, out, i, acc);
    } else {
      uint64_t acc = LoadU(dt, ins[0], i);
      for (size_t c = 1; c < k; c++) {
        uint64_t v = LoadU(dt, ins[c], i);
        switch (op) {
          case DLPG_SUM: acc += v; break;
          case DLPG_PROD: acc *= v; break;
          case DLPG_MIN:
            if (in.is_signed ? static_cast<int64_t>(v) < static_cast<int64_t>(acc) : v < acc) acc = v;
            break;
          case DLPG_MAX:
            if (in.is_signed ? static_cast<int64_t>(v) > static_cast<int64_t>(acc) : v > acc) acc = v;
            break;
          case DLPG_BAND: acc &= v; break;
          case DLPG_BOR: acc |= v; break;
          case DLPG_BXOR: acc ^= v; break;
          default: break;
        }
      }
      StoreU(dt, out, i, acc);
    }
  }
}

// All ranks' inputs for one case, generated locally from the shared seed.
inline std::vector<std::vector<uint8_t>> AllInputs(DT dt, dlpg_reduce_op_t op, uint64_t seed,
                                                   int ws, size_t n) {
  std::vector<std::vector<uint8_t>> v(ws, std::vector<uint8_t>(n * ElemSize(dt) + 1));
  for (int r = 0; r < ws; r++) Generate(dt, op, seed, r, v[r].data(), n);
  return v;
}

// The reference reduction of n elements starting at element `first` of every rank's input
// (total elements per rank), as generated by AllInputs.
inline std::vector<uint8_t> ReducedReference(DT dt, dlpg_reduce_op_t op, uint64_t seed, int ws,
                                             size_t total, size_t first, size_t n) {
  auto all = AllInputs(dt, op, seed, ws, total);
  std::vector<const void *> ptrs;
  for (auto &v : all) ptrs.push_back(v.data() + first * ElemSize(dt));
  std::vector<uint8_t> want(n * ElemSize(dt) + 1);
  Reduce(dt, op, ptrs, want.data(), n);
  return want;
}

inline std::string ElemStr(DT dt, const void *buf, size_t i) {
  std::ostringstream s;
  if (Info(dt).is_float) s << LoadF(dt, buf, i);
  else if (Info(dt).is_signed && !Info(dt).is_fp8) s << static_cast<int64_t>(LoadU(dt, buf, i));
  else s << LoadU(dt, buf, i);
  return s.str();
}

// Compare n elements; exact (bitwise) except avg on floats, compared with a tolerance
// suited to the dtype. Returns "" when equal, else a message naming the first mismatches.
inline std::string Compare(DT dt, dlpg_reduce_op_t op, const void *got, const void *want,
                           size_t n) {
  const DTInfo &in = Info(dt);
  double rtol = 0;
  if (in.is_float && op == DLPG_AVG) {
    rtol = dt == DT::F16 ? 4e-3 : dt == DT::BF16 ? 1.6e-2 : dt == DT::F32 ? 1e-6 : 1e-13;
  }
  std::ostringstream msg;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    bool ok;
    if (rtol > 0) {
      double g = LoadF(dt, got, i), w = LoadF(dt, want, i);
      ok = std::fabs(g - w) <= rtol * (std::fabs(w) + 1.0);
    } else {
      ok = memcmp(static_cast<const char *>(got) + i * ElemSize(dt),
                  static_cast<const char *>(want) + i * ElemSize(dt), ElemSize(dt)) == 0;
    }
    if (!ok) {
      if (bad < 5)
        msg << " [" << i << "] got " << ElemStr(dt, got, i) << " want " << ElemStr(dt, want, i)
            << ";";
      bad++;
    }
  }
  if (!bad) return "";
  std::ostringstream s;
  s << bad << " of " << n << " " << in.name << " elements differ:" << msg.str();
  return s.str();
}

}  // namespace dlpgt
