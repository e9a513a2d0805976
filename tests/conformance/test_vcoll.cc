// The rooted and uneven collectives (dlpg_gather, dlpg_scatter, dlpg_allgatherv,
// dlpg_alltoallv, dlpg_reduce_scatter_v) against references computed here from the same
// per-rank random data: random counts (zero blocks included, rank 0 sending and receiving
// four times as much), every root, packed (NULL) and explicit displacements with gaps (the
// gaps must stay untouched), several dtypes (complex64 moved as bytes and reduced as its
// float parts); counts that disagree across ranks fail every rank naming both ranks and
// both counts and leave the group usable; bad arguments name the argument. Runs on both CPU
// backends and with small shared-memory slots (collectives.cmake).
#include <cstring>
#include <numeric>
#include <sstream>

#include "harness.h"

using namespace dlpgt;

namespace {

// A dtype of this file: a DT of the reference, or complex64 as pairs of float32.
struct VT {
  const char *name;
  DT base;
  int parts;
};
const VT kVTs[] = {{"float32", DT::F32, 1}, {"int64", DT::I64, 1},  {"bfloat16", DT::BF16, 1},
                   {"float64", DT::F64, 1}, {"uint8", DT::U8, 1},   {"complex64", DT::F32, 2}};
DLDataType Type(const VT &v) {
  return v.parts == 2 ? DLDataType{kDLComplex, 64, 1} : DLType(v.base);
}
size_t Esz(const VT &v) { return ElemSize(v.base) * static_cast<size_t>(v.parts); }

// A 1-D host tensor of n elements filled with a sentinel byte.
struct Buf {
  std::vector<uint8_t> mem;
  int64_t shape[1];
  DLTensor t{};
  Buf(const VT &v, int64_t n, uint8_t fill = 0xa5) {
    mem.assign(static_cast<size_t>(n) * Esz(v) + 8, fill);
    shape[0] = n;
    t.data = mem.data();
    t.device = {kDLCPU, 0};
    t.ndim = 1;
    t.dtype = Type(v);
    t.shape = shape;
  }
  DLTensor *dl() { return &t; }
  uint8_t *at(const VT &v, int64_t i) { return mem.data() + static_cast<size_t>(i) * Esz(v); }
};

// The bytes of block `id` (n elements) of a case: independent of who computes them.
std::vector<uint8_t> Block(const VT &v, uint64_t seed, uint64_t id, int64_t n) {
  std::vector<uint8_t> b(static_cast<size_t>(n) * Esz(v) + 1);
  Generate(v.base, DLPG_SUM, Mix(seed, id), 0, b.data(), static_cast<size_t>(n) * v.parts);
  return b;
}

// Random counts with zero blocks, rank 0's four times as large (the skew).
int64_t Count(Rng &r, int rank, int64_t scale) {
  int64_t c = r.Range(0, 3) == 0 ? 0 : r.Range(1, scale);
  return rank == 0 ? 4 * c : c;
}

// Displacements for counts: packed, or with a random gap before each block (the output
// holds the gaps too); returns the elements the tensor needs.
int64_t Displs(Rng &r, const std::vector<int64_t> &counts, bool gaps, std::vector<int64_t> *d) {
  int64_t off = 0;
  d->resize(counts.size());
  for (size_t i = 0; i < counts.size(); i++) {
    if (gaps) off += r.Range(0, 5);
    (*d)[i] = off;
    off += counts[i];
  }
  return off + (gaps ? r.Range(0, 3) : 0);
}

std::string Where(const char *fn, const VT &v, int rank, uint64_t ci) {
  std::ostringstream s;
  s << fn << " " << v.name << " case " << ci << " rank " << rank;
  return s.str();
}

// Bytes [off, off + len) of got equal want, else a message.
::testing::AssertionResult Same(const uint8_t *got, const uint8_t *want, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "byte " << i << " of " << len << ": got "
                                           << int(got[i]) << ", want " << int(want[i]);
  return ::testing::AssertionSuccess();
}

// Every byte of [lo, hi) of b outside the listed blocks still holds the sentinel.
::testing::AssertionResult GapsKept(const Buf &b, size_t esz, const std::vector<int64_t> &counts,
                                    const std::vector<int64_t> &displs, int64_t total) {
  std::vector<char> used(static_cast<size_t>(total), 0);
  for (size_t i = 0; i < counts.size(); i++)
    for (int64_t k = 0; k < counts[i]; k++) used[static_cast<size_t>(displs[i] + k)] = 1;
  for (int64_t e = 0; e < total; e++)
    if (!used[static_cast<size_t>(e)])
      for (size_t k = 0; k < esz; k++)
        if (b.mem[static_cast<size_t>(e) * esz + k] != 0xa5)
          return ::testing::AssertionFailure() << "gap element " << e << " was written";
  return ::testing::AssertionSuccess();
}

class VColl : public ::testing::TestWithParam<RankParam> {};

TEST_P(VColl, GatherEveryRoot) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    for (const VT &v : kVTs)
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{333}, int64_t{70001}})
        for (int root = 0; root < c.size; root++) {
          uint64_t seed = Mix(c.seed, ci++);
          SCOPED_TRACE(Where("dlpg_gather", v, c.rank, ci));
          auto mine = Block(v, seed, static_cast<uint64_t>(c.rank), n);
          Buf in(v, n), out(v, n * c.size);
          memcpy(in.mem.data(), mine.data(), static_cast<size_t>(n) * Esz(v));
          // Off the root the output is ignored: NULL on odd ranks, a tensor elsewhere.
          DLTensor *o = c.rank == root || c.rank % 2 == 0 ? out.dl() : nullptr;
          DLPG_ASSERT_OK(c.api, c.api->gather(c.group, in.dl(), o, root, nullptr, nullptr));
          if (c.rank != root) {
            EXPECT_TRUE(Same(out.mem.data(), std::vector<uint8_t>(out.mem.size(), 0xa5).data(),
                             out.mem.size()));
            continue;
          }
          for (int q = 0; q < c.size; q++)
            ASSERT_TRUE(Same(out.at(v, q * n), Block(v, seed, static_cast<uint64_t>(q), n).data(),
                             static_cast<size_t>(n) * Esz(v))) << "block of rank " << q;
        }
  });
}

TEST_P(VColl, ScatterEveryRoot) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    for (const VT &v : kVTs)
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{333}, int64_t{70001}})
        for (int root = 0; root < c.size; root++) {
          uint64_t seed = Mix(c.seed, ci++);
          SCOPED_TRACE(Where("dlpg_scatter", v, c.rank, ci));
          Buf in(v, n * c.size), out(v, n);
          for (int j = 0; j < c.size; j++)
            memcpy(in.at(v, j * n), Block(v, seed, static_cast<uint64_t>(j), n).data(),
                   static_cast<size_t>(n) * Esz(v));
          DLTensor *i = c.rank == root || c.rank % 2 == 0 ? in.dl() : nullptr;
          DLPG_ASSERT_OK(c.api, c.api->scatter(c.group, i, out.dl(), root, nullptr, nullptr));
          ASSERT_TRUE(Same(out.mem.data(), Block(v, seed, static_cast<uint64_t>(c.rank), n).data(),
                           static_cast<size_t>(n) * Esz(v)));
        }
  });
}

TEST_P(VColl, AllgathervRandomCounts) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    for (const VT &v : kVTs)
      for (int64_t scale : {int64_t{7}, int64_t{40000}})
        for (bool gaps : {false, true}) {
          uint64_t seed = Mix(c.seed, ci++);
          SCOPED_TRACE(Where("dlpg_allgatherv", v, c.rank, ci));
          Rng r(seed);  // the same counts on every rank
          std::vector<int64_t> counts(static_cast<size_t>(c.size)), displs;
          for (int q = 0; q < c.size; q++) counts[static_cast<size_t>(q)] = Count(r, q, scale);
          int64_t total = Displs(r, counts, gaps, &displs);
          int64_t me = counts[static_cast<size_t>(c.rank)];
          Buf in(v, me), out(v, total);
          memcpy(in.mem.data(), Block(v, seed, static_cast<uint64_t>(c.rank), me).data(),
                 static_cast<size_t>(me) * Esz(v));
          DLPG_ASSERT_OK(c.api, c.api->allgatherv(c.group, in.dl(), out.dl(), counts.data(),
                                                  gaps ? displs.data() : nullptr, nullptr, nullptr));
          for (int q = 0; q < c.size; q++) {
            int64_t n = counts[static_cast<size_t>(q)];
            ASSERT_TRUE(Same(out.at(v, displs[static_cast<size_t>(q)]),
                             Block(v, seed, static_cast<uint64_t>(q), n).data(),
                             static_cast<size_t>(n) * Esz(v))) << "block of rank " << q;
          }
          ASSERT_TRUE(GapsKept(out, Esz(v), counts, displs, total));
        }
  });
}

TEST_P(VColl, AlltoallvRandomCounts) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    const size_t N = static_cast<size_t>(c.size);
    for (const VT &v : kVTs)
      for (int64_t scale : {int64_t{7}, int64_t{30000}})
        for (int gaps = 0; gaps < 4; gaps++) {  // bit 0: send side, bit 1: receive side
          uint64_t seed = Mix(c.seed, ci++);
          SCOPED_TRACE(Where("dlpg_alltoallv", v, c.rank, ci));
          Rng r(seed);  // the whole matrix, the same on every rank
          std::vector<std::vector<int64_t>> m(N, std::vector<int64_t>(N));
          for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < N; j++) m[i][j] = Count(r, static_cast<int>(i), scale);
          Rng lr(Mix(seed, static_cast<uint64_t>(c.rank) + 100));  // this rank's own gaps
          std::vector<int64_t> sc(N), rc(N), sd, rd;
          for (size_t j = 0; j < N; j++) sc[j] = m[static_cast<size_t>(c.rank)][j];
          for (size_t i = 0; i < N; i++) rc[i] = m[i][static_cast<size_t>(c.rank)];
          int64_t stotal = Displs(lr, sc, gaps & 1, &sd), rtotal = Displs(lr, rc, gaps & 2, &rd);
          Buf in(v, stotal), out(v, rtotal);
          for (size_t j = 0; j < N; j++)
            memcpy(in.at(v, sd[j]), Block(v, seed, c.rank * N + j, sc[j]).data(),
                   static_cast<size_t>(sc[j]) * Esz(v));
          DLPG_ASSERT_OK(c.api, c.api->alltoallv(c.group, in.dl(), sc.data(),
                                                 (gaps & 1) ? sd.data() : nullptr, out.dl(),
                                                 rc.data(), (gaps & 2) ? rd.data() : nullptr,
                                                 nullptr, nullptr));
          for (size_t i = 0; i < N; i++)
            ASSERT_TRUE(Same(out.at(v, rd[i]), Block(v, seed, i * N + c.rank, rc[i]).data(),
                             static_cast<size_t>(rc[i]) * Esz(v))) << "block from rank " << i;
          ASSERT_TRUE(GapsKept(out, Esz(v), rc, rd, rtotal));
        }
  });
}

TEST_P(VColl, ReduceScatterVRandomCounts) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    const size_t N = static_cast<size_t>(c.size);
    for (const VT &v : kVTs)
      for (dlpg_reduce_op_t op : {DLPG_SUM, DLPG_MAX, DLPG_AVG})
        for (int64_t scale : {int64_t{7}, int64_t{30000}})
          for (bool gaps : {false, true}) {
            bool flt = Info(v.base).is_float;
            if (op == DLPG_AVG && !flt) continue;
            if (v.parts == 2 && op == DLPG_MAX) continue;  // complex: sum and avg
            if (!p.full && scale > 7 && op != DLPG_SUM) continue;
            uint64_t seed = Mix(c.seed, ci++);
            SCOPED_TRACE(Where("dlpg_reduce_scatter_v", v, c.rank, ci) + " op=" + OpName(op));
            Rng r(seed);
            std::vector<int64_t> counts(N), displs;
            for (size_t q = 0; q < N; q++) counts[q] = Count(r, static_cast<int>(q), scale);
            int64_t total = Displs(r, counts, gaps, &displs);
            // Every rank's input: Generate's data for op (exact reductions), in the parts.
            auto all = AllInputs(v.base, op, seed, c.size, static_cast<size_t>(total) * v.parts);
            Buf in(v, total), out(v, counts[static_cast<size_t>(c.rank)]);
            memcpy(in.mem.data(), all[static_cast<size_t>(c.rank)].data(),
                   static_cast<size_t>(total) * Esz(v));
            dlpg_reduce_desc_t d{};
            d.struct_size = sizeof d;
            d.op = op;
            DLPG_ASSERT_OK(c.api, c.api->reduce_scatter_v(c.group, in.dl(), out.dl(), counts.data(),
                                                          gaps ? displs.data() : nullptr, &d,
                                                          nullptr, nullptr));
            size_t first = static_cast<size_t>(displs[static_cast<size_t>(c.rank)]) * v.parts;
            size_t n = static_cast<size_t>(counts[static_cast<size_t>(c.rank)]) * v.parts;
            std::vector<const void *> ptrs;
            for (auto &a : all) ptrs.push_back(a.data() + first * ElemSize(v.base));
            std::vector<uint8_t> want(n * ElemSize(v.base) + 1);
            Reduce(v.base, op, ptrs, want.data(), n);
            std::string diff = Compare(v.base, op, out.mem.data(), want.data(), n);
            ASSERT_EQ(diff, "");
          }
  });
}

// The arrays are the op's own copies: an asynchronous alltoallv still runs right after the
// caller overwrote and freed its arrays.
TEST_P(VColl, AsyncOwnsItsCounts) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const VT &v = kVTs[0];
    const size_t N = static_cast<size_t>(c.size);
    uint64_t seed = c.seed;
    std::vector<int64_t> *sc = new std::vector<int64_t>(N), *rc = new std::vector<int64_t>(N);
    for (size_t j = 0; j < N; j++) (*sc)[j] = static_cast<int64_t>(1 + c.rank + 2 * j);
    for (size_t i = 0; i < N; i++) (*rc)[i] = static_cast<int64_t>(1 + i + 2 * c.rank);
    std::vector<int64_t> sc0 = *sc, rc0 = *rc, sd(N), rd(N);
    Rng unused(1);
    int64_t st = Displs(unused, sc0, false, &sd), rt = Displs(unused, rc0, false, &rd);
    Buf in(v, st), out(v, rt);
    for (size_t j = 0; j < N; j++)
      memcpy(in.at(v, sd[j]), Block(v, seed, c.rank * N + j, sc0[j]).data(),
             static_cast<size_t>(sc0[j]) * Esz(v));
    dlpg_work_t *w = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->alltoallv(c.group, in.dl(), sc->data(), nullptr, out.dl(),
                                           rc->data(), nullptr, nullptr, &w));
    std::fill(sc->begin(), sc->end(), -7);
    std::fill(rc->begin(), rc->end(), 1 << 30);
    delete sc;
    delete rc;
    DLPG_ASSERT_OK(c.api, c.api->work_wait(w, 0));
    c.api->work_free(w);
    for (size_t i = 0; i < N; i++)
      ASSERT_TRUE(Same(out.at(v, rd[i]), Block(v, seed, i * N + c.rank, rc0[i]).data(),
                       static_cast<size_t>(rc0[i]) * Esz(v))) << "block from rank " << i;
  });
}

// Counts that disagree fail every rank with the same message naming both ranks and both
// counts; the group stays usable (the next collective of matching calls succeeds).
TEST_P(VColl, DisagreeingCountsNameBothRanks) {
  RankParam p = GetParam();
  if (p.n < 2) GTEST_SKIP() << "needs two ranks";
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const VT &v = kVTs[0];
    const size_t N = static_cast<size_t>(c.size);
    // allgatherv: the last rank believes rank 0 contributes 5 elements, the others 4.
    std::vector<int64_t> counts(N, 4);
    if (c.rank == c.size - 1) counts[0] = 5;
    int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    Buf in(v, counts[static_cast<size_t>(c.rank)]), out(v, total);
    dlpg_status_t s = c.api->allgatherv(c.group, in.dl(), out.dl(), counts.data(), nullptr,
                                        nullptr, nullptr);
    EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << c.api->last_error();
    std::string want = "rank 0 has counts[0] = 4 but rank " + std::to_string(c.size - 1) +
                       " has counts[0] = 5";
    EXPECT_NE(std::string(c.api->last_error()).find(want), std::string::npos)
        << c.api->last_error();
    // alltoallv: rank 1 expects one element fewer from rank 0 than rank 0 sends it.
    std::vector<int64_t> sc(N, 3), rc(N, 3);
    if (c.rank == 1) rc[0] = 2;
    Buf ain(v, 3 * c.size), aout(v, 3 * c.size);
    s = c.api->alltoallv(c.group, ain.dl(), sc.data(), nullptr, aout.dl(), rc.data(), nullptr,
                         nullptr, nullptr);
    EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << c.api->last_error();
    EXPECT_NE(std::string(c.api->last_error())
                  .find("rank 0 sends 3 elements to rank 1 but rank 1 expects 2 from rank 0"),
              std::string::npos)
        << c.api->last_error();
    // gather: the blocks differ (rank 1 passes 5 elements, the others 4).
    Buf gin(v, c.rank == 1 ? 5 : 4), gout(v, 5 * c.size);
    s = c.api->gather(c.group, gin.dl(), c.rank == 0 ? nullptr : gout.dl(), 1, nullptr, nullptr);
    EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << c.api->last_error();
    // Still usable.
    std::vector<int64_t> ok(N, 2);
    Buf oin(v, 2), oout(v, 2 * c.size);
    DLPG_EXPECT_OK(c.api, c.api->allgatherv(c.group, oin.dl(), oout.dl(), ok.data(), nullptr,
                                            nullptr, nullptr));
  });
}

std::string Err(const dlpg_api_t *api, dlpg_status_t s) {
  return std::string(api->status_name(s)) + ": " + api->last_error();
}

// Arguments one rank can judge alone are refused at the call, naming the argument.
TEST(VCollArgs, BadArgumentsNameTheArgument) {
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    const VT &v = kVTs[0];
    auto api = c.api;
    auto g = c.group;
    Buf in(v, 4), out(v, 12), big(v, 8);
    int64_t cnt[2] = {4, 4}, neg[2] = {4, -1}, dsp[2] = {0, 10};
    auto expect = [&](dlpg_status_t s, const char *needle) {
      EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << Err(api, s);
      EXPECT_NE(std::string(api->last_error()).find(needle), std::string::npos)
          << api->last_error() << "\n  wanted: " << needle;
    };
    cnt[c.rank] = 4;
    expect(api->allgatherv(g, in.dl(), out.dl(), nullptr, nullptr, nullptr, nullptr),
           "dlpg_allgatherv: counts is NULL");
    expect(api->allgatherv(g, in.dl(), out.dl(), neg, nullptr, nullptr, nullptr),
           "counts[1] is -1");
    int64_t c5[2] = {5, 5};
    expect(api->allgatherv(g, in.dl(), out.dl(), c5, nullptr, nullptr, nullptr),
           c.rank == 0 ? "input has 4 elements but counts[0] (this rank's) is 5"
                       : "input has 4 elements but counts[1] (this rank's) is 5");
    expect(api->allgatherv(g, in.dl(), out.dl(), cnt, dsp, nullptr, nullptr),
           "displs[1] = 10 with counts[1] = 4 overruns output (12 elements)");
    expect(api->allgatherv(g, in.dl(), big.dl(), cnt, dsp, nullptr, nullptr),
           "displs[1] = 10 with counts[1] = 4 overruns output (8 elements)");
    int64_t rc[2] = {4, 5}, rd[2] = {0, 10};
    expect(api->alltoallv(g, big.dl(), cnt, nullptr, out.dl(), rc, rd, nullptr, nullptr),
           "recv_displs[1] = 10 with recv_counts[1] = 5 overruns output (12 elements)");
    expect(api->alltoallv(g, big.dl(), nullptr, nullptr, out.dl(), rc, nullptr, nullptr, nullptr),
           "send_counts is NULL");
    int64_t sd[2] = {0, -2};
    expect(api->alltoallv(g, big.dl(), cnt, sd, out.dl(), cnt, nullptr, nullptr, nullptr),
           "send_displs[1] is -2");
    expect(api->alltoallv(g, big.dl(), cnt, nullptr, big.dl(), cnt, nullptr, nullptr, nullptr),
           "input and output overlap");
    dlpg_reduce_desc_t d{};
    d.struct_size = sizeof d;
    d.op = DLPG_SUM;
    expect(api->reduce_scatter_v(g, big.dl(), in.dl(), cnt, nullptr, nullptr, nullptr, nullptr),
           "op (the dlpg_reduce_desc_t) is NULL");
    expect(api->reduce_scatter_v(g, in.dl(), in.dl(), cnt, nullptr, &d, nullptr, nullptr),
           "input has 4 elements but counts[0..1] packed need 8");
    expect(api->reduce_scatter_v(g, big.dl(), big.dl(), cnt, nullptr, &d, nullptr, nullptr),
           "output has 8 elements but counts[");
    expect(api->gather(g, in.dl(), out.dl(), 2, nullptr, nullptr), "root is 2 but world_size is 2");
    expect(api->scatter(g, in.dl(), out.dl(), -1, nullptr, nullptr), "root is -1");
    if (c.rank == 0) {
      expect(api->gather(g, in.dl(), nullptr, 0, nullptr, nullptr),
             "output is NULL (the root's output is required)");
      expect(api->scatter(g, nullptr, in.dl(), 0, nullptr, nullptr),
             "input is NULL (the root's input is required)");
      expect(api->gather(g, in.dl(), out.dl(), 0, nullptr, nullptr),
             "output has 12 elements but needs world_size 2");
    } else {
      expect(api->scatter(g, in.dl(), nullptr, 0, nullptr, nullptr), "output is NULL");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, VColl, ::testing::ValuesIn(StandardRankParams()), RankParamName);

}  // namespace
