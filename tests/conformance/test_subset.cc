// dlpg_group_create_subset (dlpg.h, subgroups): random member lists per trial, several
// children per rank, each child's rank and size checked against the list and an allreduce
// and an allgather on it with random per-rank data checked against references computed
// here; the same list made twice; a member that never calls (named by the others' timeout);
// a parent whose rank 0 has not admitted anybody when the members call; bad arguments.
// Ranks are threads or forked processes on the real TCP store on 127.0.0.1; test_subset runs
// on the default CPU line (shared memory, these ranks share a host), test_subset_gloo with
// Gloo forced.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <thread>

#include "child_check.h"
#include "harness.h"

using namespace dlpgt;

// Elements of each child check's tensors.
constexpr size_t kChildElems = 67;

namespace {

std::string Listed(const std::vector<int> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

struct SubsetParam {
  Mode mode;
  int n;
};
std::string SubsetParamName(const ::testing::TestParamInfo<SubsetParam> &info) {
  return std::string(ModeName(info.param.mode)) + "_" + std::to_string(info.param.n);
}

class Subset : public ::testing::TestWithParam<SubsetParam> {};

// Per trial, the same on every rank from the test's seed: a few random member lists (random
// sizes and orders, overlapping, the last one a repeat of the first), made by their members
// only, in list order; each child is checked while the rank's other children exist. The first
// trial runs before the parent's first collective, the later ones after.
TEST_P(Subset, RandomListsMatchReference) {
  SubsetParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    for (int trial = 0; trial < 3; trial++) {
      uint64_t seed = Mix(c.seed, trial);
      std::mt19937_64 rng(seed);
      std::vector<std::vector<int>> lists;
      int nlists = 2 + static_cast<int>(rng() % 3);
      for (int l = 0; l < nlists; l++) {
        std::vector<int> all(c.size);
        for (int r = 0; r < c.size; r++) all[r] = r;
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(1 + rng() % c.size);
        lists.push_back(all);
      }
      lists.push_back(lists[0]);  // the same list again: a child of its own
      std::string what = "seed " + std::to_string(seed) + " trial " + std::to_string(trial) +
                         " rank " + std::to_string(c.rank) + " lists";
      for (auto &l : lists) what += " " + Listed(l);
      if (c.rank == 0) fprintf(stderr, "[subset] %s\n", what.c_str());
      std::vector<std::pair<dlpg_group_t *, size_t>> mine;
      for (size_t l = 0; l < lists.size(); l++) {
        auto &m = lists[l];
        if (std::find(m.begin(), m.end(), c.rank) == m.end()) continue;
        dlpg_group_t *child = nullptr;
        dlpg_status_t s = c.api->group_create_subset(c.group, static_cast<int>(m.size()),
                                                     m.data(), nullptr, &child);
        ASSERT_EQ(s, DLPG_OK) << what << ": list " << l << ": " << c.api->last_error();
        ASSERT_NE(child, nullptr) << what;
        mine.push_back({child, l});
      }
      for (auto &[child, l] : mine)
        CheckChild(c, child, lists[l], Mix(seed, l + 1), kChildElems,
                   what + ", list " + std::to_string(l));
      for (auto &[child, l] : mine) DLPG_EXPECT_OK(c.api, c.api->group_destroy(child));
      if (trial == 0) DLPG_EXPECT_OK(c.api, c.api->barrier(c.group, nullptr));
    }
    DLPG_EXPECT_OK(c.api, c.api->barrier(c.group, nullptr));  // the parent still works
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Subset,
                         ::testing::Values(SubsetParam{Mode::kThreads, 1},
                                           SubsetParam{Mode::kThreads, 3},
                                           SubsetParam{Mode::kThreads, 6},
                                           SubsetParam{Mode::kProcesses, 4},
                                           SubsetParam{Mode::kProcesses, 5}),
                         SubsetParamName);

class SubsetModes : public ::testing::TestWithParam<Mode> {};

// Parent rank 1 is a member of [0, 2, 1] but never calls: the others' first operation on
// the child times out within its deadline, naming child rank 2 (parent rank 1).
TEST_P(SubsetModes, MemberThatNeverCallsIsNamed) {
  RunRanks(GetParam(), 3, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    if (c.rank != 1) {
      int m[3] = {0, 2, 1};
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.timeout_s = 2;
      dlpg_group_t *child = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create_subset(c.group, 3, m, &o, &child));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->barrier(child, nullptr);
      double el = NowSeconds() - t0;
      std::string msg = c.api->last_error();
      fprintf(stderr, "[subset] rank %d: %s\n", c.rank, msg.c_str());
      EXPECT_TRUE(s == DLPG_ERR_TIMEOUT || s == DLPG_ERR_REMOTE) << c.api->status_name(s) << ": "
                                                                  << msg;
      EXPECT_LT(el, Scaled(8.0)) << msg;
      // Rank 2 of the child is parent rank 1; a rank that learns of the peer's timeout
      // first names that peer's message, which names it too.
      EXPECT_NE(msg.find("parent rank 1"), std::string::npos) << msg;
      DLPG_EXPECT_OK(c.api, c.api->group_destroy(child));
    }
    Meet(c, "done");
  });
}

// A fresh parent (no operation yet): members 1 and 2 make [2, 1] while rank 0 has not
// admitted anybody; rank 0's own subset call starts its admission, and the child works.
// Then on another fresh parent whose rank 0 does nothing, the members' call times out
// naming rank 0's admission.
TEST_P(SubsetModes, ParentRankZeroAdmitsAtItsFirstCall) {
  RunOptions ro;
  ro.create_group = false;
  RunRanks(GetParam(), 3, [&](RankCtx &c) {
    for (int round = 0; round < 2; round++) {
      std::string name = c.name + "/p" + std::to_string(round);
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.name = name.c_str();
      o.timeout_s = round == 0 ? 60 : 2;
      dlpg_group_t *parent = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &parent));
      if (c.rank == 0) {
        if (round == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          int zero = 0;
          dlpg_group_t *alone = nullptr;
          DLPG_ASSERT_OK(c.api, c.api->group_create_subset(parent, 1, &zero, nullptr, &alone));
          DLPG_EXPECT_OK(c.api, c.api->barrier(alone, nullptr));
          DLPG_EXPECT_OK(c.api, c.api->group_destroy(alone));
        }
      } else {
        int m[2] = {2, 1};
        dlpg_group_t *child = nullptr;
        dlpg_status_t s = c.api->group_create_subset(parent, 2, m, nullptr, &child);
        if (round == 0) {
          ASSERT_EQ(s, DLPG_OK) << c.api->last_error();
          CheckChild(c, child, {2, 1}, Mix(c.seed, 7), kChildElems, "fresh parent");
          DLPG_EXPECT_OK(c.api, c.api->group_destroy(child));
        } else {
          std::string msg = c.api->last_error();
          EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << msg;
          EXPECT_EQ(child, nullptr);
          EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
          EXPECT_NE(msg.find("dlpg_group_create_subset"), std::string::npos) << msg;
        }
      }
      Meet(c, "round " + std::to_string(round));
      DLPG_EXPECT_OK(c.api, c.api->group_destroy(parent));
    }
  }, ro);
}

INSTANTIATE_TEST_SUITE_P(Modes, SubsetModes,
                         ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode> &i) {
                           return std::string(ModeName(i.param));
                         });

// Bad input at the door, each refused with a message naming it; the parent still usable.
TEST(SubsetArgs, RefusedAtTheDoor) {
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    dlpg_group_t *child = nullptr;
    int me[1] = {c.rank}, both[2] = {0, 1};
    auto refused = [&](dlpg_status_t s, const char *word) {
      EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << word;
      EXPECT_NE(std::string(c.api->last_error()).find(word), std::string::npos)
          << word << ": " << c.api->last_error();
    };
    refused(c.api->group_create_subset(nullptr, 1, me, nullptr, &child), "parent");
    refused(c.api->group_create_subset(c.group, 1, nullptr, nullptr, &child), "ranks");
    refused(c.api->group_create_subset(c.group, 1, me, nullptr, nullptr), "child");
    refused(c.api->group_create_subset(c.group, 0, me, nullptr, &child), "n is 0");
    refused(c.api->group_create_subset(c.group, 3, both, nullptr, &child), "n is 3");
    int out_of_range[2] = {c.rank, 2};
    refused(c.api->group_create_subset(c.group, 2, out_of_range, nullptr, &child),
            "ranks[1] is 2");
    int twice[2] = {c.rank, c.rank};
    refused(c.api->group_create_subset(c.group, 2, twice, nullptr, &child), "both");
    int other[1] = {1 - c.rank};
    refused(c.api->group_create_subset(c.group, 1, other, nullptr, &child), "not among");
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = std::numeric_limits<double>::infinity();
    refused(c.api->group_create_subset(c.group, 1, me, &o, &child), "timeout_s");
    DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
    refused(c.api->group_create_subset(c.group, 1, me, nullptr, &child), "batch");
    DLPG_EXPECT_OK(c.api, c.api->group_end(c.group));
    EXPECT_EQ(child, nullptr);
    // Still usable: the pair, in reversed order.
    int rev[2] = {1, 0};
    DLPG_ASSERT_OK(c.api, c.api->group_create_subset(c.group, 2, rev, nullptr, &child));
    CheckChild(c, child, {1, 0}, Mix(c.seed, 3), kChildElems, "after refusals");
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(child));
  });
}

}  // namespace
