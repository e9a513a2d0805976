// Reduce descriptors and complex tensors against a reference computed here, in double, from
// the same per-rank random data: DLPG_PREMUL_SUM on every reducing collective (float32,
// float64, complex64, complex128; the factor applied to each rank's input before the sum,
// as torch and NCCL do), complex sum and avg, complex tensors moved as bytes, and the
// refusals with their rules (complex with max/min/prod/bitwise, premul_sum on an integer or
// through a plain function, a bad descriptor). Runs on both CPU backends (collectives.cmake).
#include <cmath>
#include <complex>
#include <sstream>

#include "harness.h"

using namespace dlpgt;

namespace {

// A dtype of this file: a real or complex float of parts of `part` bytes.
struct Kind {
  const char *name;
  uint8_t code, bits;
  bool complex;
  bool f32;  // parts are float (else double)
};
const Kind kF32{"float32", kDLFloat, 32, false, true};
const Kind kF64{"float64", kDLFloat, 64, false, false};
const Kind kC64{"complex64", kDLComplex, 64, true, true};
const Kind kC128{"complex128", kDLComplex, 128, true, false};

size_t Parts(const Kind &k, size_t n) { return k.complex ? 2 * n : n; }

// A tensor of n elements of k, its parts as doubles kept beside it.
struct Buf {
  Kind k;
  size_t n;
  std::vector<uint8_t> mem;
  int64_t shape[1];
  DLTensor t{};
  Buf(const Kind &kind, size_t numel) : k(kind), n(numel) {
    mem.assign(Parts(k, n) * (k.f32 ? 4 : 8) + 8, 0);
    shape[0] = static_cast<int64_t>(n);
    t.data = mem.data();
    t.device = {kDLCPU, 0};
    t.ndim = 1;
    t.dtype = {k.code, k.bits, 1};
    t.shape = shape;
  }
  DLTensor *dl() { return &t; }
  double Get(size_t i) const {
    if (k.f32) {
      float f;
      memcpy(&f, mem.data() + 4 * i, 4);
      return f;
    }
    double d;
    memcpy(&d, mem.data() + 8 * i, 8);
    return d;
  }
  void Set(size_t i, double v) {
    if (k.f32) {
      float f = static_cast<float>(v);
      memcpy(mem.data() + 4 * i, &f, 4);
    } else {
      memcpy(mem.data() + 8 * i, &v, 8);
    }
  }
};

// Rank r's value of part i: random in [-4, 4), rounded to the dtype.
double Value(const Kind &k, uint64_t seed, int r, size_t i) {
  uint64_t h = Mix(Mix(seed, static_cast<uint64_t>(r) + 1), i);
  double v = static_cast<double>(h >> 11) * 0x1.0p-53 * 8 - 4;
  return k.f32 ? static_cast<double>(static_cast<float>(v)) : v;
}
double Scalar(int r) { return 0.25 + 0.5 * r; }  // a different factor per rank

void Fill(Buf &b, uint64_t seed, int r, size_t first_part = 0) {
  for (size_t i = 0; i < Parts(b.k, b.n); i++) b.Set(i, Value(b.k, seed, r, first_part + i));
}

// The reduction of part i over every rank: sum, avg, or premul_sum (each rank's value
// times its factor, in the dtype as the library applies it, then summed).
double Want(const Kind &k, dlpg_reduce_op_t op, uint64_t seed, int size, size_t i) {
  double acc = 0;
  for (int r = 0; r < size; r++) {
    double v = Value(k, seed, r, i);
    if (op == DLPG_PREMUL_SUM)
      v = k.f32 ? static_cast<double>(static_cast<float>(v) * static_cast<float>(Scalar(r)))
                : v * Scalar(r);
    acc += v;
  }
  return op == DLPG_AVG ? acc / size : acc;
}

std::string Check(const Buf &got, dlpg_reduce_op_t op, uint64_t seed, int size, size_t first) {
  const double tol = got.k.f32 ? 1e-4 : 1e-11;
  for (size_t i = 0; i < Parts(got.k, got.n); i++) {
    double w = Want(got.k, op, seed, size, first + i), g = got.Get(i);
    if (!(std::fabs(g - w) <= tol * (1 + std::fabs(w)))) {
      std::ostringstream s;
      s << "part " << i << " (element " << i / (got.k.complex ? 2 : 1) << (got.k.complex ? (i % 2 ? " imag" : " real") : "")
        << "): got " << g << ", want " << w;
      return s.str();
    }
  }
  return "";
}

dlpg_reduce_desc_t Desc(dlpg_reduce_op_t op, double scalar) {
  dlpg_reduce_desc_t d{};
  d.struct_size = sizeof d;
  d.op = op;
  d.scalar = scalar;
  return d;
}

class ReduceEx : public ::testing::TestWithParam<RankParam> {};

const Kind *const kKinds[] = {&kF32, &kF64, &kC64, &kC128};

TEST_P(ReduceEx, AllreduceAndReduce) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    for (const Kind *k : kKinds)
      for (dlpg_reduce_op_t op : {DLPG_SUM, DLPG_AVG, DLPG_PREMUL_SUM})
        for (size_t n : {size_t{0}, size_t{1}, size_t{1031}, size_t{20000}})
          for (bool inplace : {true, false})
            for (int root = -1; root < c.size; root++) {  // -1: allreduce
              if (!k->complex && op != DLPG_PREMUL_SUM) continue;  // the real ones: elsewhere
              uint64_t seed = Mix(c.seed, ci++);
              std::ostringstream what;
              what << (root < 0 ? "dlpg_allreduce_ex" : "dlpg_reduce_ex") << " " << k->name
                   << " op=" << OpName(op) << " n=" << n << (inplace ? " in-place" : "")
                   << " root=" << root << " rank=" << c.rank;
              Buf in(*k, n), out(*k, n);
              Fill(in, seed, c.rank);
              std::vector<uint8_t> saved = in.mem;
              DLTensor *ip = in.dl(), *opp = out.dl();
              dlpg_reduce_desc_t d = Desc(op, Scalar(c.rank));
              dlpg_status_t s =
                  root < 0 ? c.api->allreduce_ex(c.group, &ip, inplace ? nullptr : &opp, 1, &d,
                                                 nullptr, nullptr)
                           : c.api->reduce_ex(c.group, &ip, inplace ? nullptr : &opp, 1, &d, root,
                                              nullptr, nullptr);
              ASSERT_EQ(s, DLPG_OK) << what.str() << ": " << c.api->last_error();
              if (root < 0 || root == c.rank) {
                EXPECT_EQ("", Check(inplace ? in : out, op, seed, c.size, 0)) << what.str();
              }
              if (!inplace) {
                EXPECT_TRUE(saved == in.mem) << what.str() << ": input modified";
              }
            }
  });
}

TEST_P(ReduceEx, ReduceScatter) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    for (const Kind *k : kKinds)
      for (dlpg_reduce_op_t op : {DLPG_SUM, DLPG_AVG, DLPG_PREMUL_SUM})
        for (size_t n : {size_t{0}, size_t{1}, size_t{517}, size_t{9000}}) {
          if (!k->complex && op != DLPG_PREMUL_SUM) continue;
          uint64_t seed = Mix(c.seed, ci++);
          std::ostringstream what;
          what << "dlpg_reduce_scatter_ex " << k->name << " op=" << OpName(op) << " n=" << n
               << " rank=" << c.rank;
          Buf in(*k, n * static_cast<size_t>(c.size)), out(*k, n);
          Fill(in, seed, c.rank);
          std::vector<uint8_t> saved = in.mem;
          DLTensor *ip = in.dl(), *opp = out.dl();
          dlpg_reduce_desc_t d = Desc(op, Scalar(c.rank));
          dlpg_status_t s = c.api->reduce_scatter_ex(c.group, &ip, &opp, 1, &d, nullptr, nullptr);
          ASSERT_EQ(s, DLPG_OK) << what.str() << ": " << c.api->last_error();
          EXPECT_EQ("", Check(out, op, seed, c.size, Parts(*k, n) * static_cast<size_t>(c.rank)))
              << what.str();
          EXPECT_TRUE(saved == in.mem) << what.str() << ": input modified";
        }
  });
}

// The plain functions take complex tensors for sum and avg too, and move them as bytes.
TEST_P(ReduceEx, ComplexThroughPlainFunctions) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t seed = Mix(c.seed, 1);
    for (const Kind *k : {&kC64, &kC128}) {
      Buf in(*k, 333);
      Fill(in, seed, c.rank);
      DLTensor *ip = in.dl();
      ASSERT_EQ(DLPG_OK, c.api->allreduce(c.group, &ip, nullptr, 1, DLPG_SUM, nullptr, nullptr))
          << c.api->last_error();
      EXPECT_EQ("", Check(in, DLPG_SUM, seed, c.size, 0)) << k->name;
      // Broadcast from the last rank and allgather: every element arrives bit for bit.
      Buf b(*k, 257);
      Fill(b, seed, c.rank);
      DLTensor *bp = b.dl();
      ASSERT_EQ(DLPG_OK, c.api->broadcast(c.group, &bp, nullptr, 1, c.size - 1, nullptr, nullptr))
          << c.api->last_error();
      for (size_t i = 0; i < Parts(*k, 257); i++)
        ASSERT_EQ(b.Get(i), Value(*k, seed, c.size - 1, i)) << k->name << " broadcast part " << i;
      Buf g(*k, 257 * static_cast<size_t>(c.size));
      Fill(b, seed, c.rank);
      DLTensor *gp = g.dl();
      ASSERT_EQ(DLPG_OK, c.api->allgather(c.group, &bp, &gp, 1, nullptr, nullptr))
          << c.api->last_error();
      for (int r = 0; r < c.size; r++)
        for (size_t i = 0; i < Parts(*k, 257); i++)
          ASSERT_EQ(g.Get(Parts(*k, 257) * static_cast<size_t>(r) + i), Value(*k, seed, r, i))
              << k->name << " allgather rank " << r << " part " << i;
    }
  });
}

// Refusals, the same on every rank (nothing reaches the peers): the status and the rule.
TEST_P(ReduceEx, Refusals) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    auto expect = [&](dlpg_status_t s, dlpg_status_t want, std::vector<std::string> words,
                      const std::string &what) {
      EXPECT_EQ(s, want) << what << ": " << c.api->status_name(s) << ": " << c.api->last_error();
      std::string m = c.api->last_error();
      for (auto &w : words) EXPECT_NE(m.find(w), std::string::npos) << what << ": no '" << w << "' in: " << m;
    };
    for (const Kind *k : {&kC64, &kC128}) {
      Buf in(*k, 8);
      DLTensor *ip = in.dl();
      for (dlpg_reduce_op_t op : {DLPG_MAX, DLPG_MIN, DLPG_PROD, DLPG_BAND, DLPG_BOR, DLPG_BXOR}) {
        expect(c.api->allreduce(c.group, &ip, nullptr, 1, op, nullptr, nullptr),
               DLPG_ERR_UNSUPPORTED, {"dlpg_allreduce", k->name, OpName(op), "complex"},
               std::string("allreduce ") + k->name + " " + OpName(op));
        expect(c.api->reduce_supported(in.t.device, in.t.dtype, op), DLPG_ERR_UNSUPPORTED,
               {k->name, OpName(op)}, std::string("reduce_supported ") + k->name);
      }
      for (dlpg_reduce_op_t op : {DLPG_SUM, DLPG_AVG, DLPG_PREMUL_SUM})
        EXPECT_EQ(DLPG_OK, c.api->reduce_supported(in.t.device, in.t.dtype, op))
            << k->name << " " << OpName(op) << ": " << c.api->last_error();
    }
    // premul_sum on an integer: the rule names the dtype.
    std::vector<int32_t> iv(8);
    int64_t shape[1] = {8};
    DLTensor it{};
    it.data = iv.data();
    it.device = {kDLCPU, 0};
    it.ndim = 1;
    it.dtype = {kDLInt, 32, 1};
    it.shape = shape;
    DLTensor *itp = &it;
    dlpg_reduce_desc_t d = Desc(DLPG_PREMUL_SUM, 0.5);
    expect(c.api->allreduce_ex(c.group, &itp, nullptr, 1, &d, nullptr, nullptr),
           DLPG_ERR_UNSUPPORTED, {"dlpg_allreduce_ex", "premul_sum", "int32", "floating or complex"},
           "premul_sum int32");
    // premul_sum given to a plain function: which call to make instead.
    Buf f(kF32, 8);
    DLTensor *fp = f.dl();
    expect(c.api->allreduce(c.group, &fp, nullptr, 1, DLPG_PREMUL_SUM, nullptr, nullptr),
           DLPG_ERR_INVALID_ARGUMENT, {"dlpg_allreduce", "premul_sum", "dlpg_allreduce_ex"},
           "premul_sum through dlpg_allreduce");
    Buf o(kF32, 8 * static_cast<size_t>(c.size));
    DLTensor *op2 = o.dl();
    expect(c.api->reduce_scatter(c.group, &op2, &fp, 1, DLPG_PREMUL_SUM, nullptr, nullptr),
           DLPG_ERR_INVALID_ARGUMENT, {"dlpg_reduce_scatter_ex"}, "premul_sum through reduce_scatter");
    expect(c.api->reduce(c.group, &fp, nullptr, 1, DLPG_PREMUL_SUM, 0, nullptr, nullptr),
           DLPG_ERR_INVALID_ARGUMENT, {"dlpg_reduce_ex"}, "premul_sum through reduce");
    // A bad descriptor.
    expect(c.api->allreduce_ex(c.group, &fp, nullptr, 1, nullptr, nullptr, nullptr),
           DLPG_ERR_INVALID_ARGUMENT, {"dlpg_allreduce_ex", "NULL"}, "NULL descriptor");
    dlpg_reduce_desc_t small = d;
    small.struct_size = sizeof(size_t);
    expect(c.api->allreduce_ex(c.group, &fp, nullptr, 1, &small, nullptr, nullptr),
           DLPG_ERR_INVALID_ARGUMENT, {"struct_size"}, "short descriptor");
    dlpg_reduce_desc_t bad = Desc(static_cast<dlpg_reduce_op_t>(9), 1);
    expect(c.api->allreduce_ex(c.group, &fp, nullptr, 1, &bad, nullptr, nullptr),
           DLPG_ERR_INVALID_ARGUMENT, {"DLPG_PREMUL_SUM"}, "op 9");
    // The group is still usable: every rank refused alike and locally.
    Buf ok(kC64, 4);
    Fill(ok, 7, c.rank);
    DLTensor *okp = ok.dl();
    dlpg_reduce_desc_t sum = Desc(DLPG_SUM, 0);
    EXPECT_EQ(DLPG_OK, c.api->allreduce_ex(c.group, &okp, nullptr, 1, &sum, nullptr, nullptr))
        << c.api->last_error();
    EXPECT_EQ("", Check(ok, DLPG_SUM, 7, c.size, 0));
  });
}

std::vector<RankParam> Params() {
  return {{Mode::kThreads, 1, false}, {Mode::kThreads, 2, false}, {Mode::kThreads, 3, false},
          {Mode::kProcesses, 4, false}};
}
INSTANTIATE_TEST_SUITE_P(Ranks, ReduceEx, ::testing::ValuesIn(Params()), RankParamName);

}  // namespace
