// The pair engine (plugin/shm/pair.h) on its own: two forked ranks make a pair segment with
// nobody else (a third rank of the harness stays away), transfers match by tag whatever the
// order (small, large far above the 4 KiB chunks, empty), blocking transfers run on the
// caller's thread while a serving thread progresses the posted ones, a size mismatch fails
// the receive and leaves the pair usable, a rank in another network namespace makes both
// fail alike with DLPG_ERR_UNSUPPORTED (the fallback signal), kill -9 of the peer
// mid-transfer is named within the timeout (+1 s), a peer that destroys its pair is named
// as having left, abort wakes a blocked transfer, and nothing appears in /dev/shm.
#include "test_shm_util.h"

#include <sched.h>

#include <atomic>
#include <mutex>

extern "C" {
#include "base/clock.h"
#include "shm/pair.h"
}

using namespace shmtest;

namespace {

bool Has(const std::string &hay, const std::string &needle) {
  return hay.find(needle) != std::string::npos;
}

// A transfer and what became of it.
struct Xfer {
  dlpg__shm_xfer_t x{};
  std::atomic<int> done{0};
  dlpg_status_t st = DLPG_OK;
  std::string msg;
};

void OnDone(dlpg__shm_xfer_t *x, dlpg_status_t st, const char *msg) {
  Xfer *t = static_cast<Xfer *>(x->user);
  t->st = st;
  t->msg = msg ? msg : "";
  t->done.store(1);
}

void Init(Xfer &t, bool send, void *buf, size_t n, int tag, double timeout) {
  t.x.send = send;
  t.x.buf = buf;
  t.x.nbytes = n;
  t.x.tag = tag;
  t.x.deadline = dlpg__now() + timeout;
  t.x.fn = send ? "dlpg_send" : "dlpg_recv";
  t.x.done = OnDone;
  t.x.user = &t;
}

bool WaitDone(Xfer &t, double s) {
  double end = Now() + s;
  while (!t.done.load() && Now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return t.done.load();
}

// A pair of rank k and peer with a serving thread, both gone at scope exit.
struct Pair {
  dlpg__shm_pair_t *p = nullptr;
  int stop = 0;
  std::thread th;
  dlpg_status_t st;
  Pair(Rank &k, int peer, const std::string &prefix, size_t slot = 4096, double timeout = Scaled(20),
       size_t stage = 0) {
    dlpg__shm_pair_config_t cfg{slot, stage, timeout, -1, nullptr};
    st = dlpg__shm_pair_create(k.store, prefix.c_str(), k.rank, peer, &cfg, &p);
    if (p) th = std::thread([this] { dlpg__shm_pair_serve(p, &stop); });
  }
  ~Pair() { Close(); }
  void Close() {
    if (!p) return;
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    dlpg__shm_pair_kick(p);
    th.join();
    dlpg__shm_pair_destroy(p);
    p = nullptr;
  }
};

const size_t kSizes[] = {0, 1, 100, 4096, 4097, 50000, 1 << 20, 3u << 20};

TEST(ShmPair, TagsMatchInAnyOrderAndLargeMessagesPipeline) {
  ASSERT_TRUE(DevShmDlpg().empty());
  Opts o;
  o.create = false;
  auto codes = RunRanks(3, o, [](Rank &k) {
    if (k.rank == 2) return;  // the pair needs only its two ranks
    Pair pr(k, 1 - k.rank, "pairtest/a");
    ASSERT_EQ(pr.st, DLPG_OK) << dlpg_last_error();
    EXPECT_TRUE(DevShmDlpg().empty()) << "a pair segment has a name in /dev/shm";
    const int n = sizeof kSizes / sizeof kSizes[0];
    for (int round = 0; round < 2; round++) {
      if (k.rank == 0) {
        // Posted in tag order; round 1 also sends a second message on tag 0.
        std::vector<std::vector<uint8_t>> data;
        std::vector<Xfer> xs(n + 1);
        for (int i = 0; i < n; i++) data.push_back(Bytes(10 * round + i, 0, kSizes[i]));
        data.push_back(Bytes(99, 0, 12345));
        for (int i = 0; i <= n; i++) {
          Init(xs[i], true, data[i].data(), data[i].size(), i == n ? 0 : i, Scaled(20));
          dlpg__shm_pair_post(pr.p, &xs[i].x);
        }
        for (int i = 0; i <= n; i++) {
          ASSERT_TRUE(WaitDone(xs[i], Scaled(30))) << "send " << i;
          EXPECT_EQ(xs[i].st, DLPG_OK) << xs[i].msg;
        }
      } else {
        // Received in reverse tag order, blocking on this thread (the serving thread
        // meanwhile stages what arrives first); the second tag-0 message comes last.
        for (int i = n - 1; i >= -1; i--) {
          int tag = i < 0 ? 0 : i;
          size_t len = i < 0 ? 12345 : kSizes[i];
          std::vector<uint8_t> got(len, 0xEE);
          Xfer x;
          Init(x, false, got.data(), len, tag, Scaled(20));
          dlpg__shm_pair_run(pr.p, &x.x);
          ASSERT_EQ(x.done.load(), 1);
          EXPECT_EQ(__atomic_load_n(&x.x.finished, __ATOMIC_ACQUIRE), 1);
          ASSERT_EQ(x.st, DLPG_OK) << x.msg;
          EXPECT_TRUE(got == (i < 0 ? Bytes(99, 0, 12345) : Bytes(10 * round + i, 0, len)))
              << "tag " << tag << " (" << len << " bytes)";
          if (i == 0) {  // the first tag-0 message, then the second
            Xfer y;
            std::vector<uint8_t> got2(12345);
            Init(y, false, got2.data(), got2.size(), 0, Scaled(20));
            dlpg__shm_pair_run(pr.p, &y.x);
            EXPECT_EQ(y.st, DLPG_OK) << y.msg;
            EXPECT_TRUE(got2 == Bytes(99, 0, 12345));
            break;
          }
        }
      }
    }
  });
  ExpectAllPass(codes);
  EXPECT_TRUE(DevShmDlpg().empty());
}

// Both ranks post a receive, then a send (a ring of two), with handles, and large payloads
// both ways at once; then a size mismatch, then a matching transfer on the same pair.
TEST(ShmPair, BothWaysAndMismatchLeavesThePairUsable) {
  Opts o;
  o.create = false;
  auto codes = RunRanks(2, o, [](Rank &k) {
    Pair pr(k, 1 - k.rank, "pairtest/b");
    ASSERT_EQ(pr.st, DLPG_OK) << dlpg_last_error();
    std::vector<uint8_t> out = Bytes(7, k.rank, 5u << 20), in(5u << 20);
    Xfer r, s;
    Init(r, false, in.data(), in.size(), 1, Scaled(20));
    Init(s, true, out.data(), out.size(), 1, Scaled(20));
    dlpg__shm_pair_post(pr.p, &r.x);
    dlpg__shm_pair_post(pr.p, &s.x);
    ASSERT_TRUE(WaitDone(r, Scaled(30)) && WaitDone(s, Scaled(30)));
    EXPECT_EQ(r.st, DLPG_OK) << r.msg;
    EXPECT_EQ(s.st, DLPG_OK) << s.msg;
    EXPECT_TRUE(in == Bytes(7, 1 - k.rank, 5u << 20));
    for (size_t n : {size_t(40), size_t(200000)}) {
      std::vector<uint8_t> b = Bytes(n, 0, n + (k.rank ? 4 : 0));
      Xfer x;
      Init(x, k.rank == 0, b.data(), b.size(), 2, Scaled(20));
      dlpg__shm_pair_run(pr.p, &x.x);
      if (k.rank == 1) {
        EXPECT_EQ(x.st, DLPG_ERR_INVALID_ARGUMENT) << x.msg;
        EXPECT_TRUE(Has(x.msg, "rank 1 posted " + std::to_string(n + 4) + " bytes (" +
                        std::to_string(n + 4) + " x int8) from rank 0, tag 2, but rank 0 sent " +
                        std::to_string(n) + " bytes")) << x.msg;
      } else if (n > 4096) {
        EXPECT_EQ(x.st, DLPG_ERR_INVALID_ARGUMENT) << x.msg;  // a large one is refused
      } else {
        EXPECT_EQ(x.st, DLPG_OK) << x.msg;  // a small one left whole
      }
      std::vector<uint8_t> c = Bytes(n + 1, 0, 999), d(999);
      Xfer y;
      Init(y, k.rank == 0, k.rank == 0 ? c.data() : d.data(), 999, 3, Scaled(20));
      dlpg__shm_pair_run(pr.p, &y.x);
      EXPECT_EQ(y.st, DLPG_OK) << y.msg;
      if (k.rank == 1) {
        EXPECT_TRUE(d == c);
      }
    }
  });
  ExpectAllPass(codes);
}

// A rank in another network namespace cannot reach the lower rank's socket: both ranks
// fail alike with DLPG_ERR_UNSUPPORTED, so both fall back for this pair.
TEST(ShmPair, OtherNetworkNamespaceFailsBothAlike) {
  {
    pid_t p = fork();
    if (p == 0) _exit(unshare(CLONE_NEWNET) == 0 ? 0 : 1);
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) GTEST_SKIP() << "unshare(CLONE_NEWNET) not permitted";
  }
  Opts o;
  o.create = false;
  auto codes = RunRanks(2, o, [](Rank &k) {
    if (k.rank == 1) {
      ASSERT_EQ(unshare(CLONE_NEWNET), 0);
    }
    Pair pr(k, 1 - k.rank, "pairtest/netns", 4096, Scaled(10));
    EXPECT_EQ(pr.st, DLPG_ERR_UNSUPPORTED) << dlpg_last_error();
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 1 cannot reach rank 0's socket")) << dlpg_last_error();
  });
  ExpectAllPass(codes);
}

// kill -9 of the sender while it streams a large message: the receiver fails naming the
// rank within the timeout + 1 s.
TEST(ShmPair, KillNineMidTransferIsNamed) {
  Opts o;
  o.create = false;
  o.name = "pairkill";
  o.parent = [](const std::vector<pid_t> &pids, Store &st) {
    size_t len;
    char buf[8];
    ASSERT_EQ(dlpg_store_get(st.s, "pairkill/streaming", Scaled(20), buf, sizeof buf, &len), DLPG_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(pids[0], SIGKILL);
  };
  auto codes = RunRanks(2, o, [](Rank &k) {
    const double timeout = 5;
    Pair pr(k, 1 - k.rank, "pairkill/p", 4096, timeout);
    ASSERT_EQ(pr.st, DLPG_OK) << dlpg_last_error();
    if (k.rank == 0) {
      // Sends without end; the receiver takes the first ones, then stops taking.
      std::vector<uint8_t> b(1 << 20, 1);
      for (int i = 0;; i++) {
        Xfer x;
        Init(x, true, b.data(), b.size(), 0, 1e9);
        if (i == 2) dlpg_store_set(k.store, "pairkill/streaming", "1", 1);
        dlpg__shm_pair_run(pr.p, &x.x);
      }
    }
    std::vector<uint8_t> b(1 << 20);
    for (int i = 0; i < 2; i++) {
      Xfer x;
      Init(x, false, b.data(), b.size(), 0, Scaled(20));
      dlpg__shm_pair_run(pr.p, &x.x);
      ASSERT_EQ(x.st, DLPG_OK) << x.msg;
    }
    // A receive of a tag the sender never uses: only the sender's death can end it early.
    Xfer x;
    Init(x, false, b.data(), b.size(), 9, dlpg__now() + timeout);
    x.x.deadline = dlpg__now() + timeout;
    double t0 = Now();
    dlpg__shm_pair_run(pr.p, &x.x);
    EXPECT_EQ(x.st, DLPG_ERR_REMOTE) << x.msg;
    EXPECT_TRUE(Has(x.msg, "rank 0 (pid ")) << x.msg;
    EXPECT_TRUE(Has(x.msg, "died")) << x.msg;
    EXPECT_TRUE(Has(x.msg, "tag 9")) << x.msg;
    EXPECT_LT(Now() - t0, timeout + 1.0);
  });
  EXPECT_EQ(codes[0], 128 + SIGKILL);
  EXPECT_EQ(codes[1], 0);
  EXPECT_TRUE(DevShmDlpg().empty());
}

// A peer that destroys its pair is named as having left; a missing transfer times out
// naming the peer and the tag; abort from another thread wakes a blocked receive.
TEST(ShmPair, LeftTimeoutAndAbort) {
  Opts o;
  o.create = false;
  o.name = "pairlife";
  auto codes = RunRanks(2, o, [](Rank &k) {
    {
      Pair pr(k, 1 - k.rank, "pairlife/a", 4096, Scaled(20));
      ASSERT_EQ(pr.st, DLPG_OK) << dlpg_last_error();
      if (k.rank == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        pr.Close();  // rank 1 waits in a receive meanwhile
      } else {
        std::vector<uint8_t> b(10);
        Xfer x;
        Init(x, false, b.data(), b.size(), 4, Scaled(20));
        dlpg__shm_pair_run(pr.p, &x.x);
        EXPECT_EQ(x.st, DLPG_ERR_REMOTE) << x.msg;
        EXPECT_TRUE(Has(x.msg, "rank 0 (pid ")) << x.msg;
        EXPECT_TRUE(Has(x.msg, "left the group")) << x.msg;
      }
    }
    Pair pr(k, 1 - k.rank, "pairlife/b", 4096, Scaled(20));
    ASSERT_EQ(pr.st, DLPG_OK) << dlpg_last_error();
    std::vector<uint8_t> b(10);
    if (k.rank == 1) {
      Xfer x;
      Init(x, false, b.data(), b.size(), 6, 1.0);
      double t0 = Now();
      dlpg__shm_pair_run(pr.p, &x.x);
      EXPECT_EQ(x.st, DLPG_ERR_TIMEOUT) << x.msg;
      EXPECT_TRUE(Has(x.msg, "rank 0's send with tag 6")) << x.msg;
      EXPECT_LT(Now() - t0, Scaled(5));
      // Abort from another thread ends a blocked receive at once.
      Xfer y;
      Init(y, false, b.data(), b.size(), 7, Scaled(60));
      std::thread ab([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        dlpg__shm_pair_abort(pr.p);
      });
      t0 = Now();
      dlpg__shm_pair_run(pr.p, &y.x);
      ab.join();
      EXPECT_EQ(y.st, DLPG_ERR_ABORTED) << y.msg;
      EXPECT_LT(Now() - t0, Scaled(5));
      dlpg_store_set(k.store, "pairlife/aborted", "1", 1);
    } else {
      // The peer's abort reaches a receive here too, naming rank 1.
      Xfer x;
      Init(x, false, b.data(), b.size(), 8, Scaled(30));
      dlpg__shm_pair_run(pr.p, &x.x);
      EXPECT_EQ(x.st, DLPG_ERR_REMOTE) << x.msg;
      EXPECT_TRUE(Has(x.msg, "rank 1 (pid ")) << x.msg;
      EXPECT_TRUE(Has(x.msg, "was aborted")) << x.msg;
    }
  });
  ExpectAllPass(codes);
}

}  // namespace
