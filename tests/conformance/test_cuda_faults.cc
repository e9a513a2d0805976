// CUDA conformance tests, failures and cleanup: a missing peer times out, abort wakes a
// waiter, mismatched device counts and bitwise ops fail clearly, and create/use/destroy
// cycles leak no file descriptors. Every scenario runs in forked children under its own
// deadline; tests skip when the machine has fewer GPUs than they need. The operations are
// in test_cuda_ops.cc; both build into test_cuda.
#include "cuda_matrix.h"

namespace {

TEST(Cuda, MissingPeerTimesOut) {
  NEED_GPUS(1);
  // World 2 but only rank 0 exists: the first CUDA operation must fail with TIMEOUT within
  // the group's timeout (3 s), not hang.
  EXPECT_NO_FAILURES(RunProcs(1, 2, 60, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 2, "missing", 3);
    DevTensor x(0, DT::F32, 100);
    DLTensor *tx = x.dl();
    dlpg_work_t *w = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    dlpg_status_t s = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w);
    if (s == DLPG_OK) {
      s = e.api->work_wait(w, 0);
      e.api->work_free(w);
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CT_EXPECT(s == DLPG_ERR_TIMEOUT, "status " << e.api->status_name(s) << ": " << e.api->last_error());
    CT_EXPECT(dt < 20, "took " << dt << " s");
    e.api->group_destroy(g);
  }));
}

// Rank 0 starts an operation rank 1 never joins; another thread aborts the group while the
// kernel waits. kCold: an allreduce at a size never used before; kWarm: at a size both ranks
// used; kRecv: a receive from a peer both ranks exchanged with before (the peer never sends;
// a send is no good here: a 64 MiB send to a peer that never received was seen to complete).
enum class Stuck { kCold, kWarm, kRecv };

void AbortWhileWaiting(Stuck what) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [what](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "abort", 15);
    Matrix m{e.api, g, Layout{2, e.rank, {e.rank}}};
    m.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);  // both ranks: communicator ready
    const int64_t n = 1 << 20;
    if (what == Stuck::kWarm) m.Allreduce(DT::F32, DLPG_SUM, false, n, false);
    if (what == Stuck::kRecv) m.SendRecv(DT::F32, n);
    int64_t v = 0;
    if (e.rank == 0) {
      // Rank 1 never joins this one: the kernel waits until the group is aborted.
      DevTensor x(0, DT::F32, n);
      DLTensor *tx = x.dl();
      dlpg_work_t *w = nullptr;
      if (what == Stuck::kRecv)
        CT_OK(e.api, e.api->recv(g, tx, 1, 0, nullptr, &w));
      else
        CT_OK(e.api, e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w));
      std::thread ab([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        e.api->group_abort(g);
      });
      dlpg_status_t s = e.api->work_wait(w, 30);
      ab.join();
      CT_EXPECT(s == DLPG_ERR_ABORTED, "work_wait -> " << e.api->status_name(s) << ": " << e.api->last_error());
      e.api->work_free(w);
      dlpg_work_t *w2 = nullptr;
      s = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w2);
      if (s == DLPG_OK) s = e.api->work_wait(w2, 5), e.api->work_free(w2);
      CT_EXPECT(s == DLPG_ERR_ABORTED, "after abort: " << e.api->status_name(s));
      e.api->store_add(e.store, "abort/done", 1, &v);
    } else {
      for (int i = 0; i < 600 && v < 1; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        e.api->store_add(e.store, "abort/done", 0, &v);
      }
    }
    e.api->group_destroy(g);
  }));
}

TEST(Cuda, AbortWhileWaitingCold) { AbortWhileWaiting(Stuck::kCold); }
TEST(Cuda, AbortWhileWaitingWarm) { AbortWhileWaiting(Stuck::kWarm); }
TEST(Cuda, AbortWhileWaitingRecv) { AbortWhileWaiting(Stuck::kRecv); }

TEST(Cuda, MismatchedDeviceCountsFailClearly) {
  NEED_GPUS(2);
  // Rank 0 drives one GPU, rank 1 two: the rendezvous notices, and both ranks fail with
  // INVALID_ARGUMENT naming the counts instead of hanging in NCCL's init.
  EXPECT_NO_FAILURES(RunProcs(2, 2, 90, [](Env &e) {
    std::vector<int> devs = e.rank == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
    CT_CUDA(cudaSetDevice(devs[0]));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "mismatch", 20);
    std::vector<DevTensor *> ts;
    std::vector<DLTensor *> dl;
    for (int d : devs) ts.push_back(new DevTensor(d, DT::F32, 100)), dl.push_back(ts.back()->dl());
    dlpg_work_t *w = nullptr;
    dlpg_status_t s = e.api->allreduce(g, dl.data(), nullptr, (int)dl.size(), DLPG_SUM, nullptr, &w);
    std::string msg = s == DLPG_OK ? "" : e.api->last_error();
    if (s == DLPG_OK) {
      s = e.api->work_wait(w, 0);
      msg = e.api->last_error();
      e.api->work_free(w);
    }
    CT_EXPECT(s == DLPG_ERR_INVALID_ARGUMENT, e.api->status_name(s) << ": " << msg);
    CT_EXPECT(msg.find("rank 0 uses 1") != std::string::npos, msg);
    for (auto *t : ts) delete t;
    e.api->group_destroy(g);
  }));
}

TEST(Cuda, BitwiseIsUnsupported) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 60, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "bitwise");
    DevTensor x(0, DT::I32, 10);
    DLTensor *tx = x.dl();
    for (auto op : {DLPG_BAND, DLPG_BOR, DLPG_BXOR}) {
      dlpg_status_t s = e.api->allreduce(g, &tx, nullptr, 1, op, nullptr, nullptr);
      CT_EXPECT(s == DLPG_ERR_UNSUPPORTED, "op " << op << ": " << e.api->status_name(s));
    }
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

int CountFds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

TEST(Cuda, CreateUseDestroyCyclesLeakNothing) {
  NEED_GPUS(1);
  const char *env = getenv("DLPG_TEST_CYCLES");
  int cycles = env && atoi(env) > 0 ? atoi(env) : 200;
  EXPECT_NO_FAILURES(RunProcs(1, 1, 480, [cycles](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    size_t free0 = 0, free1 = 0, total = 0;
    int fd0 = 0;
    for (int c = 0; c < cycles; c++) {
      if (c == 5) {
        CT_CUDA(cudaMemGetInfo(&free0, &total));
        fd0 = CountFds();
      }
      std::string name = "cyc" + std::to_string(c);
      dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, name.c_str());
      Matrix m{e.api, g, Layout{1, 0, {0}}, (uint64_t)c};
      m.Allreduce(DT::F32, DLPG_SUM, false, 4096, c % 2 == 0);
      CT_OK(e.api, e.api->group_destroy(g));
    }
    CT_CUDA(cudaMemGetInfo(&free1, &total));
    int fd1 = CountFds();
    double lost_mib = ((double)free0 - (double)free1) / (1 << 20);
    fprintf(stderr, "cycles %d: GPU free memory change %.1f MiB, fds %d -> %d\n", cycles, -lost_mib, fd0, fd1);
    CT_EXPECT(lost_mib < 64, "GPU memory lost over " << cycles - 5 << " cycles: " << lost_mib << " MiB");
    CT_EXPECT(fd1 <= fd0 + 2, "open fds grew from " << fd0 << " to " << fd1);
  }));
}

}  // namespace
