// Failure propagation: a rank whose operation fails records that in the
// store, and peers blocked in the group's operations end within about a second with
// DLPG_ERR_REMOTE naming that rank and its message, not after the group's timeout (20 s
// here). Covered: a call only one rank rejects at the door, an abort on one rank, a rank
// whose wait times out (its message says which rank had not reached which sequence number),
// the group being unusable afterwards while a new group of the same name works.
#include <unistd.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <thread>

#include "harness.h"

using namespace dlpgt;

namespace {

constexpr double kGroupTimeout = 20;
// What "within about a second" is allowed on a loaded 2-core CI machine.
constexpr double kPropagateMax = 4.0;

dlpg_group_t *Group(RankCtx &c, const std::string &name, double timeout_s = kGroupTimeout) {
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout_s;
  o.name = name.c_str();
  dlpg_group_t *g = nullptr;
  dlpg_status_t s = c.api->group_create(c.store, c.rank, c.size, &o, &g);
  EXPECT_EQ(s, DLPG_OK) << c.api->last_error();
  return g;
}


// Allreduce-sum of random int32 data, checked against the reference.
void CheckedAllreduce(RankCtx &c, dlpg_group_t *g, uint64_t seed) {
  const size_t n = 517;
  HostTensor t(DT::I32, {static_cast<int64_t>(n)});
  Generate(DT::I32, DLPG_SUM, seed, c.rank, t.elems(), n);
  DLTensor *tp = t.dl();
  dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  ASSERT_EQ(s, DLPG_OK) << c.api->last_error();
  std::vector<std::vector<uint8_t>> all(c.size, std::vector<uint8_t>(n * 4));
  std::vector<const void *> ptrs;
  for (int r = 0; r < c.size; r++) {
    Generate(DT::I32, DLPG_SUM, seed, r, all[r].data(), n);
    ptrs.push_back(all[r].data());
  }
  std::vector<uint8_t> want(n * 4);
  Reduce(DT::I32, DLPG_SUM, ptrs, want.data(), n);
  EXPECT_EQ("", Compare(DT::I32, DLPG_SUM, t.elems(), want.data(), n));
}

// An allreduce of random float32 data expected to fail with REMOTE naming rank `culprit`
// and each of `names` (the failed call, argument or value), within kPropagateMax seconds.
// (dlpg's own sentences are checked in tests/unit/test_wording.cc.)
void ExpectRemote(RankCtx &c, dlpg_group_t *g, int culprit,
                  std::initializer_list<const char *> names, uint64_t seed) {
  HostTensor t(DT::F32, {1000});
  Generate(DT::F32, DLPG_SUM, seed, c.rank, t.elems(), 1000);
  DLTensor *tp = t.dl();
  double t0 = NowSeconds();
  dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  double el = NowSeconds() - t0;
  std::string msg = c.api->last_error();
  EXPECT_EQ(s, DLPG_ERR_REMOTE) << "rank " << c.rank << ": " << c.api->status_name(s) << ": " << msg;
  EXPECT_LT(el, Scaled(kPropagateMax)) << "rank " << c.rank << " took " << el << " s (group timeout "
                               << kGroupTimeout << " s): " << msg;
  EXPECT_NE(msg.find("rank " + std::to_string(culprit)), std::string::npos) << msg;
  for (const char *n : names)
    EXPECT_NE(msg.find(n), std::string::npos) << "rank " << c.rank << ": " << msg;
}

// After the failure: a further operation fails at once naming the cause.
void ExpectFailsFast(RankCtx &c, dlpg_group_t *g, int culprit) {
  double t0 = NowSeconds();
  dlpg_status_t s = c.api->barrier(g, nullptr);
  std::string msg = c.api->last_error();
  EXPECT_EQ(s, DLPG_ERR_REMOTE) << "rank " << c.rank << ": " << c.api->status_name(s) << ": " << msg;
  EXPECT_LT(NowSeconds() - t0, Scaled(3.0));
  EXPECT_NE(msg.find("rank " + std::to_string(culprit)), std::string::npos) << msg;
}

// Three ranks, each with its own group of the run's name (20 s timeout) that has completed a
// barrier (coll_seq 1) before body runs; then every rank meets and destroys its group.
void RunThree(Mode mode, const std::function<void(RankCtx &, dlpg_group_t *)> &body) {
  RunOptions ro;
  ro.create_group = false;
  ro.deadline_s = 90;
  RunRanks(mode, 3, [&](RankCtx &c) {
    dlpg_group_t *g = Group(c, c.name);
    ASSERT_NE(g, nullptr);
    dlpg_status_t s = c.api->barrier(g, nullptr);
    EXPECT_EQ(s, DLPG_OK) << c.api->last_error();
    if (s == DLPG_OK) body(c, g);
    Meet(c, "end");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
  }, ro);
}

class Propagation : public ::testing::TestWithParam<Mode> {};

// Rank 1 passes an output one element short to an allreduce ranks 0 and 2 entered: core
// rejects it on rank 1 before any exchange; ranks 0 and 2 fail with REMOTE quoting it.
TEST_P(Propagation, ArgumentRejectedOnOneRank) {
  RunThree(GetParam(), [&](RankCtx &c, dlpg_group_t *g) {  // the allreduce: coll_seq 2
    if (c.rank == 1) {
      usleep(300000);  // the others are inside their allreduce
      HostTensor in(DT::F32, {1000}), out(DT::F32, {999});
      DLTensor *ip = in.dl(), *op = out.dl();
      dlpg_status_t s = c.api->allreduce(g, &ip, &op, 1, DLPG_SUM, nullptr, nullptr);
      EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << c.api->last_error();
      // This rank's group learns it too, at its next operation. (Issued at once, that
      // operation would meet the peers' allreduce: a mismatch every rank reports.)
      Meet(c, "failed");
      double t0 = NowSeconds();
      s = c.api->barrier(g, nullptr);
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << c.api->last_error();
      EXPECT_LT(NowSeconds() - t0, Scaled(kPropagateMax));
      EXPECT_NE(std::string(c.api->last_error()).find("rank 1"), std::string::npos)
          << c.api->last_error();
    } else {
      ExpectRemote(c, g, 1, {"outputs[0]", "999"}, c.seed);
      ExpectFailsFast(c, g, 1);
      Meet(c, "failed");
    }
  });
}

// Rank 1 aborts its group while ranks 0 and 2 wait in an allreduce it never joins.
TEST_P(Propagation, AbortOnOneRank) {
  RunThree(GetParam(), [&](RankCtx &c, dlpg_group_t *g) {
    if (c.rank == 1) {
      usleep(300000);
      DLPG_EXPECT_OK(c.api, c.api->group_abort(g));
      dlpg_status_t s = c.api->barrier(g, nullptr);
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s);  // its own abort: not remote
    } else {
      ExpectRemote(c, g, 1, {"dlpg_group_abort"}, c.seed);
      ExpectFailsFast(c, g, 1);
    }
  });
}

// Point-to-point: rank 1 rejects its send to rank 0 (a negative tag), while rank 0 waits in
// the matching receive; rank 2 takes no part. Rank 0 fails with REMOTE quoting rank 1.
TEST_P(Propagation, SendRejectedWhilePeerReceives) {
  RunThree(GetParam(), [&](RankCtx &c, dlpg_group_t *g) {
    HostTensor t(DT::I64, {33});
    Generate(DT::I64, DLPG_SUM, c.seed, c.rank, t.elems(), 33);
    if (c.rank == 1) {
      usleep(300000);
      dlpg_status_t s = c.api->send(g, t.dl(), 0, -5, nullptr, nullptr);
      EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << c.api->last_error();
    } else if (c.rank == 0) {
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->recv(g, t.dl(), 1, 7, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << msg;
      EXPECT_LT(NowSeconds() - t0, Scaled(kPropagateMax)) << msg;
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("dlpg_send"), std::string::npos) << msg;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, Propagation, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode> &i) { return ModeName(i.param); });

// Rank 1 waits 1.5 s for an allreduce that rank 2 joins only after rank 1 has timed out:
// rank 1's message says rank 2 had not reached that sequence number; rank 0 (20 s timeout) fails with
// REMOTE naming rank 1 soon after; rank 2, arriving late, fails at once the same way.
TEST(PropagationTimeout, TimeoutOnOneRankNamesTheLateRank) {
  RunThree(Mode::kProcesses, [&](RankCtx &c, dlpg_group_t *g) {  // the allreduce: coll_seq 2
    HostTensor t(DT::F64, {256});
    Generate(DT::F64, DLPG_SUM, c.seed, c.rank, t.elems(), 256);
    DLTensor *tp = t.dl();
    if (c.rank == 1) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->work_wait(w, 1.5);
      double el = NowSeconds() - t0;
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << msg;
      EXPECT_GE(el, 1.4);
      EXPECT_LT(el, Scaled(5.0));
      EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;  // the rank that had not reached it
      c.api->work_wait(w, 10);
      c.api->work_free(w);
      std::string k = c.name + "/r1timedout";
      c.api->store_set(c.store, k.c_str(), "1", 1);
      // The flight recorder shows the operation failed.
      char buf[8192];
      size_t len = 0;
      DLPG_EXPECT_OK(c.api, c.api->group_flight_record(g, buf, sizeof buf, &len));
      EXPECT_NE(std::string(buf).find("coll_seq=2 op=dlpg_allreduce"), std::string::npos) << buf;
      EXPECT_NE(std::string(buf).find("state=failed"), std::string::npos) << buf;
    } else if (c.rank == 0) {
      ExpectRemote(c, g, 1, {"1.5"}, c.seed);
      ExpectFailsFast(c, g, 1);
    } else {
      // Late: after rank 1 has timed out (a condition, not a fixed pause it could outlast).
      std::string k = c.name + "/r1timedout";
      const char *kp = k.c_str();
      DLPG_EXPECT_OK(c.api, c.api->store_wait(c.store, &kp, 1, Scaled(60)));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << msg;
      EXPECT_LT(NowSeconds() - t0, Scaled(kPropagateMax));
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    }
  });
}

// The group's own deadline (2 s, reached inside the operation with work == NULL): the
// TIMEOUT message says rank 1 had not reached the allreduce; rank 1 then fails fast.
TEST(PropagationTimeout, GroupDeadlineNamesTheMissingRank) {
  RunOptions ro;
  ro.group_timeout_s = 2;
  ro.deadline_s = 60;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // coll_seq 1
    HostTensor t(DT::U8, {99});
    Generate(DT::U8, DLPG_SUM, c.seed, c.rank, t.elems(), 99);
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << msg;
      EXPECT_LT(NowSeconds() - t0, Scaled(6.0));
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;  // the rank that had not reached it
    }
    Meet(c, "timedout");
    if (c.rank == 1) {
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << msg;
      EXPECT_LT(NowSeconds() - t0, Scaled(kPropagateMax));
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    }
    Meet(c, "end");
  }, ro);
}

// The group's first collective, which rank 1 never calls (2 s deadline). On Gloo the
// first collective also connects the group's mesh, which rank 1 never joins: rank 0's
// message names rank 1 and does not both say it did not join and that whether it reached the
// collective is unknown. Rank 1 then fails fast naming rank 0's timeout.
TEST(PropagationTimeout, FirstCollectiveMissingRankNamedOnce) {
  RunOptions ro;
  ro.group_timeout_s = 2;
  ro.deadline_s = 60;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    HostTensor t(DT::F32, {64});
    Generate(DT::F32, DLPG_SUM, c.seed, c.rank, t.elems(), 64);
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      printf("rank 0 %s after %.3f s: %s\n", c.api->status_name(s), NowSeconds() - t0,
             msg.c_str());
      EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << msg;
      EXPECT_LT(NowSeconds() - t0, Scaled(8.0));
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
      EXPECT_FALSE(msg.find("did not join") != std::string::npos &&
                   msg.find("is unknown") != std::string::npos)
          << "says rank 1 did not join and that whether it arrived is unknown: " << msg;
    }
    Meet(c, "timedout");
    if (c.rank == 1) {
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << msg;
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    }
    Meet(c, "end");
  }, ro);
}

// A rank whose wait times out aborts the group (core's own abort: nobody called
// dlpg_group_abort). Rank 1 times out in an allreduce rank 2 joins only afterwards: rank 1
// logs the abort and the flight record's dump; rank 0, blocked in the same allreduce, logs
// one line naming rank 1's failure, neither an abort of its own nor a second dump, and its
// message never speaks of dlpg_group_abort.
TEST(PropagationTimeout, OnlyTheFailingRankDumps) {
  RunThree(Mode::kProcesses, [&](RankCtx &c, dlpg_group_t *g) {  // the allreduce: coll_seq 2
    HostTensor t(DT::F64, {32});
    Generate(DT::F64, DLPG_SUM, c.seed, c.rank, t.elems(), 32);
    DLTensor *tp = t.dl();
    const std::string dump_line = "coll_seq=2 op=dlpg_allreduce";
    std::string k = c.name + "/r1timedout";
    if (c.rank == 1) {
      std::string log = CaptureStderr([&] {
        dlpg_work_t *w = nullptr;
        DLPG_ASSERT_OK(c.api, c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
        EXPECT_EQ(c.api->work_wait(w, 1.5), DLPG_ERR_TIMEOUT) << c.api->last_error();
        c.api->work_wait(w, 10);
        c.api->work_free(w);
      });
      c.api->store_set(c.store, k.c_str(), "1", 1);
      EXPECT_NE(log.find(dump_line), std::string::npos) << log;
      EXPECT_NE(log.find("\" aborted"), std::string::npos) << log;
    } else if (c.rank == 0) {
      std::string msg;
      std::string log = CaptureStderr([&] {
        dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
        msg = c.api->last_error();
        EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << msg;
      });
      printf("rank 0's log:\n%s", log.c_str());
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("dlpg_group_abort"), std::string::npos) << msg;
      EXPECT_NE(log.find("failed on rank 1"), std::string::npos) << log;
      EXPECT_EQ(log.find(dump_line), std::string::npos) << log;
      EXPECT_EQ(log.find("\" aborted"), std::string::npos) << log;  // INIT's "group "x" aborted"
    } else {
      const char *kp = k.c_str();
      DLPG_EXPECT_OK(c.api, c.api->store_wait(c.store, &kp, 1, Scaled(60)));
      dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << c.api->status_name(s) << ": " << c.api->last_error();
    }
  });
}

// After a remote failure the group stays unusable, and a new group of the same name on the
// same store starts clean (the old failure record belongs to the old incarnation). The new
// group's rendezvous must not read the old group's addresses either (rendezvous keys are
// scoped per creation); without that, the new group's first allreduce fails with
// "... Connection refused".
TEST(PropagationTimeout, NewGroupOfTheSameNameWorks) {
  RunOptions ro;
  ro.create_group = false;
  ro.deadline_s = 90;
  RunRanks(Mode::kProcesses, 3, [&](RankCtx &c) {
    dlpg_group_t *g = Group(c, c.name);
    ASSERT_NE(g, nullptr);
    CheckedAllreduce(c, g, c.seed);
    if (c.rank == 2) {
      usleep(300000);
      c.api->group_abort(g);
    } else {
      ExpectRemote(c, g, 2, {"dlpg_group_abort"}, c.seed + 1);
      ExpectFailsFast(c, g, 2);
    }
    Meet(c, "failed");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
    dlpg_group_t *g2 = Group(c, c.name, 8);  // a failure here ends in seconds
    ASSERT_NE(g2, nullptr);
    for (int i = 0; i < 3 && !::testing::Test::HasFatalFailure(); i++)
      CheckedAllreduce(c, g2, c.seed + 10 + i);
    DLPG_EXPECT_OK(c.api, c.api->barrier(g2, nullptr));
    Meet(c, "end");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g2));
  }, ro);
}

// Rank 1 of 3 makes its group with world size 4: rank 0 detects the mismatch when it admits
// rank 1 and records it where every rank of the job looks, so all three fail within about a
// second (the group's timeout is 20 s) with the same message naming both ranks and sizes;
// rank 1 itself with INVALID_ARGUMENT, ranks 0 and 2 with REMOTE.
TEST(PropagationTimeout, WrongWorldSizeFailsEveryRankAtOnce) {
  RunOptions ro;
  ro.create_group = false;
  ro.deadline_s = 90;
  RunRanks(Mode::kProcesses, 3, [&](RankCtx &c) {
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = kGroupTimeout;
    o.name = c.name.c_str();
    dlpg_group_t *g = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.rank == 1 ? 4 : 3, &o, &g));
    HostTensor t(DT::F32, {64});
    Generate(DT::F32, DLPG_SUM, c.seed, c.rank, t.elems(), 64);
    DLTensor *tp = t.dl();
    double t0 = NowSeconds();
    dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
    double el = NowSeconds() - t0;
    std::string msg = c.api->last_error();
    printf("rank %d after %.2f s: %s: %s\n", c.rank, el, c.api->status_name(s), msg.c_str());
    EXPECT_EQ(s, c.rank == 1 ? DLPG_ERR_INVALID_ARGUMENT : DLPG_ERR_REMOTE) << msg;
    EXPECT_LT(el, Scaled(kPropagateMax)) << msg;
    EXPECT_NE(msg.find("rank 1 has world size 4 but rank 0 has world size 3"), std::string::npos)
        << msg;
    Meet(c, "end");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
  }, ro);
}

// The store is gone when rank 0's wait times out: recording the failure fails at once (the
// server refuses), so the timeout, the abort and destroy still end promptly on both ranks.
TEST(PropagationTimeout, StoreGoneDoesNotHang) {
  const dlpg_api_t *api = dlpg_test_api();
  dlpg_store_t *server = nullptr;
  DLPG_ASSERT_OK(api, api->store_open("tcp://127.0.0.1:0?serve=1", 10, &server));
  int port = 0;
  DLPG_ASSERT_OK(api, api->store_port(server, &port));
  std::string url = "tcp://127.0.0.1:" + std::to_string(port), name = UniqueName();
  dlpg_store_t *st[2] = {nullptr, nullptr};
  dlpg_group_t *g[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; r++) {
    DLPG_ASSERT_OK(api, api->store_open(url.c_str(), 10, &st[r]));
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = kGroupTimeout;
    o.name = name.c_str();
    DLPG_ASSERT_OK(api, api->group_create(st[r], r, 2, &o, &g[r]));
  }
  std::thread t1([&] { EXPECT_EQ(api->barrier(g[1], nullptr), DLPG_OK) << api->last_error(); });
  DLPG_EXPECT_OK(api, api->barrier(g[0], nullptr));
  t1.join();
  DLPG_ASSERT_OK(api, api->store_close(server));  // the server stops; clients remain

  HostTensor x(DT::F32, {64});
  Generate(DT::F32, DLPG_SUM, TestSeed(), 0, x.elems(), 64);
  DLTensor *xp = x.dl();
  dlpg_work_t *w = nullptr;
  DLPG_ASSERT_OK(api, api->allreduce(g[0], &xp, nullptr, 1, DLPG_SUM, nullptr, &w));
  double t0 = NowSeconds();
  dlpg_status_t s = api->work_wait(w, 1.0);
  EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << api->status_name(s) << ": " << api->last_error();
  EXPECT_LT(NowSeconds() - t0, Scaled(4.0));
  api->work_free(w);
  t0 = NowSeconds();
  DLPG_EXPECT_OK(api, api->group_abort(g[1]));
  for (int r = 0; r < 2; r++) {
    DLPG_EXPECT_OK(api, api->group_destroy(g[r]));
    api->store_close(st[r]);
  }
  EXPECT_LT(NowSeconds() - t0, Scaled(5.0)) << "abort and destroy with the store gone";
}

}  // namespace
