// The shm engine's collectives in two halves (dlpg__shm_start / dlpg__shm_finish, the eager
// path of asynchronous ops): started and finished by polling on some ranks while the others
// run the same collective whole, on random integer data against references; a mismatch
// between a started and a whole call fails both alike and leaves the handle usable; what
// would not fit (or would have to wait) is declined untouched; an abort wakes a finish that
// waits for a peer that never comes, and the peer then fails naming this rank.
#include "test_shm_util.h"

using namespace shmtest;

namespace {

int64_t I64(const std::vector<uint8_t> &b, size_t i) {
  int64_t v;
  memcpy(&v, &b[i * 8], 8);
  return v % 1000003;  // sums of a few stay far from overflow
}
std::vector<uint8_t> I64s(uint64_t seed, int rank, size_t n) {
  std::vector<uint8_t> raw = Bytes(seed, rank, n * 8), v(n * 8);
  for (size_t i = 0; i < n; i++) {
    int64_t x = I64(raw, i);
    memcpy(&v[i * 8], &x, 8);
  }
  return v;
}

// Run c started (then finished by polling) or whole.
dlpg_status_t RunCall(dlpg__shm_t *sh, const dlpg__shm_call_t &c, bool started_path) {
  if (!started_path) {
    switch (c.kind) {
      case DLPG__OP_ALLREDUCE:
        return dlpg__shm_allreduce(sh, c.in, c.out, c.count, c.dtype, c.rop);
      case DLPG__OP_REDUCE:
        return dlpg__shm_reduce(sh, c.in, c.out, c.count, c.dtype, c.rop, c.root);
      case DLPG__OP_BROADCAST:
        if (dlpg__shm_rank(sh) == c.root && c.count) memcpy(c.out, c.in, c.count);
        return dlpg__shm_broadcast(sh, c.out, c.count, c.root);
      case DLPG__OP_ALLGATHER: return dlpg__shm_allgather(sh, c.in, c.out, c.count);
      case DLPG__OP_REDUCE_SCATTER:
        return dlpg__shm_reduce_scatter(sh, c.in, c.out, c.count, c.dtype, c.rop);
      case DLPG__OP_ALLTOALL: return dlpg__shm_alltoall(sh, c.in, c.out, c.count);
      default: return dlpg__shm_barrier(sh);
    }
  }
  int started = 0;
  dlpg_status_t st = dlpg__shm_start(sh, &c, &started);
  EXPECT_EQ(st, DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(started, 1) << "a small collective after a finished one must start at once";
  if (!started) return DLPG_ERR_INTERNAL;
  EXPECT_TRUE(dlpg__shm_pending(sh));
  int again = 1;
  EXPECT_EQ(dlpg__shm_start(sh, &c, &again), DLPG_OK);
  EXPECT_EQ(again, 0) << "a second start while one is pending must be declined";
  int done = 0;
  double end = Now() + Scaled(20);
  while (!done && st == DLPG_OK && Now() < end) st = dlpg__shm_finish(sh, 0, &done);
  EXPECT_TRUE(done) << "the started collective never finished";
  EXPECT_FALSE(dlpg__shm_pending(sh));
  return st;
}

TEST(ShmEager, StartedAndWholeMixOnEveryKind) {
  const int size = 3;
  ExpectAllPass(RunRanks(size, Opts{}, [&](Rank &rk) {
    const size_t n = 37;
    for (int i = 0; i < 28; i++) {
      uint64_t seed = 1000 + i;
      bool started = (rk.rank + i) % 2 == 0;
      int kind = i % 7, root = i % size;
      std::vector<uint8_t> in, out, want;
      dlpg__shm_call_t c{};
      c.dtype = DLPG__DT_INT64;
      c.rop = DLPG_SUM;
      c.root = root;
      auto all = [&](size_t m) {
        std::vector<std::vector<uint8_t>> v;
        for (int r = 0; r < size; r++) v.push_back(I64s(seed, r, m));
        return v;
      };
      switch (kind) {
        case 0:
        case 1: {  // allreduce sum, reduce sum at root
          auto a = all(n);
          in = a[rk.rank];
          out.assign(n * 8, 0x5A);
          want.assign(n * 8, 0);
          for (size_t e = 0; e < n; e++) {
            int64_t s = 0;
            for (int r = 0; r < size; r++) s += I64(a[r], e);
            memcpy(&want[e * 8], &s, 8);
          }
          c.kind = kind == 0 ? DLPG__OP_ALLREDUCE : DLPG__OP_REDUCE;
          c.count = n;
          if (kind == 1 && rk.rank != root) want = out;
          break;
        }
        case 2: {  // broadcast bytes
          in = Bytes(seed, rk.rank, n);
          out.assign(n, 0x5A);
          want = Bytes(seed, root, n);
          c.kind = DLPG__OP_BROADCAST;
          c.count = n;
          break;
        }
        case 3: {  // allgather bytes
          in = Bytes(seed, rk.rank, n);
          out.assign(n * size, 0x5A);
          for (int r = 0; r < size; r++) {
            auto b = Bytes(seed, r, n);
            want.insert(want.end(), b.begin(), b.end());
          }
          c.kind = DLPG__OP_ALLGATHER;
          c.count = n;
          break;
        }
        case 4: {  // reduce_scatter sum: block rank of every rank's input
          auto a = all(n * size);
          in = a[rk.rank];
          out.assign(n * 8, 0x5A);
          want.assign(n * 8, 0);
          for (size_t e = 0; e < n; e++) {
            int64_t s = 0;
            for (int r = 0; r < size; r++) s += I64(a[r], rk.rank * n + e);
            memcpy(&want[e * 8], &s, 8);
          }
          c.kind = DLPG__OP_REDUCE_SCATTER;
          c.count = n;
          break;
        }
        case 5: {  // alltoall bytes
          in = Bytes(seed, rk.rank, n * size);
          out.assign(n * size, 0x5A);
          for (int r = 0; r < size; r++) {
            auto b = Bytes(seed, r, n * size);
            want.insert(want.end(), b.begin() + rk.rank * n, b.begin() + (rk.rank + 1) * n);
          }
          c.kind = DLPG__OP_ALLTOALL;
          c.count = n;
          break;
        }
        default:
          c.kind = DLPG__OP_BARRIER;
          break;
      }
      c.in = in.data();
      c.out = out.data();
      if (c.kind == DLPG__OP_REDUCE && rk.rank != root) c.out = nullptr;
      dlpg_status_t st = RunCall(rk.sh, c, started);
      ASSERT_EQ(st, DLPG_OK) << "op " << i << " kind " << kind << " started " << started << ": "
                             << dlpg_last_error();
      EXPECT_EQ(out, want) << "op " << i << " kind " << kind << " rank " << rk.rank
                           << (started ? " (started)" : " (whole)");
    }
    // What does not fit one step within the eager bytes is declined untouched.
    std::vector<uint8_t> big(128 << 10), bigout(128 << 10);
    dlpg__shm_call_t c{DLPG__OP_ALLREDUCE, big.data(), bigout.data(), big.size() / 8,
                       DLPG__DT_INT64, DLPG_SUM, 0};
    int started = 1;
    EXPECT_EQ(dlpg__shm_start(rk.sh, &c, &started), DLPG_OK);
    EXPECT_EQ(started, 0);
    EXPECT_FALSE(dlpg__shm_pending(rk.sh));
    EXPECT_EQ(dlpg__shm_barrier(rk.sh), DLPG_OK) << dlpg_last_error();
  }));
}

// Rank 0 starts an allreduce of 5 elements, rank 1 runs one of 6 whole: both fail with
// INVALID_ARGUMENT naming both counts, and the next (matching, started on both) succeeds.
TEST(ShmEager, MismatchBetweenStartedAndWholeFailsAlike) {
  ExpectAllPass(RunRanks(2, Opts{}, [&](Rank &rk) {
    std::vector<int64_t> in(6, rk.rank + 1), out(6, 0);
    dlpg__shm_call_t c{DLPG__OP_ALLREDUCE, in.data(), out.data(), 5, DLPG__DT_INT64, DLPG_SUM, 0};
    dlpg_status_t st = rk.rank == 0 ? RunCall(rk.sh, c, true)
                                    : dlpg__shm_allreduce(rk.sh, in.data(), out.data(), 6,
                                                          DLPG__DT_INT64, DLPG_SUM);
    std::string msg = dlpg_last_error();
    EXPECT_EQ(st, DLPG_ERR_INVALID_ARGUMENT) << msg;
    EXPECT_NE(msg.find("count 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("count 6"), std::string::npos) << msg;
    c.count = 3;
    EXPECT_EQ(RunCall(rk.sh, c, true), DLPG_OK) << dlpg_last_error();
    for (int e = 0; e < 3; e++) EXPECT_EQ(out[e], 3) << e;
  }));
}

// A finish waiting for a peer that never posts wakes on an abort from another thread; the
// peer, arriving later, fails at once naming this rank.
TEST(ShmEager, AbortWakesAWaitingFinish) {
  ExpectAllPass(RunRanks(2, Opts{}, [&](Rank &rk) {
    std::vector<int64_t> in(4, 1), out(4, 0);
    dlpg__shm_call_t c{DLPG__OP_ALLREDUCE, in.data(), out.data(), 4, DLPG__DT_INT64, DLPG_SUM, 0};
    if (rk.rank == 0) {
      int started = 0;
      ASSERT_EQ(dlpg__shm_start(rk.sh, &c, &started), DLPG_OK);
      ASSERT_EQ(started, 1);
      std::thread ab([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        dlpg__shm_abort(rk.sh);
      });
      double t0 = Now();
      int done = 0;
      dlpg_status_t st = dlpg__shm_finish(rk.sh, Scaled(10), &done);
      ab.join();
      EXPECT_EQ(done, 1);
      EXPECT_EQ(st, DLPG_ERR_ABORTED) << dlpg_last_error();
      EXPECT_LT(Now() - t0, Scaled(2));
      EXPECT_EQ(dlpg_store_set(rk.store, "eager/r0", "1", 1), DLPG_OK);
    } else {
      const char *k = "eager/r0";
      ASSERT_EQ(dlpg_store_wait(rk.store, &k, 1, Scaled(30)), DLPG_OK) << dlpg_last_error();
      double t0 = Now();
      dlpg_status_t st = dlpg__shm_allreduce(rk.sh, in.data(), out.data(), 4, DLPG__DT_INT64,
                                             DLPG_SUM);
      std::string msg = dlpg_last_error();
      EXPECT_EQ(st, DLPG_ERR_REMOTE) << msg;
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
      EXPECT_LT(Now() - t0, Scaled(5));
    }
  }));
}

}  // namespace
