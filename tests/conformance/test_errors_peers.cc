// Peers that disagree (dlpg.h "Tensors"): mismatched sizes, collectives and send/recv pairs
// across ranks end in an error on every rank with a message naming both sides, never a crash
// or a hang, and the group still works afterwards. The single-rank bad-input matrix is in
// test_errors_inputs.cc; both build into test_errors.
#include <dlfcn.h>

#include <initializer_list>
#include <thread>
#include <sstream>

#include "harness.h"

using namespace dlpgt;

namespace {

// Peers that disagree about a tensor's size: an error on every rank (INVALID_ARGUMENT where
// the mismatch is detected, else the group's timeout), never a crash or a hang. Processes,
// so a crash is contained and reported.
TEST(ErrorsPeers, MismatchedSizesAcrossRanks) {
  RunOptions ro;
  ro.group_timeout_s = 5;
  ro.deadline_s = 40;
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    HostTensor t(DT::F32, {c.rank == 0 ? 1000 : 1001});
    DLTensor *tp = t.dl();
    double t0 = NowSeconds();
    dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
    EXPECT_NE(s, DLPG_OK) << "rank " << c.rank << ": allreduce of 1000 vs 1001 elements succeeded";
    if (s != DLPG_OK) {
      EXPECT_STRNE(c.api->last_error(), "");
      if (s != DLPG_ERR_INVALID_ARGUMENT)
        printf("note: rank %d: size mismatch across ranks ended in %s: %s\n", c.rank,
               c.api->status_name(s), c.api->last_error());
    }
    EXPECT_LT(NowSeconds() - t0, Scaled(15.0));
  }, ro);
}

// A mismatch with the peers' tensors (dlpg.h "Tensors") is DLPG_ERR_INVALID_ARGUMENT on every
// rank, with a message naming the function, both ranks and both values; never a crash (Gloo
// terminates the process when a peer sends more than a receive posted) nor a hang; and the
// group still works for the next, matching operation.
namespace {

// Each rank calls op with its own side of the mismatch; both must fail with INV and a
// message holding every string of `want`; then a matching allreduce must still be right.
void ExpectPeerMismatch(RankCtx &c, const char *fn, const std::function<dlpg_status_t()> &op,
                        std::initializer_list<const char *> want, const std::string &what) {
  const dlpg_api_t *api = c.api;
  double t0 = NowSeconds();
  dlpg_status_t s = op();
  EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT)
      << "rank " << c.rank << ": " << what << " -> " << api->status_name(s) << ": "
      << (s == DLPG_OK ? "" : api->last_error());
  if (s != DLPG_OK) {
    std::string msg = api->last_error();
    EXPECT_NE(msg.find(fn), std::string::npos) << what << ": \"" << msg << "\"";
    for (const char *w : want)
      EXPECT_NE(msg.find(w), std::string::npos)
          << what << ": message lacks \"" << w << "\": \"" << msg << "\"";
  }
  EXPECT_LT(NowSeconds() - t0, Scaled(10.0)) << what;
  // The group must still work: a matching allreduce (small and large) gives the sum.
  for (int64_t n : {int64_t(5), int64_t(3000)}) {
    HostTensor t(DT::I32, {n});
    for (int64_t i = 0; i < n; i++) static_cast<int32_t *>(t.elems())[i] = int32_t(i + 7 * c.rank);
    DLTensor *tp = t.dl();
    DLPG_EXPECT_OK(api, api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    const int32_t *v = static_cast<const int32_t *>(t.elems());
    for (int64_t i = 0; i < n; i++) {
      int32_t want_v = 0;
      for (int r = 0; r < c.size; r++) want_v += int32_t(i + 7 * r);
      if (v[i] != want_v) {
        ADD_FAILURE() << what << ": allreduce after the mismatch: [" << i << "] = " << v[i]
                      << ", want " << want_v;
        break;
      }
    }
  }
}

}  // namespace

TEST(ErrorsPeers, MismatchedCollectivesAreInvalidArgument) {
  RunOptions ro;
  ro.group_timeout_s = 8;
  ro.deadline_s = 120;
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    const dlpg_api_t *api = c.api;
    dlpg_group_t *g = c.group;
    const bool r0 = c.rank == 0;
    // Element counts of each side: small (inline) and large (> 4 KiB) sizes, and a pair
    // that straddles the small-message threshold.
    const std::vector<std::pair<int64_t, int64_t>> sizes = {{10, 11}, {1000, 1001}, {1024, 1025},
                                                           {3000, 2000}};
    for (auto sz : sizes) {
      const int64_t n = r0 ? sz.first : sz.second;
      const std::string a = std::to_string(sz.first), b = std::to_string(sz.second);
      const std::string tag = " (" + a + " vs " + b + ")";
      HostTensor t(DT::F32, {n}), o(DT::F32, {n}), big(DT::F32, {2 * n});
      DLTensor *tp = t.dl(), *op = o.dl(), *bp = big.dl();
      ExpectPeerMismatch(c, "dlpg_allreduce", [&] {
        return api->allreduce(g, &tp, &op, 1, DLPG_SUM, nullptr, nullptr);
      }, {"rank 0", "rank 1", a.c_str(), b.c_str(), "float32"}, "allreduce" + tag);
      ExpectPeerMismatch(c, "dlpg_broadcast", [&] {
        return api->broadcast(g, &tp, nullptr, 1, 1, nullptr, nullptr);
      }, {"rank 0", "rank 1", a.c_str(), b.c_str()}, "broadcast" + tag);
      ExpectPeerMismatch(c, "dlpg_reduce", [&] {
        return api->reduce(g, &tp, &op, 1, DLPG_MAX, 0, nullptr, nullptr);
      }, {"rank 0", "rank 1", a.c_str(), b.c_str()}, "reduce" + tag);
      ExpectPeerMismatch(c, "dlpg_allgather", [&] {
        return api->allgather(g, &tp, &bp, 1, nullptr, nullptr);
      }, {"rank 0", "rank 1", a.c_str(), b.c_str()}, "allgather" + tag);
      ExpectPeerMismatch(c, "dlpg_reduce_scatter", [&] {
        return api->reduce_scatter(g, &bp, &tp, 1, DLPG_SUM, nullptr, nullptr);
      }, {"rank 0", "rank 1", a.c_str(), b.c_str()}, "reduce_scatter" + tag);
      ExpectPeerMismatch(c, "dlpg_alltoall", [&] {
        return api->alltoall(g, bp, big.dl(), nullptr, nullptr);
      }, {"rank 0", "rank 1"}, "alltoall" + tag);
    }
    // Same sizes, other fields.
    HostTensor f(DT::F32, {8}), i(DT::I32, {8}), f2(DT::F32, {8});
    DLTensor *fp = f.dl(), *ip = i.dl(), *f2p = f2.dl();
    ExpectPeerMismatch(c, "dlpg_allreduce", [&] {
      return api->allreduce(g, r0 ? &fp : &ip, nullptr, 1, DLPG_SUM, nullptr, nullptr);
    }, {"rank 0", "rank 1", "float32", "int32"}, "allreduce dtype");
    ExpectPeerMismatch(c, "dlpg_allreduce", [&] {
      return api->allreduce(g, &fp, nullptr, 1, r0 ? DLPG_SUM : DLPG_MAX, nullptr, nullptr);
    }, {"rank 0", "rank 1", "sum", "max"}, "allreduce reduce op");
    ExpectPeerMismatch(c, "dlpg_broadcast", [&] {
      return api->broadcast(g, &fp, nullptr, 1, r0 ? 0 : 1, nullptr, nullptr);
    }, {"rank 0", "rank 1", "root"}, "broadcast root");
    ExpectPeerMismatch(c, "dlpg_reduce", [&] {
      return api->reduce(g, &fp, &f2p, 1, DLPG_SUM, r0 ? 1 : 0, nullptr, nullptr);
    }, {"rank 0", "rank 1", "root"}, "reduce root");
    ExpectPeerMismatch(c, r0 ? "dlpg_allreduce" : "dlpg_broadcast", [&] {
      return r0 ? api->allreduce(g, &fp, nullptr, 1, DLPG_SUM, nullptr, nullptr)
                : api->broadcast(g, &fp, nullptr, 1, 0, nullptr, nullptr);
    }, {"rank 0", "rank 1", "dlpg_allreduce", "dlpg_broadcast"}, "allreduce vs broadcast");
  }, ro);
}

TEST(ErrorsPeers, MismatchedSendRecvIsInvalidArgument) {
  RunOptions ro;
  ro.group_timeout_s = 8;
  ro.deadline_s = 120;
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    const dlpg_api_t *api = c.api;
    dlpg_group_t *g = c.group;
    // {sent, posted} element counts (float32; the last case sends int32). A sender of at
    // most 4 KiB sends inline and does not learn of the mismatch (it may succeed); a larger
    // one waits for the receiver's answer and fails too.
    struct Case { int64_t sent, posted; bool int_sent; };
    const Case cases[] = {{101, 100, false}, {100, 101, false}, {3000, 2000, false},
                          {2000, 3000, false}, {100, 3000, false}, {3000, 100, false},
                          {2000, 2000, true}};
    int tag = 3;
    for (const Case &k : cases) {
      const std::string what = "send " + std::to_string(k.sent) + " / recv " +
                               std::to_string(k.posted) + (k.int_sent ? " (int32 sent)" : "");
      const bool small_sender = k.sent * 4 <= 4096;
      const double t0 = NowSeconds();
      dlpg_status_t s;
      if (c.rank == 0) {
        HostTensor t(k.int_sent ? DT::I32 : DT::F32, {k.sent});
        s = api->send(g, t.dl(), 1, tag, nullptr, nullptr);
        if (!(small_sender && s == DLPG_OK)) {
          EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << what << ": sender got " << api->status_name(s)
                                                  << ": " << (s ? api->last_error() : "");
          if (s != DLPG_OK) {
            std::string m = api->last_error();
            EXPECT_NE(m.find("dlpg_send"), std::string::npos) << m;
            EXPECT_NE(m.find(std::to_string(k.posted * 4)), std::string::npos) << m;
          }
        }
      } else {
        HostTensor t(DT::F32, {k.posted});
        s = api->recv(g, t.dl(), 0, tag, nullptr, nullptr);
        EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << what << ": receiver got " << api->status_name(s)
                                                << ": " << (s ? api->last_error() : "");
        if (s != DLPG_OK) {
          std::string m = api->last_error();
          EXPECT_NE(m.find("dlpg_recv"), std::string::npos) << m;
          // Both sides and both byte counts are named, and the tag (dlpg's sentence:
          // tests/unit/test_wording.cc).
          EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
          EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
          EXPECT_NE(m.find(std::to_string(k.posted * 4)), std::string::npos) << m;
          EXPECT_NE(m.find(std::to_string(k.sent * 4)), std::string::npos) << m;
          EXPECT_NE(m.find(std::to_string(tag)), std::string::npos) << m;
        }
      }
      EXPECT_LT(NowSeconds() - t0, Scaled(10.0)) << what;
      // A matching transfer on the same tag still works.
      for (int64_t n : {int64_t(7), int64_t(5000)}) {
        HostTensor t(DT::I64, {n});
        int64_t *v = static_cast<int64_t *>(t.elems());
        if (c.rank == 0) {
          for (int64_t i = 0; i < n; i++) v[i] = i * 3 + tag;
          DLPG_EXPECT_OK(api, api->send(g, t.dl(), 1, tag, nullptr, nullptr));
        } else {
          DLPG_EXPECT_OK(api, api->recv(g, t.dl(), 0, tag, nullptr, nullptr));
          for (int64_t i = 0; i < n; i++)
            if (v[i] != i * 3 + tag) {
              ADD_FAILURE() << what << ": recv after the mismatch: [" << i << "] = " << v[i];
              break;
            }
        }
      }
      tag++;
    }
  }, ro);
}

}  // namespace
