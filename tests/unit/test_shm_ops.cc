// The shm engine's operations against independently computed references, on random data
// that differs by rank: every dtype and reduce op of the Gloo path's rules, sizes 0, 1, odd
// and several times the slot size, 2, 3, 4 and 8 ranks (8 on 2 cores: oversubscribed, so
// waiters must sleep rather than spin). Integers and bool must match exactly, min/max
// exactly, and floating sums/products/averages within a tolerance that allows a different
// reduction order and a rounding per pairwise step: |got - ref| <= rel * sum|terms| + abs,
// rel = 1e-5 (float32), 1e-12 (float64), 2^-10 * size (float16), 2^-7 * size (bfloat16).
// Allreduce results must also be bitwise identical on every rank (compared through the
// store).
#include "test_shm_util.h"

#include <cmath>
#include <cstring>

using namespace shmtest;

namespace {

float Bf16ToF(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint16_t FToBf16Exact(float f) {  // only for values bfloat16 holds exactly
  uint32_t u;
  memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

size_t Elem(dlpg__dtype_t dt) {
  switch (dt) {
    case DLPG__DT_INT8: case DLPG__DT_UINT8: case DLPG__DT_BOOL: return 1;
    case DLPG__DT_INT16: case DLPG__DT_UINT16: case DLPG__DT_FLOAT16: case DLPG__DT_BFLOAT16: return 2;
    case DLPG__DT_INT32: case DLPG__DT_UINT32: case DLPG__DT_FLOAT32: return 4;
    default: return 8;
  }
}

bool IsFloat(dlpg__dtype_t dt) {
  return dt == DLPG__DT_FLOAT16 || dt == DLPG__DT_BFLOAT16 || dt == DLPG__DT_FLOAT32 ||
         dt == DLPG__DT_FLOAT64;
}

// Rank `rank`'s input of count elements. Floats are small multiples of a power of two (exact
// in every float dtype); products stay near 1.
std::vector<uint8_t> Input(dlpg__dtype_t dt, dlpg_reduce_op_t op, uint64_t seed, int rank,
                           size_t count) {
  std::vector<uint8_t> raw = Bytes(seed, rank, count * 8 + 8), v(count * Elem(dt));
  for (size_t i = 0; i < count; i++) {
    uint64_t x;
    memcpy(&x, &raw[i * 8], 8);
    int k = static_cast<int>(x % 255) - 127;  // -127..127
    double f = op == DLPG_PROD ? 1.0 + k / 512.0 : k / 64.0;
    switch (dt) {
      case DLPG__DT_FLOAT32: { float y = static_cast<float>(f); memcpy(&v[i * 4], &y, 4); break; }
      case DLPG__DT_FLOAT64: memcpy(&v[i * 8], &f, 8); break;
      case DLPG__DT_FLOAT16: {
        _Float16 h = static_cast<_Float16>(static_cast<float>(op == DLPG_PROD ? 1.0 + k / 256.0 : f));
        memcpy(&v[i * 2], &h, 2);
        break;
      }
      case DLPG__DT_BFLOAT16: {
        uint16_t b = FToBf16Exact(static_cast<float>(op == DLPG_PROD ? 1.0 + (k / 4) / 32.0 : k / 16.0));
        memcpy(&v[i * 2], &b, 2);
        break;
      }
      case DLPG__DT_BOOL: v[i] = static_cast<uint8_t>(x % 4 == 0 ? 0 : x % 4 == 3 ? 2 : 1); break;
      default: memcpy(&v[i * Elem(dt)], &x, Elem(dt));  // random bits, every width
    }
  }
  return v;
}

double Load(dlpg__dtype_t dt, const uint8_t *p) {
  switch (dt) {
    case DLPG__DT_FLOAT32: { float f; memcpy(&f, p, 4); return f; }
    case DLPG__DT_FLOAT64: { double f; memcpy(&f, p, 8); return f; }
    case DLPG__DT_FLOAT16: { _Float16 h; memcpy(&h, p, 2); return static_cast<float>(h); }
    case DLPG__DT_BFLOAT16: { uint16_t b; memcpy(&b, p, 2); return Bf16ToF(b); }
    default: return 0;
  }
}

template <class T>
T IntOp(dlpg_reduce_op_t op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case DLPG_SUM: return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) + static_cast<U>(b)));
    case DLPG_PROD: return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<uint64_t>(static_cast<U>(b))));
    case DLPG_MIN: return std::min(a, b);
    case DLPG_MAX: return std::max(a, b);
    case DLPG_BAND: return static_cast<T>(a & b);
    case DLPG_BOR: return static_cast<T>(a | b);
    default: return static_cast<T>(a ^ b);
  }
}

template <class T>
std::string CheckInt(dlpg_reduce_op_t op, const std::vector<std::vector<uint8_t>> &in,
                     const uint8_t *got, size_t count) {
  for (size_t i = 0; i < count; i++) {
    T r;
    memcpy(&r, &in[0][i * sizeof(T)], sizeof(T));
    for (size_t q = 1; q < in.size(); q++) {
      T x;
      memcpy(&x, &in[q][i * sizeof(T)], sizeof(T));
      r = IntOp(op, r, x);
    }
    T g;
    memcpy(&g, got + i * sizeof(T), sizeof(T));
    if (g != r) return "element " + std::to_string(i) + ": got " + std::to_string(g) + " want " + std::to_string(r);
  }
  return "";
}

// The reference of element-wise op over the ranks' inputs; "" when got matches.
std::string Check(dlpg__dtype_t dt, dlpg_reduce_op_t op, const std::vector<std::vector<uint8_t>> &in,
                  const uint8_t *got, size_t count) {
  int n = static_cast<int>(in.size());
  switch (dt) {
    case DLPG__DT_INT8: return CheckInt<int8_t>(op, in, got, count);
    case DLPG__DT_INT16: return CheckInt<int16_t>(op, in, got, count);
    case DLPG__DT_INT32: return CheckInt<int32_t>(op, in, got, count);
    case DLPG__DT_INT64: return CheckInt<int64_t>(op, in, got, count);
    case DLPG__DT_UINT8: return CheckInt<uint8_t>(op, in, got, count);
    case DLPG__DT_UINT16: return CheckInt<uint16_t>(op, in, got, count);
    case DLPG__DT_UINT32: return CheckInt<uint32_t>(op, in, got, count);
    case DLPG__DT_UINT64: return CheckInt<uint64_t>(op, in, got, count);
    case DLPG__DT_BOOL:
      for (size_t i = 0; i < count; i++) {
        bool r = in[0][i] != 0;
        for (int q = 1; q < n; q++) {
          bool x = in[q][i] != 0;
          if (op == DLPG_SUM || op == DLPG_MAX || op == DLPG_BOR) r = r || x;
          else if (op == DLPG_BXOR) r = r != x;
          else r = r && x;
        }
        if (got[i] != (r ? 1 : 0)) return "bool element " + std::to_string(i) + " is " + std::to_string(got[i]);
      }
      return "";
    default: break;
  }
  double rel = dt == DLPG__DT_FLOAT32 ? 1e-5 : dt == DLPG__DT_FLOAT64 ? 1e-12
             : dt == DLPG__DT_FLOAT16 ? n / 1024.0 : n / 128.0;
  size_t E = Elem(dt);
  for (size_t i = 0; i < count; i++) {
    double r = Load(dt, &in[0][i * E]), mag = std::fabs(r);
    for (int q = 1; q < n; q++) {
      double x = Load(dt, &in[q][i * E]);
      if (op == DLPG_SUM || op == DLPG_AVG) r += x;
      else if (op == DLPG_PROD) r *= x;
      else if (op == DLPG_MIN) r = std::min(r, x);
      else r = std::max(r, x);
      mag = op == DLPG_PROD ? std::fabs(r) : mag + std::fabs(x);
    }
    if (op == DLPG_AVG) { r /= n; mag /= n; }
    double g = Load(dt, got + i * E);
    bool exact = op == DLPG_MIN || op == DLPG_MAX;
    if (exact ? g != r : !(std::fabs(g - r) <= rel * mag + 1e-30))
      return "float element " + std::to_string(i) + ": got " + std::to_string(g) + " want " + std::to_string(r);
  }
  return "";
}

const dlpg__dtype_t kDtypes[] = {DLPG__DT_INT8, DLPG__DT_INT16, DLPG__DT_INT32, DLPG__DT_INT64,
                                 DLPG__DT_UINT8, DLPG__DT_UINT16, DLPG__DT_UINT32, DLPG__DT_UINT64,
                                 DLPG__DT_FLOAT16, DLPG__DT_BFLOAT16, DLPG__DT_FLOAT32,
                                 DLPG__DT_FLOAT64, DLPG__DT_BOOL};
const dlpg_reduce_op_t kOps[] = {DLPG_SUM, DLPG_PROD, DLPG_MIN, DLPG_MAX, DLPG_AVG,
                                 DLPG_BAND, DLPG_BOR, DLPG_BXOR};

bool Supported(dlpg__dtype_t dt, dlpg_reduce_op_t op) {
  if (op == DLPG_AVG) return IsFloat(dt);
  if (op == DLPG_BAND || op == DLPG_BOR || op == DLPG_BXOR) return !IsFloat(dt);
  return true;
}

TEST(ShmRules, SupportMatrixIsGloos) {
  for (dlpg__dtype_t dt : kDtypes)
    for (dlpg_reduce_op_t op : kOps)
      EXPECT_EQ(dlpg__shm_check_reduce("t", dt, op) == DLPG_OK, Supported(dt, op))
          << dlpg__dtype_name(dt) << " " << dlpg__reduce_op_name(op);
  EXPECT_EQ(dlpg__shm_check_reduce("dlpg_allreduce", DLPG__DT_INT32, DLPG_AVG), DLPG_ERR_UNSUPPORTED);
  EXPECT_NE(strstr(dlpg_last_error(), "avg needs a floating or complex dtype, got int32"), nullptr) << dlpg_last_error();
  EXPECT_EQ(dlpg__shm_check_reduce("f", DLPG__DT_FLOAT8_E4M3FN, DLPG_SUM), DLPG_ERR_UNSUPPORTED);
}

// Every supported (dtype, op) pair through allreduce, reduce and reduce_scatter on 3 ranks
// with a 4 KiB slot: sizes 0, 1, odd, and several slots (both allreduce paths).
TEST(ShmOps, EveryDtypeAndOp) {
  Opts o;
  o.slot = 4096;
  o.name = "every";
  auto codes = RunRanks(3, o, [](Rank &k) {
    const size_t counts[] = {0, 1, 37, 3 * 4096 / 1 + 5};
    uint64_t seed = 1;
    for (dlpg__dtype_t dt : kDtypes)
      for (dlpg_reduce_op_t op : kOps) {
        if (!Supported(dt, op)) continue;
        for (size_t count : counts) {
          seed++;
          size_t E = Elem(dt), cnt = count > 100 ? count / E : count;
          std::vector<std::vector<uint8_t>> in, in_rs;
          for (int q = 0; q < k.size; q++) in.push_back(Input(dt, op, seed, q, cnt));
          std::vector<uint8_t> out(cnt * E + 1, 0xee);
          dlpg_status_t s = dlpg__shm_allreduce(k.sh, in[k.rank].data(), out.data(), cnt, dt, op);
          ASSERT_EQ(s, DLPG_OK) << dlpg_last_error();
          std::string bad = Check(dt, op, in, out.data(), cnt);
          ASSERT_EQ(bad, "") << "allreduce " << dlpg__dtype_name(dt) << " " << dlpg__reduce_op_name(op) << " count " << cnt;
          EXPECT_EQ(out[cnt * E], 0xee) << "wrote past the end";
          out.resize(cnt * E);
          ExpectSameBits(k, "bits/" + std::to_string(seed), out);
          // In place, rooted at the last rank.
          std::vector<uint8_t> io = in[k.rank];
          int root = k.size - 1;
          ASSERT_EQ(dlpg__shm_reduce(k.sh, io.data(), io.data(), cnt, dt, op, root), DLPG_OK) << dlpg_last_error();
          if (k.rank == root) ASSERT_EQ(Check(dt, op, in, io.data(), cnt), "") << "reduce";
          else ASSERT_EQ(io, in[k.rank]) << "reduce wrote a non-root's buffer";
          // reduce_scatter: each rank's input is size blocks of cnt.
          for (int q = 0; q < k.size; q++) in_rs.push_back(Input(dt, op, seed + 7777, q, cnt * k.size));
          std::vector<std::vector<uint8_t>> block;
          for (int q = 0; q < k.size; q++)
            block.emplace_back(in_rs[q].begin() + k.rank * cnt * E, in_rs[q].begin() + (k.rank + 1) * cnt * E);
          std::vector<uint8_t> rs(cnt * E);
          ASSERT_EQ(dlpg__shm_reduce_scatter(k.sh, in_rs[k.rank].data(), rs.data(), cnt, dt, op), DLPG_OK) << dlpg_last_error();
          ASSERT_EQ(Check(dt, op, block, rs.data(), cnt), "") << "reduce_scatter " << dlpg__dtype_name(dt);
        }
      }
  });
  ExpectAllPass(codes);
}

// The byte-moving collectives on `size` ranks, slot 8 KiB.
void Moves(int size, double deadline) {
  Opts o;
  o.slot = 8192;
  o.deadline = deadline;
  o.name = "moves" + std::to_string(size);
  auto codes = RunRanks(size, o, [](Rank &k) {
    const size_t sizes[] = {0, 1, 1001, 5 * 8192 + 3};
    uint64_t seed = 100;
    for (size_t nb : sizes) {
      seed++;
      for (int root = 0; root < k.size; root += (k.size > 3 ? k.size - 1 : 1)) {
        std::vector<uint8_t> want = Bytes(seed + root, root, nb);
        std::vector<uint8_t> buf = k.rank == root ? want : std::vector<uint8_t>(nb, 0);
        ASSERT_EQ(dlpg__shm_broadcast(k.sh, buf.data(), nb, root), DLPG_OK) << dlpg_last_error();
        ASSERT_EQ(buf, want) << "broadcast root " << root << " bytes " << nb;
      }
      std::vector<uint8_t> all = AllRanksBytes(seed, k.size, nb), mine = Bytes(seed, k.rank, nb);
      std::vector<uint8_t> out(nb * k.size, 0);
      ASSERT_EQ(dlpg__shm_allgather(k.sh, mine.data(), out.data(), nb), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(out, all) << "allgather " << nb;
      // alltoall: block j of rank q's input is Bytes(seed*31 + j, q).
      AlltoallCase a2a(seed * 31, k.rank, k.size, nb);
      std::vector<uint8_t> a2a_out(nb * k.size, 0);
      ASSERT_EQ(dlpg__shm_alltoall(k.sh, a2a.in.data(), a2a_out.data(), nb), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(a2a_out, a2a.want) << "alltoall " << nb;
      ASSERT_EQ(dlpg__shm_alltoall(k.sh, a2a.in.data(), a2a.in.data(), nb), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(a2a.in, a2a.want) << "alltoall in place " << nb;
      ASSERT_EQ(dlpg__shm_barrier(k.sh), DLPG_OK) << dlpg_last_error();
    }
    // float32 sum allreduce across both paths, checked bitwise across ranks.
    for (size_t cnt : {size_t(3), size_t(40000)}) {
      std::vector<std::vector<uint8_t>> in;
      for (int q = 0; q < k.size; q++) in.push_back(Input(DLPG__DT_FLOAT32, DLPG_SUM, cnt, q, cnt));
      std::vector<uint8_t> out(cnt * 4);
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, in[k.rank].data(), out.data(), cnt, DLPG__DT_FLOAT32, DLPG_SUM), DLPG_OK);
      ASSERT_EQ(Check(DLPG__DT_FLOAT32, DLPG_SUM, in, out.data(), cnt), "");
      ExpectSameBits(k, "mv/" + std::to_string(cnt), out);
    }
  });
  ExpectAllPass(codes);
}

TEST(ShmOps, Moves2) { Moves(2, 40); }
TEST(ShmOps, Moves3) { Moves(3, 40); }
TEST(ShmOps, Moves4) { Moves(4, 40); }
TEST(ShmOps, Moves8Oversubscribed) { Moves(8, 60); }

// One 16 MiB allreduce at the default slot size (pipelined through 1 MiB slots).
TEST(ShmOps, LargeAllreduceDefaultSlot) {
  Opts o;
  o.name = "large";
  auto codes = RunRanks(2, o, [](Rank &k) {
    size_t cnt = 4u << 20;
    std::vector<std::vector<uint8_t>> in;
    for (int q = 0; q < k.size; q++) in.push_back(Input(DLPG__DT_FLOAT32, DLPG_SUM, 9, q, cnt));
    std::vector<uint8_t> out(cnt * 4);
    ASSERT_EQ(dlpg__shm_allreduce(k.sh, in[k.rank].data(), out.data(), cnt, DLPG__DT_FLOAT32, DLPG_SUM), DLPG_OK)
        << dlpg_last_error();
    ASSERT_EQ(Check(DLPG__DT_FLOAT32, DLPG_SUM, in, out.data(), cnt), "");
    ExpectSameBits(k, "large", out);
  });
  ExpectAllPass(codes);
}

// The copies into the output with streaming stores (forced from 1 byte on): outputs that
// start off a 16-byte boundary and end inside one, out of place (streamed) and in place
// (not), allreduce and reduce (no output off its root, as the backend calls it), against the
// reference and bitwise across ranks (broadcasts between them, which copy as usual).
TEST(ShmOps, StreamedOutputs) {
  Opts o;
  o.name = "stream";
  o.slot = 8192;
  o.stream = 1;
  auto codes = RunRanks(3, o, [](Rank &k) {
    for (size_t cnt : {size_t(40001), size_t(70000)}) {
      std::vector<std::vector<uint8_t>> in;
      for (int q = 0; q < k.size; q++) in.push_back(Input(DLPG__DT_FLOAT32, DLPG_SUM, cnt + 5, q, cnt));
      for (size_t skew : {size_t(0), size_t(4), size_t(12)}) {
        std::vector<uint8_t> buf(cnt * 4 + 32, 0xee);
        uint8_t *out = buf.data() + skew;
        ASSERT_EQ(dlpg__shm_allreduce(k.sh, in[k.rank].data(), out, cnt, DLPG__DT_FLOAT32, DLPG_SUM), DLPG_OK)
            << dlpg_last_error();
        ASSERT_EQ(Check(DLPG__DT_FLOAT32, DLPG_SUM, in, out, cnt), "") << "skew " << skew;
        for (size_t i = 0; i < skew; i++) ASSERT_EQ(buf[i], 0xee) << "byte before the output";
        for (size_t i = skew + cnt * 4; i < buf.size(); i++) ASSERT_EQ(buf[i], 0xee) << "byte after the output";
        ExpectSameBits(k, "st/" + std::to_string(cnt) + "/" + std::to_string(skew),
                       std::vector<uint8_t>(out, out + cnt * 4));
        std::vector<uint8_t> red(cnt * 4 + 16, 0);
        ASSERT_EQ(dlpg__shm_reduce(k.sh, in[k.rank].data(), k.rank == 1 ? red.data() + skew : nullptr, cnt,
                                   DLPG__DT_FLOAT32, DLPG_SUM, 1),
                  DLPG_OK) << dlpg_last_error();
        if (k.rank == 1) {
          ASSERT_EQ(memcmp(red.data() + skew, out, cnt * 4), 0) << "reduce to rank 1";
        }
        std::vector<uint8_t> bc(cnt * 4 + 16, 0), want = Bytes(cnt + skew, 2, cnt * 4);
        if (k.rank == 2) memcpy(bc.data() + skew, want.data(), want.size());
        ASSERT_EQ(dlpg__shm_broadcast(k.sh, bc.data() + skew, cnt * 4, 2), DLPG_OK) << dlpg_last_error();
        ASSERT_EQ(memcmp(bc.data() + skew, want.data(), want.size()), 0) << "broadcast skew " << skew;
      }
      std::vector<uint8_t> inplace = in[k.rank];
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, inplace.data(), inplace.data(), cnt, DLPG__DT_FLOAT32, DLPG_SUM), DLPG_OK)
          << dlpg_last_error();
      ASSERT_EQ(Check(DLPG__DT_FLOAT32, DLPG_SUM, in, inplace.data(), cnt), "") << "in place";
    }
  });
  ExpectAllPass(codes);
}

}  // namespace
