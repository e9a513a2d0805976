// White-box tests of the scoped rendezvous (plugin/core/group/rendezvous.c) and of the Gloo
// context's creation over it: a store that outlives many jobs
// under one group name, keys removed after a creation, a rank claimed twice, world sizes
// that differ, a missing rank and rank 0 named, and a peer that published its address and
// vanished ending within the group's timeout + 1 s. Ranks are threads over the real TCP
// store on 127.0.0.1.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gloo/transport/tcp/address.h>

#include "../conformance/time_scale.h"
#include "gloo/c_headers.h"
#include "base/clock.h"
#include "core/group/rendezvous.h"
#include "gloo/ctx.h"
#include "gloo/p2p.h"

namespace {

struct Served {
  dlpg_store_t *server = nullptr;
  int port = 0;
  Served() {
    EXPECT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &server), DLPG_OK) << dlpg_last_error();
    EXPECT_EQ(dlpg_store_port(server, &port), DLPG_OK);
  }
  ~Served() { dlpg_store_close(server); }
  dlpg_store_t *Client() {
    dlpg_store_t *s = nullptr;
    std::string url = "tcp://127.0.0.1:" + std::to_string(port);
    EXPECT_EQ(dlpg_store_open(url.c_str(), 30, &s), DLPG_OK) << dlpg_last_error();
    return s;
  }
  bool Exists(const std::string &key) {
    const char *k = key.c_str();
    int e = 0;
    EXPECT_EQ(dlpg_store_check(server, &k, 1, &e), DLPG_OK);
    return e != 0;
  }
};

struct Result {
  dlpg_status_t st = DLPG_OK;
  std::string msg, scope;
  double secs = 0;
};

// Run dlpg__rendezvous_begin as the given (rank, size) claims, one thread each; with end,
// every successful rank then calls dlpg__rendezvous_end.
std::vector<Result> Begin(Served &s, const std::string &base, std::vector<std::pair<int, int>> claims,
                          double timeout_s, bool end = true, std::vector<double> delays = {}) {
  std::vector<Result> out(claims.size());
  std::vector<std::thread> th;
  for (size_t i = 0; i < claims.size(); i++)
    th.emplace_back([&, i] {
      if (i < delays.size()) std::this_thread::sleep_for(std::chrono::duration<double>(delays[i]));
      dlpg_store_t *c = s.Client();
      char scope[DLPG__RDV_SCOPE_MAX] = {0};
      double t0 = dlpg__now();
      out[i].st = dlpg__rendezvous_begin(c, base.c_str(), "test rendezvous", claims[i].first,
                                         claims[i].second, t0 + timeout_s, nullptr, scope);
      out[i].secs = dlpg__now() - t0;
      out[i].msg = out[i].st == DLPG_OK ? "" : dlpg_last_error();
      out[i].scope = scope;
      if (out[i].st == DLPG_OK && end) {
        static const char *const keys[] = {"addr/%d"};
        dlpg__rendezvous_end(c, scope, claims[i].first, claims[i].second, keys, 1);
      }
      dlpg_store_close(c);
    });
  for (auto &t : th) t.join();
  return out;
}

bool Has(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

TEST(Rendezvous, EachCreationHasItsOwnScopeAndLeavesNoKeys) {
  Served s;
  std::string first;
  for (int job = 0; job < 3; job++) {
    auto r = Begin(s, "job/gloo", {{0, 3}, {1, 3}, {2, 3}}, 10);
    for (auto &x : r) {
      EXPECT_EQ(x.st, DLPG_OK) << x.msg;
      EXPECT_EQ(x.scope, r[0].scope);
    }
    EXPECT_EQ(r[0].scope, "job/gloo/g" + std::to_string(job + 1));
    // Nothing of the creation is left; per group name only the generation counter, the
    // last generation and each rank's latest hello stay (overwritten by the next job).
    for (int k = 0; k < 3; k++) {
      EXPECT_FALSE(s.Exists(r[0].scope + "/claim/" + std::to_string(k)));
      EXPECT_FALSE(s.Exists(r[0].scope + "/" + std::to_string(k)));
    }
    EXPECT_FALSE(s.Exists(r[0].scope + "/go"));
    EXPECT_FALSE(s.Exists(r[0].scope + "/go/v"));
    EXPECT_FALSE(s.Exists(r[0].scope + "/out"));
    EXPECT_TRUE(s.Exists("job/gloo/gen"));
  }
}

// A job whose rank 2 never came leaves its hellos and claims behind; the next job under
// the same name (another world size even) is not confused by them.
TEST(Rendezvous, AFailedJobDoesNotDisturbTheNext) {
  Served s;
  auto bad = Begin(s, "j/gloo", {{0, 3}, {1, 3}}, 1.0);
  EXPECT_EQ(bad[0].st, DLPG_ERR_TIMEOUT);
  EXPECT_TRUE(Has(bad[0].msg, "rank 2 of 3 had not started it")) << bad[0].msg;
  EXPECT_EQ(bad[1].st, DLPG_ERR_TIMEOUT);
  EXPECT_TRUE(Has(bad[1].msg, "rank 2 of 3 had not started it")) << bad[1].msg;
  EXPECT_LT(bad[0].secs, Scaled(1.0 + 4.0));  // its 1 s deadline, not a hang
  EXPECT_LT(bad[1].secs, Scaled(1.0 + 4.0));
  auto good = Begin(s, "j/gloo", {{0, 2}, {1, 2}}, 10);
  for (auto &x : good) EXPECT_EQ(x.st, DLPG_OK) << x.msg;
  EXPECT_EQ(good[0].scope, good[1].scope);
  EXPECT_NE(good[0].scope, bad[0].scope);
}

TEST(Rendezvous, TwoProcessesClaimingOneRank) {
  Served s;
  // Both at once, and the second 0.3 s late (after rank 0 may have finished admitting).
  // At least one of the two processes of rank 1 fails naming the duplicate (both when rank
  // 0 saw both before it started the group, then every rank fails naming it); the one
  // rank 0 never answered learns it at its deadline.
  auto names_dup = [](const std::string &m) {
    return Has(m, "two processes claim rank 1") || Has(m, "another process claims rank 1");
  };
  for (double late : {0.0, 0.3}) {
    auto r = Begin(s, "dup/gloo", {{0, 3}, {1, 3}, {1, 3}, {2, 3}}, 2, true, {0, 0, late, 0});
    EXPECT_FALSE(r[1].st == DLPG_OK && r[2].st == DLPG_OK);
    EXPECT_TRUE(names_dup(r[1].msg) || names_dup(r[2].msg)) << r[1].msg << " | " << r[2].msg;
    for (auto &x : r) {
      EXPECT_LT(x.secs, Scaled(2.0 + 5.0));  // at most its 2 s deadline, not a hang
      if (x.st != DLPG_OK) {
        EXPECT_TRUE(names_dup(x.msg)) << x.msg;
      }
    }
  }
}

// Every rank learns of the disagreement when rank 0 has seen all claims, long before the
// deadline: a 60 s deadline and a bound far below it leave a busy machine room to start the
// three threads (a 5 s deadline with a 3 s bound did not).
TEST(Rendezvous, WorldSizesDifferNamesWhoClaimsWhat) {
  Served s;
  auto r = Begin(s, "ws/gloo", {{0, 3}, {1, 2}, {2, 3}}, 60);
  for (auto &x : r) {
    EXPECT_EQ(x.st, DLPG_ERR_INVALID_ARGUMENT) << x.msg;
    EXPECT_TRUE(Has(x.msg, "world sizes differ: rank 0 has world size 3; rank 1 has 2")) << x.msg;
    EXPECT_LT(x.secs, Scaled(30.0)) << "waited for the deadline instead of failing on the claims";
  }
  // A rank beyond rank 0's world, at once and after ranks 0 and 1 have finished (rank 0
  // then never sees its hello: a loaded CI machine started that thread late and the rank
  // was told another process claimed it).
  for (double late : {0.0, 0.5}) {
    auto r2 = Begin(s, "ws2/gloo", {{0, 2}, {1, 2}, {2, 3}}, 2, true, {0, 0, late});
    EXPECT_EQ(r2[2].st, DLPG_ERR_INVALID_ARGUMENT) << r2[2].msg;
    EXPECT_TRUE(Has(r2[2].msg, "rank 2 claims world size 3 but rank 0 has world size 2"))
        << r2[2].msg;
    EXPECT_FALSE(Has(r2[2].msg, "another process")) << r2[2].msg;
  }
}

TEST(Rendezvous, RankZeroMissingOrLate) {
  Served s;
  auto r = Begin(s, "late/gloo", {{1, 2}}, 1.0);
  EXPECT_EQ(r[0].st, DLPG_ERR_TIMEOUT);
  EXPECT_TRUE(Has(r[0].msg, "rank 0 did not admit this rank")) << r[0].msg;
  EXPECT_LT(r[0].secs, Scaled(1.0 + 4.0));
  // Late, well within the timeout: fine.
  auto ok = Begin(s, "late2/gloo", {{0, 2}, {1, 2}}, 30, true, {1.0, 0});
  for (auto &x : ok) EXPECT_EQ(x.st, DLPG_OK) << x.msg;
}

TEST(Rendezvous, AbortEndsTheWait) {
  Served s;
  dlpg_store_t *c = s.Client();
  atomic_int aborted{0};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    aborted.store(1);
  });
  char scope[DLPG__RDV_SCOPE_MAX];
  double t0 = dlpg__now();
  EXPECT_EQ(dlpg__rendezvous_begin(c, "ab/gloo", "test", 0, 2, t0 + 10, &aborted, scope),
            DLPG_ERR_ABORTED);
  EXPECT_LT(dlpg__now() - t0, Scaled(5.0));  // the abort at 0.2 s, not the 10 s deadline
  t.join();
  dlpg_store_close(c);
}

// Found 4: a peer that joined, published an address nobody listens on, and vanished. Rank 0
// must end within its timeout + a few seconds (Gloo alone waits 5x its timeout per pair),
// naming it.
TEST(GlooRendezvous, VanishedPeerEndsWithinTheDeadline) {
  Served s;
  const double timeout = 2.0;
  int quiet_fd = -1;
  std::thread fake([&] {
    dlpg_store_t *c = s.Client();
    char scope[DLPG__RDV_SCOPE_MAX];
    ASSERT_EQ(dlpg__rendezvous_begin(c, "v/gloo", "fake rank 1", 1, 2, dlpg__now() + 10, nullptr,
                                     scope),
              DLPG_OK)
        << dlpg_last_error();
    // An address nobody listens on: a socket bound but never listening, held until the
    // test ends, so no other process can take the port meanwhile (a connect is refused).
    quiet_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(quiet_fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    socklen_t al = sizeof a;
    getsockname(quiet_fd, reinterpret_cast<sockaddr *>(&a), &al);
    struct sockaddr_storage ss {};
    memcpy(&ss, &a, sizeof a);
    // Both orders of the pair are tried across runs: a lower address than rank 0's makes
    // rank 0 the listener (it waits), a higher one makes it connect (refused).
    std::vector<char> bytes = ::gloo::transport::tcp::Address(ss, 0).bytes();
    std::string host = "fakehost";
    std::string k1 = std::string(scope) + "/rank_1", k2 = std::string(scope) + "/1";
    dlpg_store_set(c, k1.c_str(), host.data(), host.size());
    dlpg_store_set(c, k2.c_str(), bytes.data(), bytes.size());
    dlpg_store_close(c);
  });
  // The group's mesh as the backend makes it (its state, then the mesh at the first collective).
  dlpg__gloo_group_t *gg = nullptr;
  dlpg__gloo_ctx_t *ctx = nullptr;
  double t0 = dlpg__now();
  ASSERT_EQ(dlpg__gloo_group_create(s.server, "v", 0, 2, timeout, &gg), DLPG_OK) << dlpg_last_error();
  dlpg_status_t st = dlpg__gloo_group_mesh(gg, &ctx);
  double secs = dlpg__now() - t0;
  fake.join();
  if (quiet_fd >= 0) close(quiet_fd);
  EXPECT_NE(st, DLPG_OK);
  EXPECT_EQ(ctx, nullptr);
  // Within its deadline plus slack, and always below what Gloo alone would take (5 x timeout).
  EXPECT_LT(secs, std::min(Scaled(timeout + 3.0), 4.5 * timeout)) << dlpg_last_error();
  EXPECT_TRUE(Has(dlpg_last_error(), "rank 1")) << dlpg_last_error();
  printf("vanished peer: %s after %.2f s: %s\n", dlpg_status_name(st), secs, dlpg_last_error());
  dlpg__gloo_group_destroy(gg);
}

// Found 3 end to end: two jobs, one after the other, on one long-lived store with the same
// group name, the first leaving stale Gloo addresses (a context that was never destroyed
// cleanly): the second connects.
TEST(GlooRendezvous, SecondJobOnALongLivedStore) {
  Served s;
  for (int job = 0; job < 2; job++) {
    std::vector<dlpg__gloo_group_t *> gg(3, nullptr);
    std::vector<std::thread> th;
    std::vector<dlpg_status_t> st(3, DLPG_OK);
    for (int r = 0; r < 3; r++)
      th.emplace_back([&, r] {
        dlpg_store_t *c = s.Client();
        dlpg__gloo_ctx_t *mesh = nullptr;
        st[r] = dlpg__gloo_group_create(c, "same", r, 3, 10, &gg[r]);
        if (st[r] == DLPG_OK) st[r] = dlpg__gloo_group_mesh(gg[r], &mesh);
        if (st[r] != DLPG_OK) ADD_FAILURE() << "job " << job << " rank " << r << ": " << dlpg_last_error();
        dlpg_store_close(c);
      });
    for (auto &t : th) t.join();
    for (auto *g : gg) dlpg__gloo_group_destroy(g);
    EXPECT_FALSE(s.Exists("same/gloo/g" + std::to_string(job + 1) + "/0"));
    EXPECT_FALSE(s.Exists("same/gloo/g" + std::to_string(job + 1) + "/rank_2"));
  }
}

}  // namespace
