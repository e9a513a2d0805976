/* Names, DLPack types, and the data of a check: every contribution c (rank * gpus + device)
 * fills element i with a small integer that depends on c and i, so sums, products, minima
 * and maxima are exact in every dtype (int8 and float16 included) and a reference can be
 * computed on the fly, element by element, without holding the other ranks' data. */
#include <math.h>
#include <string.h>
#include "dlpg_bench.h"

static const char *const op_names[BENCH_OP_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "sendrecv",
    "gather", "scatter", "allgatherv", "alltoallv"};

static const struct {
  const char *name;
  size_t size;
  uint8_t code, bits;
} dtypes[BENCH_DTYPE_COUNT] = {
    [BENCH_F32] = {"float32", 4, kDLFloat, 32}, [BENCH_F16] = {"float16", 2, kDLFloat, 16},
    [BENCH_BF16] = {"bfloat16", 2, kDLBfloat, 16}, [BENCH_I32] = {"int32", 4, kDLInt, 32},
    [BENCH_I64] = {"int64", 8, kDLInt, 64}, [BENCH_F64] = {"float64", 8, kDLFloat, 64},
    [BENCH_I8] = {"int8", 1, kDLInt, 8}, [BENCH_U8] = {"uint8", 1, kDLUInt, 8},
    [BENCH_U32] = {"uint32", 4, kDLUInt, 32}, [BENCH_U64] = {"uint64", 8, kDLUInt, 64},
};

/* nccl-tests' names of the same types (its -d and its table's "type" column). */
static const char *const nccl_names[BENCH_DTYPE_COUNT] = {
    [BENCH_F32] = "float", [BENCH_F16] = "half", [BENCH_BF16] = "bfloat16",
    [BENCH_I32] = "int32", [BENCH_I64] = "int64", [BENCH_F64] = "double", [BENCH_I8] = "int8",
    [BENCH_U8] = "uint8", [BENCH_U32] = "uint32", [BENCH_U64] = "uint64",
};

static const char *const redop_names[] = {"sum", "prod", "min", "max", "avg"};

size_t bench_dtype_size(bench_dtype_t t) { return dtypes[t].size; }
const char *bench_dtype_name(bench_dtype_t t) { return dtypes[t].name; }
const char *bench_dtype_nccl_name(bench_dtype_t t) { return nccl_names[t]; }
const char *bench_op_name(bench_op_t op) { return op_names[op]; }

int bench_op_has_redop(bench_op_t op) {
  return op == BENCH_ALLREDUCE || op == BENCH_REDUCE || op == BENCH_REDUCE_SCATTER;
}
int bench_op_has_root(bench_op_t op) {
  return op == BENCH_BROADCAST || op == BENCH_REDUCE || op == BENCH_GATHER || op == BENCH_SCATTER;
}
int bench_op_single(bench_op_t op) {
  return op == BENCH_ALLTOALL || op == BENCH_SENDRECV || op == BENCH_GATHER ||
         op == BENCH_SCATTER || op == BENCH_ALLGATHERV || op == BENCH_ALLTOALLV;
}

int bench_weight(const bench_opts_t *o, int world, int r) {
  int heavy = world / 2 > 0 ? world / 2 : 1;
  return r < heavy ? o->skew : 1;
}

size_t bench_weight_sum(const bench_opts_t *o, int world) {
  size_t w = 0;
  for (int r = 0; r < world; r++) w += (size_t)bench_weight(o, world, r);
  return w;
}
int bench_op_has_inplace(bench_op_t op) {
  return op == BENCH_ALLREDUCE || op == BENCH_BROADCAST || op == BENCH_REDUCE;
}

const char *bench_redop_name(dlpg_reduce_op_t r) {
  return (int)r >= 0 && (int)r < 5 ? redop_names[r] : "?";
}

DLDataType bench_dtype_dl(bench_dtype_t t) {
  DLDataType d;
  d.code = dtypes[t].code;
  d.bits = dtypes[t].bits;
  d.lanes = 1;
  return d;
}

int bench_dtype_parse(const char *s, bench_dtype_t *t) {
  for (int i = 0; i < BENCH_DTYPE_COUNT; i++)
    if (strcmp(s, dtypes[i].name) == 0) { *t = (bench_dtype_t)i; return 0; }
  for (int i = 0; i < BENCH_DTYPE_COUNT; i++)
    if (strcmp(s, nccl_names[i]) == 0) { *t = (bench_dtype_t)i; return 0; }
  /* Other common spellings. */
  if (!strcmp(s, "f32")) { *t = BENCH_F32; return 0; }
  if (!strcmp(s, "f16")) { *t = BENCH_F16; return 0; }
  if (!strcmp(s, "bf16")) { *t = BENCH_BF16; return 0; }
  if (!strcmp(s, "char")) { *t = BENCH_I8; return 0; }
  if (!strcmp(s, "int")) { *t = BENCH_I32; return 0; }
  return -1;
}

int bench_op_parse(const char *s, bench_op_t *op) {
  for (int i = 0; i < BENCH_OP_COUNT; i++)
    if (strcmp(s, op_names[i]) == 0) { *op = (bench_op_t)i; return 0; }
  if (!strcmp(s, "all_reduce")) { *op = BENCH_ALLREDUCE; return 0; }
  if (!strcmp(s, "all_gather")) { *op = BENCH_ALLGATHER; return 0; }
  if (!strcmp(s, "reducescatter")) { *op = BENCH_REDUCE_SCATTER; return 0; }
  if (!strcmp(s, "all_to_all")) { *op = BENCH_ALLTOALL; return 0; }
  if (!strcmp(s, "all_gatherv")) { *op = BENCH_ALLGATHERV; return 0; }
  if (!strcmp(s, "all_to_allv")) { *op = BENCH_ALLTOALLV; return 0; }
  return -1;
}

int bench_redop_parse(const char *s, dlpg_reduce_op_t *r) {
  for (int i = 0; i < 5; i++)
    if (strcmp(s, redop_names[i]) == 0) { *r = (dlpg_reduce_op_t)i; return 0; }
  return -1;
}

/* The value of element i of contribution c: 1..4 ("random-ish" in i and c), or 1..2 for
 * products, with a 2 rarely enough that 16 contributions stay inside int8 and float16. */
static inline int value(dlpg_reduce_op_t r, int c, size_t i) {
  if (r == DLPG_PROD) return 1 + (((i + 3u * (unsigned)c) % 11u) == 0);
  return 1 + (int)((i * 7u + (unsigned)c * 13u + (i >> 4)) % 4u);
}

/* float <-> IEEE half and bfloat16 bit patterns (round to nearest; bench values are small
 * integers, which both formats hold exactly). */
static uint16_t f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t m = x & 0x7fffffu;
  if (e <= 0) return (uint16_t)sign;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13);
  if ((m >> 12) & 1u) h++;
  return (uint16_t)h;
}

static float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
  if (e == 0) {
    float f = ldexpf((float)m, -24);
    return sign ? -f : f;
  }
  if (e == 31) x = sign | 0x7f800000u | (m << 13);
  else x = sign | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f2bf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf2f(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

void bench_fill(bench_dtype_t t, dlpg_reduce_op_t r, int c, void *p, size_t count) {
  for (size_t i = 0; i < count; i++) {
    int v = value(r, c, i);
    switch (t) {
      case BENCH_F32: ((float *)p)[i] = (float)v; break;
      case BENCH_F64: ((double *)p)[i] = v; break;
      case BENCH_F16: ((uint16_t *)p)[i] = f2h((float)v); break;
      case BENCH_BF16: ((uint16_t *)p)[i] = f2bf((float)v); break;
      case BENCH_I32: ((int32_t *)p)[i] = v; break;
      case BENCH_I64: ((int64_t *)p)[i] = v; break;
      case BENCH_I8: ((int8_t *)p)[i] = (int8_t)v; break;
      case BENCH_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
      case BENCH_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
      case BENCH_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
      default: break;
    }
  }
}

static double load(bench_dtype_t t, const void *p, size_t i) {
  switch (t) {
    case BENCH_F32: return ((const float *)p)[i];
    case BENCH_F64: return ((const double *)p)[i];
    case BENCH_F16: return h2f(((const uint16_t *)p)[i]);
    case BENCH_BF16: return bf2f(((const uint16_t *)p)[i]);
    case BENCH_I32: return ((const int32_t *)p)[i];
    case BENCH_I64: return (double)((const int64_t *)p)[i];
    case BENCH_I8: return ((const int8_t *)p)[i];
    case BENCH_U8: return ((const uint8_t *)p)[i];
    case BENCH_U32: return ((const uint32_t *)p)[i];
    case BENCH_U64: return (double)((const uint64_t *)p)[i];
    default: return NAN;
  }
}

/* The sum over contributions 0..n-1 of value(): 13c = c (mod 4), so contribution c holds
 * 1 + (base + c) % 4 and every 4 consecutive ones add 1+2+3+4 = 10; a check of a large
 * allreduce at 16 ranks then costs one step per element, not 16. */
static double summed(int n, size_t i) {
  unsigned base = (unsigned)((i * 7u + (i >> 4)) % 4u);
  double acc = 10.0 * (n / 4);
  for (int c = 0; c < n % 4; c++) acc += 1 + (base + (unsigned)c) % 4u;
  return acc;
}

/* The reduction over all n contributions of element i. */
static double reduced(dlpg_reduce_op_t r, int n, size_t i) {
  if (r == DLPG_SUM) return summed(n, i);
  if (r == DLPG_AVG) return summed(n, i) / n;
  double acc = value(r, 0, i);
  for (int c = 1; c < n; c++) {
    double v = value(r, c, i);
    switch (r) {
      case DLPG_PROD: acc *= v; break;
      case DLPG_MIN: acc = v < acc ? v : acc; break;
      case DLPG_MAX: acc = v > acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  return r == DLPG_AVG ? acc / n : acc;
}

/* Tolerance: exact for sums of small integers, except averages (NCCL may premultiply by
 * 1/n; integer averages truncate) and the 8-bit-mantissa bfloat16. */
static int matches(bench_dtype_t t, dlpg_reduce_op_t r, double got, double want) {
  double tol = 0;
  int is_int = t == BENCH_I32 || t == BENCH_I64 || t == BENCH_I8 || t == BENCH_U8 ||
               t == BENCH_U32 || t == BENCH_U64;
  if (r == DLPG_AVG) tol = is_int ? 1.0 : 1e-5 * fabs(want);
  if (t == BENCH_F16) tol += 1e-3 * fabs(want);
  if (t == BENCH_BF16) tol += 8e-3 * fabs(want);
  return fabs(got - want) <= tol;
}

long long bench_check(const bench_ctx_t *x, bench_op_t op, int me, const void *p, size_t per) {
  const bench_opts_t *o = x->o;
  bench_dtype_t t = o->dtype;
  dlpg_reduce_op_t r = o->redop;
  int n = x->nparts;
  long long wrong = 0;
  size_t total = (op == BENCH_ALLGATHER || op == BENCH_ALLTOALL) ? per * (size_t)n : per;
  /* The rooted and uneven ones: one tensor per rank (me is the rank), blocks by weight. */
  int W = x->world, wme = bench_weight(o, W, me);
  if (op == BENCH_GATHER) total = me == o->root ? per * (size_t)W : 0;
  if (op == BENCH_ALLGATHERV) total = per * bench_weight_sum(o, W);
  if (op == BENCH_ALLTOALLV) total = per * (size_t)wme * (size_t)W;
  /* allgatherv: the block being walked (rank blk, from element start). */
  int blk = 0;
  size_t start = 0;
  /* alltoallv: where each sender's block for me starts in its input (blocks for the ranks
   * before me come first, packed). */
  size_t before = 0;
  for (int j = 0; op == BENCH_ALLTOALLV && j < me; j++) before += per * (size_t)bench_weight(o, W, j);
  for (size_t k = 0; k < total; k++) {
    double want;
    switch (op) {
      case BENCH_GATHER: want = value(r, (int)(k / per), k % per); break;
      case BENCH_SCATTER: want = value(r, o->root, (size_t)me * per + k); break;
      case BENCH_ALLGATHERV:
        while (k >= start + per * (size_t)bench_weight(o, W, blk))
          start += per * (size_t)bench_weight(o, W, blk++);
        want = value(r, blk, k - start);
        break;
      case BENCH_ALLTOALLV: {
        size_t b = per * (size_t)wme; /* from rank k / b */
        want = value(r, (int)(k / b), before + k % b);
        break;
      }
      case BENCH_ALLREDUCE:
      case BENCH_REDUCE: want = reduced(r, n, k); break;
      case BENCH_BROADCAST: want = value(r, o->root * o->gpus, k); break;
      case BENCH_ALLGATHER: want = value(r, (int)(k / per), k % per); break;
      case BENCH_REDUCE_SCATTER: want = reduced(r, n, (size_t)me * per + k); break;
      case BENCH_ALLTOALL: want = value(r, (int)(k / per), (size_t)me * per + k % per); break;
      case BENCH_SENDRECV: want = value(r, (x->rank - 1 + x->world) % x->world, k); break;
      default: want = NAN; break;
    }
    if (!matches(t, r, load(t, p, k), want)) wrong++;
  }
  return wrong;
}
