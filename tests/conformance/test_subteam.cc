// Children of a group on shared memory run in areas of the parent's segment (shm/pool.h):
// children of dlpg_group_split and dlpg_group_create_subset checked against references
// (child_check.cc) with small and pipelined sizes, both orders of destroy, a child of a
// child, many create/destroy cycles, and a pool that runs full (test_subteam_pool2 runs the
// same cases with DLPG_SHM_POOL_AREAS=2: the children beyond 2 make segments of their own
// and work alike). Whether a child got an area is seen from outside: the process's mappings
// of the engine's memfds (/proc/self/maps), which an area adds none of. Ranks are threads
// or forked processes on the real TCP store on 127.0.0.1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "child_check.h"
#include "harness.h"

using namespace dlpgt;

namespace {

// The elements of each child check: one within any slot, one pipelined through an area's
// slots (a 4-rank child has 512 KiB slots by default).
constexpr size_t kSmall = 67;
constexpr size_t kLarge = 300000;

// The engine's memfd mappings of this process ("/memfd:dlpg-shm (deleted)").
int SegmentMaps() {
  std::ifstream f("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(f, line))
    if (line.find("memfd:dlpg-shm ") != std::string::npos) n++;
  return n;
}

// The pool's areas this run was configured with (DLPG_SHM_POOL_AREAS; 256 by default).
int PoolAreas() {
  const char *v = getenv("DLPG_SHM_POOL_AREAS");
  return v && *v ? atoi(v) : 256;
}

bool SharedMemory() {
  const char *v = getenv("DLPG_CPU_BACKEND");
  return !v || !*v || std::string(v) == "shm" || std::string(v) == "auto";
}

std::string Listed(const std::vector<int> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

struct P {
  Mode mode;
  int n;
};
std::string PName(const ::testing::TestParamInfo<P> &info) {
  return std::string(ModeName(info.param.mode)) + "_" + std::to_string(info.param.n);
}

class Subteam : public ::testing::TestWithParam<P> {};

// Per trial: a split with random colors (some negative) and a few random member lists by
// subset, all alive together, each checked with both sizes; with room in the pool, none of
// them maps a segment of its own (in thread mode the ranks' counts add up, so the check
// holds there too: nobody maps anything).
TEST_P(Subteam, SplitAndSubsetChildrenInAreas) {
  P p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // the parent's segment
    Meet(c, "parent");
    int before = SegmentMaps();
    int alive = 0;
    for (int trial = 0; trial < 3; trial++) {
      uint64_t seed = Mix(c.seed, trial);
      std::mt19937_64 rng(seed);
      std::vector<int> colors(c.size);
      for (int r = 0; r < c.size; r++) colors[r] = static_cast<int>(rng() % 3) - 1;
      std::vector<std::vector<int>> lists;
      for (int l = 0; l < 2; l++) {
        std::vector<int> all(c.size);
        for (int r = 0; r < c.size; r++) all[r] = r;
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(1 + rng() % c.size);
        lists.push_back(all);
      }
      std::string what = "seed " + std::to_string(seed) + " rank " + std::to_string(c.rank);
      struct Kid {
        dlpg_group_t *g;
        std::vector<int> members;
        uint64_t id;  // the same on every member: the data's seed
      };
      std::vector<Kid> mine;
      dlpg_group_t *child = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_split(c.group, colors[c.rank], c.size - c.rank,
                                               nullptr, &child));
      if (colors[c.rank] >= 0) {
        std::vector<int> m;
        for (int r = c.size - 1; r >= 0; r--)  // keys reverse the parent's order
          if (colors[r] == colors[c.rank]) m.push_back(r);
        mine.push_back({child, m, 0});
      }
      for (size_t l = 0; l < lists.size(); l++) {
        if (std::find(lists[l].begin(), lists[l].end(), c.rank) == lists[l].end()) continue;
        DLPG_ASSERT_OK(c.api, c.api->group_create_subset(c.group, static_cast<int>(lists[l].size()),
                                                         lists[l].data(), nullptr, &child));
        mine.push_back({child, lists[l], l + 1});
      }
      alive = std::max(alive, static_cast<int>(mine.size()));
      for (auto &k : mine) {
        std::string w = what + " child " + Listed(k.members);
        CheckChild(c, k.g, k.members, Mix(seed, k.id), kSmall, w + " small");
        CheckChild(c, k.g, k.members, Mix(seed, k.id + 50), kLarge, w + " large");
      }
      for (auto &k : mine) DLPG_EXPECT_OK(c.api, c.api->group_destroy(k.g));
    }
    Meet(c, "children");
    if (SharedMemory() && PoolAreas() >= 16) {
      EXPECT_EQ(SegmentMaps(), before) << "a child mapped a segment of its own";
    }
    Meet(c, "counted");  // a thread rank's parent stays until all counted
    DLPG_EXPECT_OK(c.api, c.api->barrier(c.group, nullptr));  // the parent still works
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Subteam,
                         ::testing::Values(P{Mode::kThreads, 4}, P{Mode::kProcesses, 3},
                                           P{Mode::kProcesses, 5}),
                         PName);

class SubteamModes : public ::testing::TestWithParam<Mode> {};

// A parent of its own, two children (a subset in reversed order, a split by parity) and a
// child of the subset; order 0 destroys the parent first and the children keep working
// (their handles hold the parent's mapping), order 1 the children first. Afterwards, in
// process mode, nothing of the engine is mapped any more.
TEST_P(SubteamModes, DestroyOrdersAndChildOfChild) {
  RunOptions ro;
  ro.create_group = false;
  RunRanks(GetParam(), 4, [&](RankCtx &c) {
    for (int order = 0; order < 2; order++) {
      std::string name = c.name + "/o" + std::to_string(order);
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.name = name.c_str();
      o.timeout_s = 60;
      dlpg_group_t *parent = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &parent));
      DLPG_ASSERT_OK(c.api, c.api->barrier(parent, nullptr));
      std::vector<int> rev = {3, 2, 1, 0};
      dlpg_group_t *sub = nullptr, *half = nullptr, *grand = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create_subset(parent, 4, rev.data(), nullptr, &sub));
      DLPG_ASSERT_OK(c.api, c.api->group_split(parent, c.rank % 2, c.rank, nullptr, &half));
      std::vector<int> halfm = {c.rank % 2, c.rank % 2 + 2};
      uint64_t seed = Mix(c.seed, order);
      CheckChild(c, sub, rev, Mix(seed, 1), kSmall, "subset");
      CheckChild(c, half, halfm, Mix(seed, 2), kLarge, "split");
      // A child of the subset: its ranks 0 and 2 (parent ranks 3 and 1) as [2, 0].
      int srank = 3 - c.rank;
      if (srank % 2 == 0) {
        int gm[2] = {2, 0};
        DLPG_ASSERT_OK(c.api, c.api->group_create_subset(sub, 2, gm, nullptr, &grand));
      }
      std::vector<int> grandm = {1, 3};  // as parent ranks: sub's 2 is 1, sub's 0 is 3
      if (grand) CheckChild(c, grand, grandm, Mix(seed, 3), kLarge, "child of child");
      Meet(c, "made " + std::to_string(order));
      if (order == 0) {
        DLPG_EXPECT_OK(c.api, c.api->group_destroy(parent));
        parent = nullptr;
        CheckChild(c, sub, rev, Mix(seed, 4), kLarge, "subset after the parent");
        CheckChild(c, half, halfm, Mix(seed, 5), kSmall, "split after the parent");
        if (grand) CheckChild(c, grand, grandm, Mix(seed, 6), kSmall, "grandchild after");
      }
      if (grand) DLPG_EXPECT_OK(c.api, c.api->group_destroy(grand));
      DLPG_EXPECT_OK(c.api, c.api->group_destroy(half));
      if (order == 1) CheckChild(c, sub, rev, Mix(seed, 7), kSmall, "subset after the split");
      DLPG_EXPECT_OK(c.api, c.api->group_destroy(sub));
      if (parent) {
        DLPG_EXPECT_OK(c.api, c.api->barrier(parent, nullptr));
        DLPG_EXPECT_OK(c.api, c.api->group_destroy(parent));
      }
      Meet(c, "destroyed " + std::to_string(order));
      if (GetParam() == Mode::kProcesses) {
        EXPECT_EQ(SegmentMaps(), 0) << "order " << order << ": the engine's memory is still mapped";
      }
    }
  }, ro);
}

// Many children made, used and destroyed one after the other: the areas return to the pool
// (more cycles than it has areas), and with room in it nothing gets mapped.
TEST_P(SubteamModes, ManyCreateDestroyCycles) {
  RunRanks(GetParam(), 3, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    Meet(c, "parent");
    int before = SegmentMaps();
    const int cycles = 300;
    for (int i = 0; i < cycles; i++) {
      // Pairs and the whole, in turn; every rank in some.
      std::vector<int> m;
      if (i % 3 == 0) m = {0, 1, 2};
      else m = {i % 3, (i % 3 + 1) % 3};
      if (std::find(m.begin(), m.end(), c.rank) == m.end()) continue;
      dlpg_group_t *child = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create_subset(c.group, static_cast<int>(m.size()),
                                                       m.data(), nullptr, &child));
      HostTensor t(DT::I64, {3});
      auto *v = static_cast<int64_t *>(t.elems());
      for (int k = 0; k < 3; k++) v[k] = (c.rank + 1) * (i + k);
      DLTensor *tp = t.dl();
      dlpg_status_t s = c.api->allreduce(child, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      ASSERT_EQ(s, DLPG_OK) << "cycle " << i << ": " << c.api->last_error();
      int64_t w = 0;
      for (int r : m) w += r + 1;
      for (int k = 0; k < 3; k++) ASSERT_EQ(v[k], w * (i + k)) << "cycle " << i;
      DLPG_EXPECT_OK(c.api, c.api->group_destroy(child));
    }
    Meet(c, "cycles");
    if (SharedMemory() && PoolAreas() >= 16) {
      EXPECT_EQ(SegmentMaps(), before);
    }
    Meet(c, "counted");  // a thread rank's parent stays until all counted
  });
}

// More children alive at once than a pool of 2 holds: with DLPG_SHM_POOL_AREAS=2 the later
// ones make segments of their own (said at INFO) and every child still computes right.
TEST_P(SubteamModes, PoolRunsFullFallsBack) {
  RunRanks(GetParam(), 3, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    Meet(c, "parent");
    int before = SegmentMaps();
    std::vector<std::vector<int>> lists = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {0, 2, 1}, {2, 0, 1}};
    std::vector<dlpg_group_t *> kids;
    for (auto &l : lists) {
      dlpg_group_t *k = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create_subset(c.group, 3, l.data(), nullptr, &k));
      kids.push_back(k);
    }
    for (size_t i = 0; i < kids.size(); i++)
      CheckChild(c, kids[i], lists[i], Mix(c.seed, i), i % 2 ? kLarge : kSmall,
                 "child " + Listed(lists[i]));
    Meet(c, "checked");
    if (SharedMemory() && PoolAreas() == 2) {
      EXPECT_GT(SegmentMaps(), before) << "the children beyond the pool's 2 areas";
    } else if (SharedMemory() && PoolAreas() >= 16) {
      EXPECT_EQ(SegmentMaps(), before);
    }
    Meet(c, "counted");
    for (auto *k : kids) DLPG_EXPECT_OK(c.api, c.api->group_destroy(k));
    // The pool has room again: a new child gets an area.
    dlpg_group_t *k = nullptr;
    std::vector<int> all = {0, 1, 2};
    DLPG_ASSERT_OK(c.api, c.api->group_create_subset(c.group, 3, all.data(), nullptr, &k));
    CheckChild(c, k, all, Mix(c.seed, 99), kSmall, "after the pool emptied");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(k));
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, SubteamModes,
                         ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode> &i) {
                           return std::string(ModeName(i.param));
                         });

}  // namespace
