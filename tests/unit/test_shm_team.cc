// The helper threads of a rank (plugin/shm/team.h) and the collectives that use them: every
// unit of a job is done exactly once, by whichever thread claims it, job after job (a
// helper still finishing one job must take nothing of the next); a forked child, which has
// no helpers, still finishes its jobs alone; and the large collectives split between
// helpers match the references exactly (the inputs are small multiples of a power of two,
// so float sums are exact too) and bitwise across ranks. 3 ranks of 3 threads each run on
// the 2-core CI machine, so helpers are often descheduled mid-part there. Outputs in pages
// never touched are faulted in before the copies: that must leave every byte around the
// output as it was (the faulting covers whole pages, and the output starts mid-page).
#include "test_shm_util.h"

#include <sys/mman.h>

#include <atomic>
#include <cstring>

extern "C" {
#include "shm/team.h"
}

using namespace shmtest;

namespace {

struct Count {
  std::vector<std::atomic<int>> hits;
  std::atomic<int> calls{0};
  explicit Count(size_t n) : hits(n) {}
};

void CountPart(void *arg, size_t lo, size_t hi) {
  auto *c = static_cast<Count *>(arg);
  c->calls++;
  for (size_t i = lo; i < hi; i++) c->hits[i]++;
}

// Every unit of every job exactly once, for jobs of many sizes back to back.
void ExpectEachOnce(dlpg__shm_team_t *t, int jobs) {
  for (int j = 0; j < jobs; j++) {
    size_t n = 1 + static_cast<size_t>(j) * 7919 % 20011, grain = 1 + j % 97;
    Count c(n);
    dlpg__shm_team_run(t, CountPart, &c, n, grain);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(c.hits[i].load(), 1) << "job " << j << " unit " << i;
    size_t parts = (n + grain - 1) / grain;
    ASSERT_LE(static_cast<size_t>(c.calls.load()), parts) << "job " << j;
  }
}

TEST(ShmTeam, EveryUnitOnceJobAfterJob) {
  EXPECT_EQ(dlpg__shm_team_new(1), nullptr);
  ExpectEachOnce(nullptr, 50);  // no team: the caller alone
  dlpg__shm_team_t *t = dlpg__shm_team_new(4);
  ASSERT_NE(t, nullptr);
  ExpectEachOnce(t, 3000);
  // After the helpers went to sleep: they wake for the next job.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ExpectEachOnce(t, 20);
  Count none(1);
  dlpg__shm_team_run(t, CountPart, &none, 0, 1);
  EXPECT_EQ(none.calls.load(), 0) << "a job of no units ran";
  dlpg__shm_team_free(t);
  dlpg__shm_team_free(nullptr);
}

TEST(ShmTeam, ForkedChildFinishesAlone) {
  dlpg__shm_team_t *t = dlpg__shm_team_new(3);
  ASSERT_NE(t, nullptr);
  ExpectEachOnce(t, 10);
  pid_t p = fork();
  if (p == 0) {
    ExpectEachOnce(t, 10);  // the helpers are not in the child: its jobs must still end
    dlpg__shm_team_free(t);  // and nothing to join there
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  double end = Now() + Scaled(30);
  while (waitpid(p, &status, WNOHANG) == 0 && Now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (Now() >= end) {
    kill(p, SIGKILL);
    waitpid(p, &status, 0);
    ADD_FAILURE() << "the forked child did not finish its jobs";
  } else {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  dlpg__shm_team_free(t);
}

std::vector<uint8_t> Ints(uint64_t seed, int rank, size_t count) {
  std::vector<uint8_t> raw = Bytes(seed, rank, count * 4), v(count * 4);
  for (size_t i = 0; i < count; i++) {
    int32_t x = static_cast<int32_t>(raw[i * 4] | raw[i * 4 + 1] << 8) - 32768;
    memcpy(&v[i * 4], &x, 4);
  }
  return v;
}

std::vector<uint8_t> Floats(uint64_t seed, int rank, size_t count) {
  std::vector<uint8_t> raw = Bytes(seed, rank, count), v(count * 4);
  for (size_t i = 0; i < count; i++) {
    float f = (static_cast<int>(raw[i]) - 128) / 64.0f;
    memcpy(&v[i * 4], &f, 4);
  }
  return v;
}

// Element i of the int32 sum (or the float32 sum, exact for these inputs) over the ranks.
template <class T>
T SumAt(const std::vector<std::vector<uint8_t>> &in, size_t i) {
  T s = 0;
  for (const auto &v : in) {
    T x;
    memcpy(&x, &v[i * 4], 4);
    s = static_cast<T>(s + x);
  }
  return s;
}

template <class T>
void ExpectSums(const std::vector<std::vector<uint8_t>> &in, const uint8_t *got, size_t count,
                const std::string &what, T scale = 1) {
  for (size_t i = 0; i < count; i++) {
    T g;
    memcpy(&g, got + i * 4, 4);
    ASSERT_EQ(g, SumAt<T>(in, i) / scale) << what << " element " << i;
  }
}

// Every large collective with helper threads forced on, slots of 512 KiB (so chunks split
// into several 64 KiB parts), counts that end mid-chunk.
TEST(ShmTeam, LargeCollectivesWithHelpers) {
  Opts o;
  o.name = "team";
  o.slot = 512 << 10;
  o.threads = 3;
  o.deadline = Scaled(120);
  auto codes = RunRanks(3, o, [](Rank &k) {
    for (size_t cnt : {size_t(70001), size_t(3 * 131072 + 17)}) {
      std::string c = std::to_string(cnt);
      std::vector<std::vector<uint8_t>> fi, ii;
      for (int q = 0; q < k.size; q++) fi.push_back(Floats(cnt, q, cnt)), ii.push_back(Ints(cnt + 1, q, cnt));
      std::vector<uint8_t> out(cnt * 4, 0xee);
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, fi[k.rank].data(), out.data(), cnt, DLPG__DT_FLOAT32, DLPG_SUM), DLPG_OK)
          << dlpg_last_error();
      ExpectSums<float>(fi, out.data(), cnt, "allreduce float32 " + c);
      ExpectSameBits(k, "tf/" + c, out);
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, ii[k.rank].data(), out.data(), cnt, DLPG__DT_INT32, DLPG_SUM), DLPG_OK)
          << dlpg_last_error();
      ExpectSums<int32_t>(ii, out.data(), cnt, "allreduce int32 " + c);
      std::vector<uint8_t> io = fi[k.rank];
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, io.data(), io.data(), cnt, DLPG__DT_FLOAT32, DLPG_AVG), DLPG_OK)
          << dlpg_last_error();
      for (size_t i = 0; i < cnt; i++) {
        float g;
        memcpy(&g, &io[i * 4], 4);
        ASSERT_EQ(g, SumAt<float>(fi, i) / 3.0f) << "avg in place element " << i;
      }
      std::vector<uint8_t> red(cnt * 4, 0);
      ASSERT_EQ(dlpg__shm_reduce(k.sh, ii[k.rank].data(), k.rank == 1 ? red.data() : nullptr, cnt,
                                 DLPG__DT_INT32, DLPG_SUM, 1), DLPG_OK) << dlpg_last_error();
      if (k.rank == 1) ExpectSums<int32_t>(ii, red.data(), cnt, "reduce to rank 1 " + c);
      // reduce_scatter: rank q's input is size blocks of cnt / 3.
      size_t per = cnt / 3;
      std::vector<std::vector<uint8_t>> rs_in, block;
      for (int q = 0; q < k.size; q++) rs_in.push_back(Ints(cnt + 2, q, per * 3));
      for (int q = 0; q < k.size; q++)
        block.emplace_back(rs_in[q].begin() + k.rank * per * 4, rs_in[q].begin() + (k.rank + 1) * per * 4);
      std::vector<uint8_t> rs(per * 4);
      ASSERT_EQ(dlpg__shm_reduce_scatter(k.sh, rs_in[k.rank].data(), rs.data(), per, DLPG__DT_INT32, DLPG_SUM),
                DLPG_OK) << dlpg_last_error();
      ExpectSums<int32_t>(block, rs.data(), per, "reduce_scatter " + c);
      // The byte movers.
      size_t nb = cnt * 4;
      std::vector<uint8_t> want = Bytes(cnt + 3, 2, nb), buf = k.rank == 2 ? want : std::vector<uint8_t>(nb, 0);
      ASSERT_EQ(dlpg__shm_broadcast(k.sh, buf.data(), nb, 2), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(buf, want) << "broadcast " << c;
      std::vector<uint8_t> all = AllRanksBytes(cnt + 4, k.size, nb), ag(nb * k.size, 0);
      ASSERT_EQ(dlpg__shm_allgather(k.sh, Bytes(cnt + 4, k.rank, nb).data(), ag.data(), nb), DLPG_OK)
          << dlpg_last_error();
      ASSERT_EQ(ag, all) << "allgather " << c;
      AlltoallCase a2a(cnt * 31, k.rank, k.size, nb);
      std::vector<uint8_t> a2a_out(nb * k.size, 0);
      ASSERT_EQ(dlpg__shm_alltoall(k.sh, a2a.in.data(), a2a_out.data(), nb), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(a2a_out, a2a.want) << "alltoall " << c;
    }
  });
  ExpectAllPass(codes);
}

// Collectives into fresh mappings, the output 100 bytes into its first page and ending
// mid-page, every byte around it a sentinel; prefaulting forced from 1 byte on, with
// helpers and without.
void FreshOutputs(int threads) {
  Opts o;
  o.name = "fresh" + std::to_string(threads);
  o.slot = 256 << 10;
  o.stream = 1;
  o.threads = threads;
  auto codes = RunRanks(3, o, [](Rank &k) {
    const size_t cnt = 300001, nb = cnt * 4, pad = 100;
    struct Fresh {
      uint8_t *map;
      size_t len;
      uint8_t *out;
    };
    auto fresh = [&](size_t bytes) {
      size_t len = (pad + bytes + 4095) / 4096 * 4096 + 4096;
      void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      EXPECT_NE(m, MAP_FAILED);
      auto *p = static_cast<uint8_t *>(m);
      memset(p, 0x5a, pad);  // the head of the first page
      size_t end = pad + bytes, tail = (end + 4095) / 4096 * 4096;
      memset(p + end, 0x77, tail - end);  // the rest of the last page; the pages between stay untouched
      return Fresh{p, len, p + pad};
    };
    auto check_around = [&](const Fresh &f, size_t bytes, const std::string &what) {
      for (size_t i = 0; i < pad; i++) ASSERT_EQ(f.map[i], 0x5a) << what << ": byte " << i << " before the output";
      size_t end = pad + bytes, tail = (end + 4095) / 4096 * 4096;
      for (size_t i = end; i < f.len; i++)
        ASSERT_EQ(f.map[i], i < tail ? 0x77 : 0) << what << ": byte " << i - end << " after the output";
      munmap(f.map, f.len);
    };
    std::vector<std::vector<uint8_t>> in;
    for (int q = 0; q < k.size; q++) in.push_back(Floats(cnt + 9, q, cnt));
    Fresh ar = fresh(nb);
    ASSERT_EQ(dlpg__shm_allreduce(k.sh, in[k.rank].data(), ar.out, cnt, DLPG__DT_FLOAT32, DLPG_SUM), DLPG_OK)
        << dlpg_last_error();
    ExpectSums<float>(in, ar.out, cnt, "allreduce into fresh pages");
    check_around(ar, nb, "allreduce");
    Fresh ag = fresh(nb * k.size);
    ASSERT_EQ(dlpg__shm_allgather(k.sh, in[k.rank].data(), ag.out, nb), DLPG_OK) << dlpg_last_error();
    for (int q = 0; q < k.size; q++) ASSERT_EQ(memcmp(ag.out + q * nb, in[q].data(), nb), 0) << "allgather block " << q;
    check_around(ag, nb * k.size, "allgather");
    Fresh bc = fresh(nb);
    if (k.rank == 1) memcpy(bc.out, in[1].data(), nb);
    ASSERT_EQ(dlpg__shm_broadcast(k.sh, bc.out, nb, 1), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(memcmp(bc.out, in[1].data(), nb), 0) << "broadcast";
    check_around(bc, nb, "broadcast");
    std::vector<uint8_t> a2a_in;
    for (int j = 0; j < k.size; j++) a2a_in.insert(a2a_in.end(), in[k.rank].begin(), in[k.rank].end());
    Fresh a2a = fresh(nb * k.size);
    ASSERT_EQ(dlpg__shm_alltoall(k.sh, a2a_in.data(), a2a.out, nb), DLPG_OK) << dlpg_last_error();
    for (int q = 0; q < k.size; q++) ASSERT_EQ(memcmp(a2a.out + q * nb, in[q].data(), nb), 0) << "alltoall block " << q;
    check_around(a2a, nb * k.size, "alltoall");
  });
  ExpectAllPass(codes);
}

TEST(ShmTeam, FreshOutputsAlone) { FreshOutputs(1); }
TEST(ShmTeam, FreshOutputsWithHelpers) { FreshOutputs(3); }

}  // namespace
