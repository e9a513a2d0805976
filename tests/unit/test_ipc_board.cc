// The agreement of the CUDA IPC path's in-place collectives (plugin/nccl/ipc_board.c): ranks
// as threads, each with its own boards in shared memory, as the processes have. Punctual
// ranks that can all read in place do; a rank that cannot export, or comes after the others
// stopped waiting, makes every rank run staged; over a long random schedule of late ranks,
// unexportable tensors and failed mappings every rank decides the same for every operation;
// a rank that offered and never voted is named at the timeout, and abort ends the wait.
// No CUDA: the boards carry the handles as bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "nccl/ipc_board.h"

namespace {

struct Rank {
  dlpg__ipc_boards_t b{};
  volatile int abort = 0;
};

using Ranks = std::vector<std::unique_ptr<Rank>>;

Ranks Make(int world, double timeout_s) {
  Ranks rs;
  for (int r = 0; r < world; r++) {
    rs.push_back(std::make_unique<Rank>());
    dlpg__ipc_boards_t &b = rs.back()->b;
    b.rank = r;
    b.size = world;
    b.group = "board_test";
    b.timeout_s = timeout_s;
    b.abort = &rs.back()->abort;
    EXPECT_EQ(dlpg__ipc_board_create("test", &b), DLPG_OK) << dlpg__last_error();
  }
  std::vector<std::string> names;
  for (auto &r : rs) names.push_back(r->b.name);
  for (auto &r : rs)
    for (int q = 0; q < world; q++)
      if (q != r->b.rank) {
        EXPECT_EQ(dlpg__ipc_board_join("test", &r->b, q, names[(size_t)q].c_str()), DLPG_OK)
            << dlpg__last_error();
      }
  return rs;
}

void Free(Ranks &rs) {
  for (auto &r : rs) dlpg__ipc_board_free(&r->b);
}

struct Decision {
  int met = 0, who = -1, why = -1, direct = -1;
  dlpg_status_t st = DLPG_OK;
  std::string msg;  // the error's message (dlpg__last_error is the thread's)
};

// One rank's part of operation n: offer (cap), meet, vote (commit unless map_fails).
Decision Step(Rank &r, unsigned long long n, int cap, bool map_fails, double window_s) {
  Decision d;
  dlpg__ipc_offer_t mine{}, theirs[DLPG__IPC_BOARD_RANKS]{};
  mine.cap = cap;
  mine.part[0].id = n * 100 + (unsigned long long)r.b.rank;
  d.met = dlpg__ipc_board_meet(&r.b, n, &mine, theirs, window_s, &d.who, &d.why);
  if (d.met)
    for (int q = 0; q < r.b.size; q++)
      if (q != r.b.rank) {
        EXPECT_EQ(theirs[q].part[0].id, n * 100 + (unsigned long long)q) << "op " << n;
      }
  int silent = -1;
  d.st = dlpg__ipc_board_vote("test", &r.b, n, d.met && !map_fails, &d.direct, &silent);
  if (d.st != DLPG_OK) d.who = silent, d.msg = dlpg__last_error();
  return d;
}

// Every rank runs fn(rank) on its own thread.
void Together(Ranks &rs, const std::function<void(Rank &)> &fn) {
  std::vector<std::thread> ts;
  for (auto &r : rs) ts.emplace_back([&fn, &r] { fn(*r); });
  for (auto &t : ts) t.join();
}

TEST(IpcBoard, PunctualRanksReadInPlace) {
  Ranks rs = Make(3, 30);
  std::vector<std::vector<Decision>> got(3);
  Together(rs, [&](Rank &r) {
    for (unsigned long long n = 1; n <= 40; n++) got[(size_t)r.b.rank].push_back(Step(r, n, 1, false, 30));
  });
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < got[(size_t)k].size(); i++) {
      EXPECT_EQ(got[(size_t)k][i].met, 1) << "rank " << k << " op " << i + 1;
      EXPECT_EQ(got[(size_t)k][i].direct, 1) << "rank " << k << " op " << i + 1;
    }
  Free(rs);
}

TEST(IpcBoard, OneRankCannotExportSoAllRunStaged) {
  Ranks rs = Make(3, 30);
  std::vector<Decision> got(3);
  Together(rs, [&](Rank &r) { got[(size_t)r.b.rank] = Step(r, 1, r.b.rank != 2, false, 30); });
  // Rank 2 knows why; a peer says so too, or that a peer that knew ran it staged.
  for (int k = 0; k < 3; k++) {
    EXPECT_EQ(got[(size_t)k].direct, 0) << "rank " << k;
    if (got[(size_t)k].why == DLPG__MEET_CANNOT) EXPECT_EQ(got[(size_t)k].who, 2) << "rank " << k;
    else EXPECT_EQ(got[(size_t)k].why, DLPG__MEET_STAGED) << "rank " << k;
  }
  EXPECT_EQ(got[2].why, DLPG__MEET_CANNOT);
  // The next operation, every rank able: in place.
  Together(rs, [&](Rank &r) { got[(size_t)r.b.rank] = Step(r, 2, 1, false, 30); });
  for (int k = 0; k < 3; k++) EXPECT_EQ(got[(size_t)k].direct, 1) << "rank " << k;
  Free(rs);
}

// Rank 1 comes long after the others stopped waiting (they run it staged); rank 1 finds
// their votes and runs it staged too, without waiting.
TEST(IpcBoard, LateRankFindsTheOthersRanStaged) {
  Ranks rs = Make(3, 30);
  std::vector<Decision> got(3);
  std::atomic<int> others_done{0};
  Together(rs, [&](Rank &r) {
    if (r.b.rank == 1)
      while (others_done.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    got[(size_t)r.b.rank] = Step(r, 1, 1, false, 0.005);
    if (r.b.rank != 1) others_done++;
  });
  // The first of ranks 0 and 2 to stop waiting names rank 1; the other may find its vote.
  bool named = (got[0].why == DLPG__MEET_LATE && got[0].who == 1) ||
               (got[2].why == DLPG__MEET_LATE && got[2].who == 1);
  EXPECT_TRUE(named) << "rank 0: why " << got[0].why << " who " << got[0].who << "; rank 2: why "
                     << got[2].why << " who " << got[2].who;
  EXPECT_EQ(got[1].why, DLPG__MEET_STAGED);
  for (int k = 0; k < 3; k++) EXPECT_EQ(got[(size_t)k].direct, 0) << "rank " << k;
  Together(rs, [&](Rank &r) { got[(size_t)r.b.rank] = Step(r, 2, 1, false, 30); });
  for (int k = 0; k < 3; k++) EXPECT_EQ(got[(size_t)k].direct, 1) << "rank " << k;
  Free(rs);
}

// The property that matters: whatever the schedule, every rank decides the same for every
// operation (a rank reading in place while a peer ran staged would read garbage or hang).
// Late ranks (so the others' windows close), tensors that cannot be exported and mappings
// that fail, at random, over more operations than the boards' ring has slots.
TEST(IpcBoard, EveryRankDecidesAlikeOnARandomSchedule) {
  const int world = 3, ops = 1500;
  Ranks rs = Make(world, 30);
  std::vector<std::vector<Decision>> got(world);
  Together(rs, [&](Rank &r) {
    std::mt19937 gen(1234u + (unsigned)r.b.rank);
    std::uniform_real_distribution<double> u(0, 1);
    for (unsigned long long n = 1; n <= (unsigned long long)ops; n++) {
      double x = u(gen);
      if (x < 0.02) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      else if (x < 0.10) std::this_thread::yield();
      Decision d = Step(r, n, u(gen) > 0.02, u(gen) < 0.02, 0.010);
      got[(size_t)r.b.rank].push_back(d);
    }
  });
  int direct = 0, staged = 0;
  for (int i = 0; i < ops; i++) {
    for (int k = 0; k < world; k++) {
      ASSERT_EQ(got[(size_t)k][(size_t)i].st, DLPG_OK) << "rank " << k << " op " << i + 1;
      ASSERT_EQ(got[(size_t)k][(size_t)i].direct, got[0][(size_t)i].direct)
          << "op " << i + 1 << ": rank " << k << " and rank 0 disagree";
    }
    (got[0][(size_t)i].direct ? direct : staged)++;
  }
  // Unexportable tensors and failed mappings come about 1 op in 12: both outcomes occur.
  EXPECT_GT(staged, 0);
  EXPECT_GT(direct, 0);
  std::cout << "[ board    ] " << direct << " ops in place, " << staged << " staged of " << ops << "\n";
  Free(rs);
}

// Rank r offers for operation 1, able, and does not vote.
void OfferOnly(Rank &r) {
  dlpg__ipc_offer_t mine{}, theirs[DLPG__IPC_BOARD_RANKS]{};
  mine.cap = 1;
  mine.part[0].id = 100 + (unsigned long long)r.b.rank;
  int who = -1, why = -1;
  dlpg__ipc_board_meet(&r.b, 1, &mine, theirs, 30, &who, &why);
}

// Rank 1 offers and then never votes (its process died): rank 0, committed, fails with
// TIMEOUT naming rank 1 at the timeout.
TEST(IpcBoard, SilentRankIsNamedAtTheTimeout) {
  Ranks rs = Make(2, 0.3);
  Decision d0;
  Together(rs, [&](Rank &r) {
    if (r.b.rank == 1) {
      OfferOnly(r);
      return;  // and never votes
    }
    d0 = Step(r, 1, 1, false, 30);
  });
  EXPECT_EQ(d0.st, DLPG_ERR_TIMEOUT);
  EXPECT_EQ(d0.who, 1);
  EXPECT_NE(d0.msg.find("rank 1 offered"), std::string::npos) << d0.msg;
  Free(rs);
}

TEST(IpcBoard, AbortEndsTheWaitForVotes) {
  Ranks rs = Make(2, 60);
  Decision d0;
  Together(rs, [&](Rank &r) {
    if (r.b.rank == 1) {
      OfferOnly(r);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      rs[0]->abort = 1;
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    d0 = Step(r, 1, 1, false, 30);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
  });
  EXPECT_EQ(d0.st, DLPG_ERR_ABORTED);
  Free(rs);
}

}  // namespace
