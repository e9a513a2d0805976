// Group lifecycle: timeouts (missing peer, short work_wait), abort from another thread,
// several groups on one store, the options struct's ABI evolution (smaller struct_size,
// DLPG_GROUP_OPTIONS_INIT), dlpg_group_create_from_env in forked children, a store closed
// right after group creation, and 50 groups created and destroyed without leaking threads
// or file descriptors.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "harness.h"

using namespace dlpgt;

namespace {

// Allreduce-sum of a random int32 vector on g, checked against the reference.
void CheckedAllreduce(RankCtx &c, dlpg_group_t *g, int rank, int size, uint64_t seed,
                      dlpg_reduce_op_t op = DLPG_SUM, const std::string &what = "") {
  const size_t n = 333;
  HostTensor t(DT::I32, {static_cast<int64_t>(n)});
  Generate(DT::I32, op, seed, rank, t.elems(), n);
  DLTensor *tp = t.dl();
  dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, op, nullptr, nullptr);
  ASSERT_EQ(s, DLPG_OK) << what << ": " << c.api->last_error();
  std::vector<std::vector<uint8_t>> all(size, std::vector<uint8_t>(n * 4));
  std::vector<const void *> ptrs;
  for (int r = 0; r < size; r++) {
    Generate(DT::I32, op, seed, r, all[r].data(), n);
    ptrs.push_back(all[r].data());
  }
  std::vector<uint8_t> want(n * 4);
  Reduce(DT::I32, op, ptrs, want.data(), n);
  EXPECT_EQ("", Compare(DT::I32, op, t.elems(), want.data(), n)) << what;
}

void WaitKey(RankCtx &c, const std::string &key, double timeout) {
  const char *k = key.c_str();
  DLPG_EXPECT_OK(c.api, c.api->store_wait(c.store, &k, 1, timeout));
}

class GroupModes : public ::testing::TestWithParam<Mode> {};

// A rank whose peer never shows up: the first operation fails with DLPG_ERR_TIMEOUT within
// the group's timeout.
TEST(Group, MissingPeerTimesOut) {
  const dlpg_api_t *api = dlpg_test_api();
  dlpg_store_t *st = nullptr;
  DLPG_ASSERT_OK(api, api->store_open("tcp://127.0.0.1:0?serve=1", 10, &st));
  std::string name = UniqueName();
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 2;
  o.name = name.c_str();
  dlpg_group_t *g = nullptr;
  DLPG_ASSERT_OK(api, api->group_create(st, 0, 2, &o, &g));
  HostTensor t(DT::F32, {16});
  DLTensor *tp = t.dl();
  double t0 = NowSeconds();
  dlpg_status_t s = api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  double el = NowSeconds() - t0;
  EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << api->status_name(s) << ": " << api->last_error();
  EXPECT_STRNE(api->last_error(), "");
  EXPECT_GE(el, 1.5) << "gave up before the timeout";
  EXPECT_LT(el, Scaled(6.0)) << "took far longer than the group's 2 s timeout";
  // With a work handle the failure is the work's.
  dlpg_work_t *w = nullptr;
  t0 = NowSeconds();
  s = api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, &w);
  if (s == DLPG_OK) {
    s = api->work_wait(w, 0);
    EXPECT_STRNE(api->work_error(w), "");
    api->work_free(w);
  }
  EXPECT_NE(s, DLPG_OK);
  EXPECT_LT(NowSeconds() - t0, Scaled(6.0));
  t0 = NowSeconds();
  DLPG_EXPECT_OK(api, api->group_destroy(g));
  EXPECT_LT(NowSeconds() - t0, Scaled(6.0)) << "group_destroy hung";
  api->store_close(st);
}

// dlpg_work_wait with a short timeout on an operation the peer never joins: TIMEOUT, the
// group is aborted, later operations fail with DLPG_ERR_ABORTED.
TEST_P(GroupModes, WorkWaitTimeoutAbortsGroup) {
  RunOptions ro;
  ro.group_timeout_s = 30;
  RunRanks(GetParam(), 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // connected
    if (c.rank == 0) {
      HostTensor t(DT::F32, {64});
      DLTensor *tp = t.dl();
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->work_wait(w, 1.0);
      double el = NowSeconds() - t0;
      EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << c.api->last_error();
      EXPECT_GE(el, 0.8);
      EXPECT_LT(el, Scaled(5.0));
      // Later operations: aborted (at the call or at the wait).
      HostTensor u(DT::F32, {64});
      DLTensor *up = u.dl();
      dlpg_work_t *w2 = nullptr;
      t0 = NowSeconds();
      s = c.api->allreduce(c.group, &up, nullptr, 1, DLPG_SUM, nullptr, &w2);
      if (s == DLPG_OK) s = c.api->work_wait(w2, 10);
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s) << ": " << c.api->last_error();
      EXPECT_LT(NowSeconds() - t0, Scaled(5.0));
      s = c.api->barrier(c.group, nullptr);
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s);
      // The timed-out work finishes (aborted) promptly.
      s = c.api->work_wait(w, 10);
      EXPECT_NE(s, DLPG_OK);
      c.api->work_free(w);
      if (w2) c.api->work_free(w2);
      c.api->store_set(c.store, (c.name + "/r0done").c_str(), "1", 1);
    } else {
      WaitKey(c, c.name + "/r0done", 30);
    }
  }, ro);
}

// dlpg_group_abort from another thread while the rank is blocked in an operation.
TEST_P(GroupModes, AbortFromAnotherThread) {
  RunOptions ro;
  ro.group_timeout_s = 60;
  RunRanks(GetParam(), 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    if (c.rank == 0) {
      HostTensor t(DT::F64, {1000});
      DLTensor *tp = t.dl();
      std::thread aborter([&] {
        usleep(500000);
        c.api->group_abort(c.group);
      });
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      double el = NowSeconds() - t0;
      aborter.join();
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s) << ": " << c.api->last_error();
      EXPECT_LT(el, Scaled(5.0)) << "abort took " << el << " s (group timeout 60 s)";
      EXPECT_GE(el, 0.4);
      DLPG_EXPECT_OK(c.api, c.api->group_abort(c.group));  // idempotent
      s = c.api->barrier(c.group, nullptr);
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s);
      c.api->store_set(c.store, (c.name + "/r0done").c_str(), "1", 1);
    } else {
      WaitKey(c, c.name + "/r0done", 60);
    }
  }, ro);
}

// Abort while another thread waits on a work handle.
TEST_P(GroupModes, AbortWakesWorkWait) {
  RunRanks(GetParam(), 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    if (c.rank == 1) {
      HostTensor t(DT::U8, {100});
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t.dl(), 0, 9, nullptr, &w));
      std::thread aborter([&] {
        usleep(300000);
        c.api->group_abort(c.group);
      });
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->work_wait(w, 0);
      double el = NowSeconds() - t0;
      aborter.join();
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s) << ": " << c.api->last_error();
      EXPECT_LT(el, Scaled(5.0));
      int done = 0;
      DLPG_EXPECT_OK(c.api, c.api->work_test(w, &done));
      EXPECT_EQ(done, 1);
      EXPECT_STRNE(c.api->work_error(w), "");
      c.api->work_free(w);
      c.api->store_set(c.store, (c.name + "/r1done").c_str(), "1", 1);
    } else {
      WaitKey(c, c.name + "/r1done", 60);
    }
  });
}

// Two groups with different names on one store, used alternately; and (3 ranks) a
// two-rank subgroup beside the full group.
TEST_P(GroupModes, SeveralGroupsOneStore) {
  RunRanks(GetParam(), 3, [&](RankCtx &c) {
    std::string n2 = c.name + "-second", n3 = c.name + "-pair";
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = 60;
    o.name = n2.c_str();
    dlpg_group_t *g2 = nullptr, *g3 = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &g2));
    if (c.rank < 2) {
      o.name = n3.c_str();
      DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, 2, &o, &g3));
    }
    for (int i = 0; i < 3; i++) {
      CheckedAllreduce(c, c.group, c.rank, c.size, Mix(c.seed, 10 + i), DLPG_SUM, "first group");
      CheckedAllreduce(c, g2, c.rank, c.size, Mix(c.seed, 20 + i), DLPG_MAX, "second group");
      if (g3) CheckedAllreduce(c, g3, c.rank, 2, Mix(c.seed, 30 + i), DLPG_MIN, "pair group");
    }
    int r = -1, s = -1;
    if (g3) {
      DLPG_EXPECT_OK(c.api, c.api->group_size(g3, &s));
      DLPG_EXPECT_OK(c.api, c.api->group_rank(g3, &r));
      EXPECT_EQ(s, 2);
      EXPECT_EQ(r, c.rank);
    }
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g2));
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g3));
  });
}

// The store handle may be closed right after dlpg_group_create.
TEST_P(GroupModes, StoreClosedAfterCreate) {
  RunOptions ro;
  ro.create_group = false;
  RunRanks(GetParam(), 2, [&](RankCtx &c) {
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = 30;
    o.name = c.name.c_str();
    dlpg_group_t *g = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &g));
    DLPG_EXPECT_OK(c.api, c.api->store_close(c.store));
    c.store = nullptr;
    CheckedAllreduce(c, g, c.rank, c.size, c.seed, DLPG_SUM, "after store_close");
    DLPG_EXPECT_OK(c.api, c.api->barrier(g, nullptr));
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
  }, ro);
}

// dlpg_group_destroy waits for queued operations; their work handles stay valid.
TEST_P(GroupModes, DestroyWithPendingWork) {
  RunOptions ro;
  ro.create_group = false;
  RunRanks(GetParam(), 2, [&](RankCtx &c) {
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = 30;
    o.name = c.name.c_str();
    dlpg_group_t *g = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &g));
    const size_t n = 1 << 16;
    HostTensor t(DT::I32, {static_cast<int64_t>(n)});
    Generate(DT::I32, DLPG_SUM, c.seed, c.rank, t.elems(), n);
    DLTensor *tp = t.dl();
    dlpg_work_t *w = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
    DLPG_EXPECT_OK(c.api, c.api->work_wait(w, 10));
    int done = 0;
    DLPG_EXPECT_OK(c.api, c.api->work_test(w, &done));
    EXPECT_EQ(done, 1);
    c.api->work_free(w);
    std::vector<uint8_t> a(n * 4), b(n * 4), want(n * 4);
    Generate(DT::I32, DLPG_SUM, c.seed, 0, a.data(), n);
    Generate(DT::I32, DLPG_SUM, c.seed, 1, b.data(), n);
    Reduce(DT::I32, DLPG_SUM, {a.data(), b.data()}, want.data(), n);
    EXPECT_EQ("", Compare(DT::I32, DLPG_SUM, t.elems(), want.data(), n));
  }, ro);
}

INSTANTIATE_TEST_SUITE_P(Modes, GroupModes, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode> &i) { return ModeName(i.param); });

// An options struct from an older host: struct_size covers only timeout_s. It sits at the
// end of a readable page followed by an unreadable one, so reading past struct_size crashes
// (the forked child's death is reported by the harness).
TEST(Group, SmallerOptionsStructAccepted) {
  RunOptions ro;
  ro.create_group = false;
  RunRanks(Mode::kProcesses, 1, [&](RankCtx &c) {
    struct old_options {
      size_t struct_size;
      double timeout_s;
    };
    long pg = sysconf(_SC_PAGESIZE);
    char *mem = static_cast<char *>(mmap(nullptr, 2 * pg, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(mem, MAP_FAILED);
    ASSERT_EQ(mprotect(mem + pg, pg, PROT_NONE), 0);
    old_options *old = reinterpret_cast<old_options *>(mem + pg - sizeof(old_options));
    old->struct_size = sizeof(old_options);
    old->timeout_s = 7.0;
    dlpg_group_t *g = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, 0, 1,
                                              reinterpret_cast<const dlpg_group_options_t *>(old), &g));
    CheckedAllreduce(c, g, 0, 1, c.seed, DLPG_SUM, "old options struct");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
    munmap(mem, 2 * pg);
  }, ro);
}

TEST(Group, OptionsInitDefaults) {
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  EXPECT_EQ(o.struct_size, sizeof(dlpg_group_options_t));
  EXPECT_EQ(o.timeout_s, 0.0);
  EXPECT_EQ(o.name, nullptr);
  RunOptions ro;
  ro.create_group = false;
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    // options == NULL and DLPG_GROUP_OPTIONS_INIT both mean the defaults (name "dlpg").
    dlpg_group_t *g = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, nullptr, &g));
    int r = -1, s = -1;
    DLPG_EXPECT_OK(c.api, c.api->group_rank(g, &r));
    DLPG_EXPECT_OK(c.api, c.api->group_size(g, &s));
    EXPECT_EQ(r, c.rank);
    EXPECT_EQ(s, c.size);
    CheckedAllreduce(c, g, c.rank, c.size, c.seed, DLPG_SUM, "options NULL");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
  }, ro);
}

// torchrun's variables in forked children. env:// serves on a fixed port (MASTER_PORT + 1)
// that every rank must know beforehand, so rank 0 tries ports at random until one is free
// (a taken port fails its group creation with DLPG_ERR_SYSTEM) and hands the one it got to
// rank 1 through the harness's store; no port is picked by binding and releasing it.
TEST(Group, CreateFromEnvInForkedChildren) {
  RunOptions ro;
  ro.create_group = false;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    setenv("RANK", std::to_string(c.rank).c_str(), 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    unsetenv("DLPG_STORE_PORT");
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = 30;
    o.name = c.name.c_str();
    dlpg_group_t *g = nullptr;
    const std::string key = c.name + "/env-port";
    auto from_env = [&](int port) {
      // The dlpg store takes MASTER_PORT + 1 (torchrun's own store keeps MASTER_PORT).
      setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
      return c.api->group_create_from_env(&o, &g);
    };
    if (c.rank == 0) {
      Rng rng(c.seed ^ static_cast<uint64_t>(getpid()));
      dlpg_status_t st = DLPG_ERR_SYSTEM;
      int port = 0;
      for (int attempt = 0; attempt < 20 && st == DLPG_ERR_SYSTEM; attempt++) {
        port = static_cast<int>(rng.Range(20000, 59999));
        st = from_env(port);
      }
      DLPG_ASSERT_OK(c.api, st);
      std::string v = std::to_string(port);
      DLPG_ASSERT_OK(c.api, c.api->store_set(c.store, key.c_str(), v.data(), v.size()));
    } else {
      char buf[16] = {0};
      size_t len = 0;
      DLPG_ASSERT_OK(c.api, c.api->store_get(c.store, key.c_str(), 30, buf, sizeof buf - 1, &len));
      DLPG_ASSERT_OK(c.api, from_env(atoi(buf)));
    }
    int r = -1, s = -1;
    DLPG_EXPECT_OK(c.api, c.api->group_rank(g, &r));
    DLPG_EXPECT_OK(c.api, c.api->group_size(g, &s));
    EXPECT_EQ(r, c.rank);
    EXPECT_EQ(s, 2);
    CheckedAllreduce(c, g, c.rank, 2, c.seed, DLPG_SUM, "group from env");
    DLPG_EXPECT_OK(c.api, c.api->barrier(g, nullptr));
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
  }, ro);
}

int CountDir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  while (struct dirent *e = readdir(d))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

// 50 groups created, used and destroyed: the thread and descriptor counts come back.
TEST(Group, ManyGroupsDoNotLeak) {
  RunOptions ro;
  ro.create_group = false;
  ro.deadline_s = 240;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    auto one = [&](int i) {
      std::string name = c.name + "-" + std::to_string(i);
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.timeout_s = 30;
      o.name = name.c_str();
      dlpg_group_t *g = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &g));
      CheckedAllreduce(c, g, c.rank, c.size, Mix(c.seed, i), DLPG_SUM, "group " + std::to_string(i));
      DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
    };
    one(1000);  // warm-up: one-time threads and descriptors
    usleep(200000);
    int tasks0 = CountDir("/proc/self/task"), fds0 = CountDir("/proc/self/fd");
    for (int i = 0; i < 50 && !::testing::Test::HasFatalFailure(); i++) one(i);
    int tasks = 0, fds = 0;
    double end = NowSeconds() + 5;
    do {
      tasks = CountDir("/proc/self/task");
      fds = CountDir("/proc/self/fd");
      if (tasks <= tasks0 && fds <= fds0) break;
      usleep(100000);
    } while (NowSeconds() < end);
    EXPECT_LE(tasks, tasks0) << "threads leaked over 50 groups";
    EXPECT_LE(fds, fds0 + 1) << "file descriptors leaked over 50 groups";
  }, ro);
}

}  // namespace
