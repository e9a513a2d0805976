// Collectives against an independently computed reference (tests/conformance/reference.h) on random
// per-rank data: allreduce, broadcast (every root), reduce (every root), allgather,
// reduce_scatter, alltoall and barrier; every dtype x reduce op at 2 ranks, a representative
// subset at 1, 3 and 4 ranks; threads and forked processes; sizes 0, 1, odd and 64 MiB;
// in place and out of place; byte_offset, explicit strides and asynchronous work handles.
#include <sstream>

#include "harness.h"

using namespace dlpgt;

namespace {

const size_t kSizes[] = {0, 1, 1031};

std::vector<DT> ReduceDTypes(bool full) {
  if (full) {
    std::vector<DT> v;
    for (auto &i : AllDTypes()) v.push_back(i.dt);
    return v;
  }
  return {DT::I32, DT::U8, DT::F16, DT::BF16, DT::F32, DT::BOOL, DT::F8E4M3};
}
std::vector<DT> MoveDTypes(bool full) {
  if (full) return ReduceDTypes(true);
  return {DT::I8, DT::I64, DT::F16, DT::F64, DT::BOOL, DT::F8E5M2};
}

std::string Ctx(const char *op, DT dt, const char *rop, size_t n, bool inplace, int rank,
                int root = -1) {
  std::ostringstream s;
  s << op << " dtype=" << Info(dt).name;
  if (rop) s << " op=" << rop;
  s << " numel=" << n << (inplace ? " in-place" : " out-of-place") << " rank=" << rank;
  if (root >= 0) s << " root=" << root;
  return s.str();
}

// Whether an unsupported (dtype, op) came back as DLPG_ERR_UNSUPPORTED with a message.
void ExpectUnsupported(const dlpg_api_t *api, dlpg_status_t s, const char *fn, DT dt,
                       dlpg_reduce_op_t op, const std::string &what) {
  EXPECT_EQ(s, DLPG_ERR_UNSUPPORTED) << what << ": got " << api->status_name(s) << ": "
                                     << api->last_error();
  if (s != DLPG_OK) {
    std::string m = api->last_error();
    EXPECT_FALSE(m.empty()) << what << ": empty message";
    EXPECT_NE(m.find(fn), std::string::npos) << what << ": message does not name " << fn << ": " << m;
    EXPECT_NE(m.find(Info(dt).name), std::string::npos) << what << ": message lacks the dtype: " << m;
    EXPECT_NE(m.find(OpName(op)), std::string::npos) << what << ": message lacks the op: " << m;
  }
}

// Counts unexpected failures of one rank and stops its loops after a few, so a broken
// group gives a handful of messages rather than thousands.
struct Budget {
  int errors = 0;
  bool Fail(const dlpg_api_t *api, dlpg_status_t s, const std::string &what) {
    ADD_FAILURE() << what << ": " << api->status_name(s) << ": " << api->last_error();
    return ++errors >= 3;
  }
  bool Exhausted() const { return errors >= 3; }
};

// A copy of t's bytes, to check later that an input was left unmodified.
std::vector<uint8_t> Snapshot(HostTensor &t) {
  return std::vector<uint8_t>(static_cast<uint8_t *>(t.elems()),
                              static_cast<uint8_t *>(t.elems()) + t.nbytes());
}

void ExpectInputUnmodified(const std::vector<uint8_t> &saved, HostTensor &in,
                           const std::string &what) {
  if (in.nbytes()) {  // memcmp's pointers must not be NULL, even for 0 bytes
    EXPECT_EQ(0, memcmp(saved.data(), in.elems(), in.nbytes())) << what << ": input modified";
  }
}

class Collectives : public ::testing::TestWithParam<RankParam> {};

TEST_P(Collectives, Allreduce) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    Budget b;
    uint64_t ci = 0;
    for (DT dt : ReduceDTypes(p.full))
      for (dlpg_reduce_op_t op : AllOps())
        for (size_t n : kSizes)
          for (bool inplace : {true, false}) {
            if (b.Exhausted()) return;
            uint64_t seed = Mix(c.seed, ci++);
            std::string what = Ctx("dlpg_allreduce", dt, OpName(op), n, inplace, c.rank);
            HostTensor in(dt, {static_cast<int64_t>(n)}, inplace ? 0 : 3, !inplace);
            HostTensor out(dt, {static_cast<int64_t>(n)});
            Generate(dt, op, seed, c.rank, in.elems(), n);
            std::vector<uint8_t> saved = Snapshot(in);
            DLTensor *ip = in.dl(), *opp = out.dl();
            const bool sup = ReduceSupported(c.api, dt, op);  // asked before: it sets last_error
            dlpg_status_t s = c.api->allreduce(c.group, &ip, inplace ? nullptr : &opp, 1, op,
                                               nullptr, nullptr);
            if (!sup) {
              ExpectUnsupported(c.api, s, "dlpg_allreduce", dt, op, what);
              continue;
            }
            if (s != DLPG_OK) {
              b.Fail(c.api, s, what);
              continue;
            }
            std::vector<uint8_t> want = ReducedReference(dt, op, seed, c.size, n, 0, n);
            EXPECT_EQ("", Compare(dt, op, inplace ? in.elems() : out.elems(), want.data(), n)) << what;
            if (!inplace) ExpectInputUnmodified(saved, in, what);
          }
  });
}

TEST_P(Collectives, Reduce) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    Budget b;
    uint64_t ci = 0;
    for (int root = 0; root < c.size; root++)
      for (DT dt : ReduceDTypes(p.full))
        for (dlpg_reduce_op_t op : AllOps())
          for (size_t n : kSizes)
            for (bool inplace : {true, false}) {
              if (b.Exhausted()) return;
              // Keep the 2-rank matrix to every op at size 1031 and a subset at 0 and 1.
              uint64_t seed = Mix(c.seed, ci++);
              std::string what = Ctx("dlpg_reduce", dt, OpName(op), n, inplace, c.rank, root);
              HostTensor in(dt, {static_cast<int64_t>(n)}, inplace ? 0 : 1, !inplace);
              HostTensor out(dt, {static_cast<int64_t>(n)});
              out.Fill(0x5A);
              Generate(dt, op, seed, c.rank, in.elems(), n);
              DLTensor *ip = in.dl(), *opp = out.dl();
              const bool sup = ReduceSupported(c.api, dt, op);  // asked before: it sets last_error
              dlpg_status_t s = c.api->reduce(c.group, &ip, inplace ? nullptr : &opp, 1, op, root,
                                              nullptr, nullptr);
              if (!sup) {
                ExpectUnsupported(c.api, s, "dlpg_reduce", dt, op, what);
                continue;
              }
              if (s != DLPG_OK) {
                b.Fail(c.api, s, what);
                continue;
              }
              if (c.rank == root) {
                std::vector<uint8_t> want = ReducedReference(dt, op, seed, c.size, n, 0, n);
                EXPECT_EQ("", Compare(dt, op, inplace ? in.elems() : out.elems(), want.data(), n))
                    << what;
              } else if (!inplace) {
                std::vector<uint8_t> sentinel(out.nbytes(), 0x5A);
                if (out.nbytes()) {  // no NULL pointer to memcmp, even for 0 bytes
                  EXPECT_EQ(0, memcmp(sentinel.data(), out.elems(), out.nbytes()))
                      << what << ": a non-root output was written";
                }
              }
            }
  });
}

TEST_P(Collectives, Broadcast) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    Budget b;
    uint64_t ci = 0;
    for (int root = 0; root < c.size; root++)
      for (DT dt : MoveDTypes(p.full))
        for (size_t n : kSizes)
          for (bool inplace : {true, false}) {
            if (b.Exhausted()) return;
            uint64_t seed = Mix(c.seed, ci++);
            std::string what = Ctx("dlpg_broadcast", dt, nullptr, n, inplace, c.rank, root);
            HostTensor in(dt, {static_cast<int64_t>(n)}, inplace ? 0 : 5, !inplace);
            HostTensor out(dt, {static_cast<int64_t>(n)});
            out.Fill(0x5A);
            Generate(dt, DLPG_SUM, seed, c.rank, in.elems(), n);
            std::vector<uint8_t> saved = Snapshot(in);
            DLTensor *ip = in.dl(), *opp = out.dl();
            dlpg_status_t s = c.api->broadcast(c.group, &ip, inplace ? nullptr : &opp, 1, root,
                                               nullptr, nullptr);
            if (s != DLPG_OK) {
              b.Fail(c.api, s, what);
              continue;
            }
            std::vector<uint8_t> want(n * ElemSize(dt) + 1);
            Generate(dt, DLPG_SUM, seed, root, want.data(), n);
            EXPECT_EQ("", Compare(dt, DLPG_SUM, inplace ? in.elems() : out.elems(), want.data(), n))
                << what;
            if (!inplace) ExpectInputUnmodified(saved, in, what);
          }
  });
}

TEST_P(Collectives, Allgather) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    Budget b;
    uint64_t ci = 0;
    for (DT dt : MoveDTypes(p.full))
      for (size_t n : kSizes)
        for (bool two_d : {false, true}) {
          if (b.Exhausted()) return;
          uint64_t seed = Mix(c.seed, ci++);
          std::string what = Ctx("dlpg_allgather", dt, two_d ? "output[ws,n]" : "output[ws*n]", n,
                                 false, c.rank);
          HostTensor in(dt, {static_cast<int64_t>(n)}, two_d ? 7 : 0, two_d);
          std::vector<int64_t> oshape = two_d ? std::vector<int64_t>{c.size, static_cast<int64_t>(n)}
                                              : std::vector<int64_t>{static_cast<int64_t>(c.size * n)};
          HostTensor out(dt, oshape, two_d ? 0 : 2, !two_d);
          out.Fill(0x5A);
          Generate(dt, DLPG_SUM, seed, c.rank, in.elems(), n);
          DLTensor *ip = in.dl(), *opp = out.dl();
          dlpg_status_t s = c.api->allgather(c.group, &ip, &opp, 1, nullptr, nullptr);
          if (s != DLPG_OK) {
            b.Fail(c.api, s, what);
            continue;
          }
          std::vector<uint8_t> want(c.size * n * ElemSize(dt) + 1);
          for (int r = 0; r < c.size; r++)
            Generate(dt, DLPG_SUM, seed, r, want.data() + r * n * ElemSize(dt), n);
          EXPECT_EQ("", Compare(dt, DLPG_SUM, out.elems(), want.data(), c.size * n)) << what;
        }
  });
}

TEST_P(Collectives, ReduceScatter) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    Budget b;
    uint64_t ci = 0;
    for (DT dt : ReduceDTypes(p.full))
      for (dlpg_reduce_op_t op : AllOps())
        for (size_t n : kSizes) {
          if (b.Exhausted()) return;
          uint64_t seed = Mix(c.seed, ci++);
          std::string what = Ctx("dlpg_reduce_scatter", dt, OpName(op), n, false, c.rank);
          size_t total = c.size * n;
          HostTensor in(dt, {static_cast<int64_t>(total)}, 1, true);
          HostTensor out(dt, {static_cast<int64_t>(n)});
          out.Fill(0x5A);
          Generate(dt, op, seed, c.rank, in.elems(), total);
          std::vector<uint8_t> saved = Snapshot(in);
          DLTensor *ip = in.dl(), *opp = out.dl();
          const bool sup = ReduceSupported(c.api, dt, op);  // asked before: it sets last_error
          dlpg_status_t s = c.api->reduce_scatter(c.group, &ip, &opp, 1, op, nullptr, nullptr);
          if (!sup) {
            ExpectUnsupported(c.api, s, "dlpg_reduce_scatter", dt, op, what);
            continue;
          }
          if (s != DLPG_OK) {
            b.Fail(c.api, s, what);
            continue;
          }
          std::vector<uint8_t> want =
              ReducedReference(dt, op, seed, c.size, total, c.rank * n, n);
          EXPECT_EQ("", Compare(dt, op, out.elems(), want.data(), n)) << what;
          ExpectInputUnmodified(saved, in, what);
        }
  });
}

TEST_P(Collectives, Alltoall) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    Budget b;
    uint64_t ci = 0;
    for (DT dt : MoveDTypes(p.full))
      for (size_t n : kSizes) {
        if (b.Exhausted()) return;
        uint64_t seed = Mix(c.seed, ci++);
        std::string what = Ctx("dlpg_alltoall", dt, nullptr, n, false, c.rank);
        size_t total = c.size * n;
        HostTensor in(dt, {static_cast<int64_t>(total)}, 3, true);
        HostTensor out(dt, {static_cast<int64_t>(total)});
        out.Fill(0x5A);
        Generate(dt, DLPG_SUM, seed, c.rank, in.elems(), total);
        dlpg_status_t s = c.api->alltoall(c.group, in.dl(), out.dl(), nullptr, nullptr);
        if (s != DLPG_OK) {
          b.Fail(c.api, s, what);
          continue;
        }
        // Block i of my output is block c.rank of rank i's input.
        auto all = AllInputs(dt, DLPG_SUM, seed, c.size, total);
        std::vector<uint8_t> want(total * ElemSize(dt) + 1);
        size_t bb = n * ElemSize(dt);
        for (int i = 0; i < c.size; i++) memcpy(want.data() + i * bb, all[i].data() + c.rank * bb, bb);
        EXPECT_EQ("", Compare(dt, DLPG_SUM, out.elems(), want.data(), total)) << what;
      }
  });
}

// Every rank sets a key before the barrier; after it, every rank's key must exist.
TEST_P(Collectives, Barrier) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    for (int round = 0; round < 3; round++) {
      if (c.rank == round % c.size) usleep(100000);  // a late rank
      std::string k = c.name + "/entered/" + std::to_string(round) + "/" + std::to_string(c.rank);
      DLPG_ASSERT_OK(c.api, c.api->store_set(c.store, k.c_str(), "x", 1));
      DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
      std::vector<std::string> keys;
      std::vector<const char *> kp;
      for (int r = 0; r < c.size; r++)
        keys.push_back(c.name + "/entered/" + std::to_string(round) + "/" + std::to_string(r));
      for (auto &s : keys) kp.push_back(s.c_str());
      int all = 0;
      DLPG_ASSERT_OK(c.api, c.api->store_check(c.store, kp.data(), kp.size(), &all));
      EXPECT_EQ(all, 1) << "rank " << c.rank << " left barrier round " << round
                        << " before every rank entered it";
    }
    // With a work handle.
    dlpg_work_t *w = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, &w));
    DLPG_EXPECT_OK(c.api, c.api->work_wait(w, 0));
    c.api->work_free(w);
  });
}

// Multi-dimensional tensors: explicit compact strides, size-1 dims with arbitrary strides,
// byte_offset into a buffer, 0-d scalars.
TEST_P(Collectives, Layouts) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    // Size-1 dim with a nonsense stride, offset input.
    {
      HostTensor in(DT::I32, {3, 1, 343}, 5, true), out(DT::I32, {3, 1, 343}, 2, true);
      in.strides() = {343, 9999, 1};
      out.strides() = {343, -4, 1};
      uint64_t seed = Mix(c.seed, 1);
      Generate(DT::I32, DLPG_SUM, seed, c.rank, in.elems(), in.numel());
      DLTensor *ip = in.dl(), *opp = out.dl();
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ip, &opp, 1, DLPG_SUM, nullptr, nullptr));
      std::vector<uint8_t> want =
          ReducedReference(DT::I32, DLPG_SUM, seed, c.size, in.numel(), 0, in.numel());
      EXPECT_EQ("", Compare(DT::I32, DLPG_SUM, out.elems(), want.data(), in.numel()));
    }
    // 3-d allgather with explicit strides, output [ws, 7, 11, 13].
    {
      HostTensor in(DT::F64, {7, 11, 13}, 1, true), out(DT::F64, {c.size, 7, 11, 13}, 3, true);
      uint64_t seed = Mix(c.seed, 2);
      Generate(DT::F64, DLPG_SUM, seed, c.rank, in.elems(), in.numel());
      DLTensor *ip = in.dl(), *opp = out.dl();
      DLPG_ASSERT_OK(c.api, c.api->allgather(c.group, &ip, &opp, 1, nullptr, nullptr));
      std::vector<uint8_t> want(out.nbytes());
      for (int r = 0; r < c.size; r++)
        Generate(DT::F64, DLPG_SUM, seed, r, want.data() + r * in.nbytes(), in.numel());
      EXPECT_EQ("", Compare(DT::F64, DLPG_SUM, out.elems(), want.data(), out.numel()));
    }
    // 0-d scalar, in place, max.
    {
      HostTensor in(DT::F32, {}, 4, false);
      uint64_t seed = Mix(c.seed, 3);
      Generate(DT::F32, DLPG_MAX, seed, c.rank, in.elems(), 1);
      DLTensor *ip = in.dl();
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ip, nullptr, 1, DLPG_MAX, nullptr, nullptr));
      std::vector<uint8_t> want = ReducedReference(DT::F32, DLPG_MAX, seed, c.size, 1, 0, 1);
      EXPECT_EQ("", Compare(DT::F32, DLPG_MAX, in.elems(), want.data(), 1)) << "0-d scalar";
    }
    // kDLCUDAHost memory goes to the CPU path too (dlpg.h "Tensors").
    {
      HostTensor in(DT::I64, {257}, 0, false, kDLCUDAHost);
      uint64_t seed = Mix(c.seed, 4);
      Generate(DT::I64, DLPG_SUM, seed, c.rank, in.elems(), in.numel());
      DLTensor *ip = in.dl();
      dlpg_status_t s = c.api->allreduce(c.group, &ip, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      EXPECT_EQ(s, DLPG_OK) << "kDLCUDAHost allreduce: " << c.api->last_error();
      if (s == DLPG_OK) {
        std::vector<uint8_t> want =
            ReducedReference(DT::I64, DLPG_SUM, seed, c.size, in.numel(), 0, in.numel());
        EXPECT_EQ("", Compare(DT::I64, DLPG_SUM, in.elems(), want.data(), in.numel()));
      }
    }
  });
}

// Several operations in flight with work handles, waited out of order and polled.
TEST_P(Collectives, AsyncWork) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int kOps = 5;
    const size_t n = 4099;
    std::vector<HostTensor> ins;
    std::vector<dlpg_work_t *> works(kOps, nullptr);
    std::vector<dlpg_reduce_op_t> ops = {DLPG_SUM, DLPG_MAX, DLPG_MIN, DLPG_PROD, DLPG_SUM};
    for (int i = 0; i < kOps; i++) {
      ins.emplace_back(DT::F32, std::vector<int64_t>{static_cast<int64_t>(n)});
      Generate(DT::F32, ops[i], Mix(c.seed, i), c.rank, ins[i].elems(), n);
    }
    for (int i = 0; i < kOps; i++) {
      DLTensor *ip = ins[i].dl();
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ip, nullptr, 1, ops[i], nullptr, &works[i]));
      ASSERT_NE(works[i], nullptr);
    }
    // Poll the first one until done.
    int done = 0;
    double end = NowSeconds() + 60;
    while (!done && NowSeconds() < end) {
      DLPG_ASSERT_OK(c.api, c.api->work_test(works[0], &done));
      if (!done) usleep(1000);
    }
    EXPECT_EQ(done, 1) << "work_test never reported done";
    for (int i = kOps - 1; i >= 0; i--) {
      DLPG_EXPECT_OK(c.api, c.api->work_wait(works[i], 0));
      done = 0;
      DLPG_EXPECT_OK(c.api, c.api->work_test(works[i], &done));
      EXPECT_EQ(done, 1);
      EXPECT_STREQ(c.api->work_error(works[i]), "");
      // Waiting again returns the same status.
      DLPG_EXPECT_OK(c.api, c.api->work_wait(works[i], 1.0));
    }
    for (int i = 0; i < kOps; i++) {
      std::vector<uint8_t> want = ReducedReference(DT::F32, ops[i], Mix(c.seed, i), c.size, n, 0, n);
      EXPECT_EQ("", Compare(DT::F32, ops[i], ins[i].elems(), want.data(), n)) << "async op " << i;
      DLPG_EXPECT_OK(c.api, c.api->work_free(works[i]));
    }
    // Freeing unfinished work does not cancel it: the operation still completes, before
    // the next one on the group.
    {
      HostTensor a(DT::I64, {2049}), b(DT::I64, {3});
      uint64_t sa = Mix(c.seed, 100), sb = Mix(c.seed, 101);
      Generate(DT::I64, DLPG_SUM, sa, c.rank, a.elems(), a.numel());
      Generate(DT::I64, DLPG_MAX, sb, c.rank, b.elems(), b.numel());
      DLTensor *ap = a.dl(), *bp = b.dl();
      dlpg_work_t *wa = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ap, nullptr, 1, DLPG_SUM, nullptr, &wa));
      DLPG_EXPECT_OK(c.api, c.api->work_free(wa));
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &bp, nullptr, 1, DLPG_MAX, nullptr, nullptr));
      DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
      std::vector<uint8_t> want =
          ReducedReference(DT::I64, DLPG_SUM, sa, c.size, a.numel(), 0, a.numel());
      EXPECT_EQ("", Compare(DT::I64, DLPG_SUM, a.elems(), want.data(), a.numel()))
          << "operation whose work was freed before completion";
    }
    // A failed asynchronous operation carries its message: an unsupported pair (the first
    // one the plugin's capability query names; none when it reduces everything) fails at the
    // door (no handle) or in its work, on every rank alike.
    DT udt = DT::F32;
    dlpg_reduce_op_t uop = DLPG_SUM;
    bool found = false;
    for (const DTInfo &i : AllDTypes())
      for (dlpg_reduce_op_t op : AllOps())
        if (!found && c.api->reduce_supported(DLDevice{kDLCPU, 0}, DLType(i.dt), op) ==
                          DLPG_ERR_UNSUPPORTED) {
          udt = i.dt;
          uop = op;
          found = true;
        }
    if (!found) return;
    HostTensor f8(udt, {4});
    DLTensor *fp = f8.dl();
    dlpg_work_t *w = nullptr;
    dlpg_status_t s = c.api->allreduce(c.group, &fp, nullptr, 1, uop, nullptr, &w);
    if (s == DLPG_OK) {
      EXPECT_EQ(c.api->work_wait(w, 0), DLPG_ERR_UNSUPPORTED);
      EXPECT_STRNE(c.api->work_error(w), "");
      c.api->work_free(w);
    } else {
      EXPECT_EQ(s, DLPG_ERR_UNSUPPORTED);
    }
  });
}

// Collectives between dlpg_group_start and dlpg_group_end are issued together (coalesced);
// each result is still its own.
TEST_P(Collectives, BatchedCollectives) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const size_t n = 517;
    HostTensor a(DT::F32, {static_cast<int64_t>(n)}), b(DT::I16, {static_cast<int64_t>(n)});
    HostTensor gi(DT::U8, {static_cast<int64_t>(n)}), go(DT::U8, {static_cast<int64_t>(n * c.size)});
    uint64_t sa = Mix(c.seed, 1), sb = Mix(c.seed, 2), sg = Mix(c.seed, 3);
    Generate(DT::F32, DLPG_SUM, sa, c.rank, a.elems(), n);
    Generate(DT::I16, DLPG_MIN, sb, c.rank, b.elems(), n);
    Generate(DT::U8, DLPG_SUM, sg, c.rank, gi.elems(), n);
    DLTensor *ap = a.dl(), *bp = b.dl(), *gip = gi.dl(), *gop = go.dl();
    dlpg_work_t *w[4] = {};
    DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
    DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ap, nullptr, 1, DLPG_SUM, nullptr, &w[0]));
    DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &bp, nullptr, 1, DLPG_MIN, nullptr, &w[1]));
    DLPG_ASSERT_OK(c.api, c.api->allgather(c.group, &gip, &gop, 1, nullptr, &w[2]));
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, &w[3]));
    DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
    for (auto *wk : w) {
      DLPG_EXPECT_OK(c.api, c.api->work_wait(wk, 0));
      c.api->work_free(wk);
    }
    auto check = [&](DT dt, dlpg_reduce_op_t op, uint64_t seed, const void *got, const char *what) {
      std::vector<uint8_t> want = ReducedReference(dt, op, seed, c.size, n, 0, n);
      EXPECT_EQ("", Compare(dt, op, got, want.data(), n)) << what;
    };
    check(DT::F32, DLPG_SUM, sa, a.elems(), "batched allreduce sum");
    check(DT::I16, DLPG_MIN, sb, b.elems(), "batched allreduce min");
    std::vector<uint8_t> want(n * c.size);
    for (int r = 0; r < c.size; r++) Generate(DT::U8, DLPG_SUM, sg, r, want.data() + r * n, n);
    EXPECT_EQ(0, memcmp(want.data(), go.elems(), want.size())) << "batched allgather";
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::ValuesIn(StandardRankParams()),
                         RankParamName);

// ------------------------------------------------------------------ 64 MiB

// One >= 64 MiB case per large op, 2 ranks as processes.
TEST(CollectivesLarge, Processes2x64MiB) {
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    const size_t n = (64u << 20) / 4;  // float32 elements in 64 MiB
    uint64_t seed = Mix(c.seed, 77);
    {
      HostTensor in(DT::F32, {static_cast<int64_t>(n)}), out(DT::F32, {static_cast<int64_t>(n)});
      Generate(DT::F32, DLPG_SUM, seed, c.rank, in.elems(), n);
      DLTensor *ip = in.dl(), *opp = out.dl();
      double t0 = NowSeconds();
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ip, &opp, 1, DLPG_SUM, nullptr, nullptr));
      double dt = NowSeconds() - t0;
      std::vector<uint8_t> a(n * 4), b(n * 4);
      Generate(DT::F32, DLPG_SUM, seed, 0, a.data(), n);
      Generate(DT::F32, DLPG_SUM, seed, 1, b.data(), n);
      std::vector<const void *> ptrs = {a.data(), b.data()};
      Reduce(DT::F32, DLPG_SUM, ptrs, a.data(), n);
      EXPECT_EQ("", Compare(DT::F32, DLPG_SUM, out.elems(), a.data(), n)) << "allreduce 64 MiB";
      if (c.rank == 0) printf("allreduce float32 64 MiB, 2 ranks: %.3f s\n", dt);
    }
    {
      // allgather: 32 MiB in, 64 MiB out.
      const size_t half = n / 2;
      HostTensor in(DT::U8, {static_cast<int64_t>(half * 4)}), out(DT::U8, {static_cast<int64_t>(n * 4)});
      Generate(DT::U8, DLPG_SUM, seed + 1, c.rank, in.elems(), half * 4);
      DLTensor *ip = in.dl(), *opp = out.dl();
      DLPG_ASSERT_OK(c.api, c.api->allgather(c.group, &ip, &opp, 1, nullptr, nullptr));
      std::vector<uint8_t> want(n * 4);
      Generate(DT::U8, DLPG_SUM, seed + 1, 0, want.data(), half * 4);
      Generate(DT::U8, DLPG_SUM, seed + 1, 1, want.data() + half * 4, half * 4);
      EXPECT_EQ(0, memcmp(want.data(), out.elems(), n * 4)) << "allgather 64 MiB";
    }
    {
      // broadcast 64 MiB from rank 1, in place.
      HostTensor t(DT::F32, {static_cast<int64_t>(n)});
      Generate(DT::F32, DLPG_SUM, seed + 2, c.rank, t.elems(), n);
      DLTensor *tp = t.dl();
      DLPG_ASSERT_OK(c.api, c.api->broadcast(c.group, &tp, nullptr, 1, 1, nullptr, nullptr));
      std::vector<uint8_t> want(n * 4);
      Generate(DT::F32, DLPG_SUM, seed + 2, 1, want.data(), n);
      EXPECT_EQ(0, memcmp(want.data(), t.elems(), n * 4)) << "broadcast 64 MiB";
    }
  });
}

}  // namespace
