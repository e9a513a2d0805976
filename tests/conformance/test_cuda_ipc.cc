// The CUDA IPC path (plugin/nccl/ipc.h): ranks in forked processes that all drive cuda:0,
// which NCCL refuses ("Duplicate GPU detected"), so every operation here runs on the IPC
// path. Every op (the rooted and uneven ones too) and dtype (fp8 too, where the GPU has it)
// against host-computed references at 2, 3 and 4 ranks; small staging buffers so
// collectives and transfers move in many steps; CUDA graph capture and replay; a peer that
// dies is named within the group's timeout (plus a second), and the survivor's GPU still
// works; abort wakes a waiting kernel; 200 create/use/destroy cycles leak neither GPU memory
// nor file descriptors. Skips without a GPU.
#include <csignal>
#include <cstdlib>

#include "cuda_matrix.h"
#include "cuda_vmatrix.h"

namespace {

// Open file descriptors of this process.
int OpenFds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

void EveryOp(int world) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(world, world, 240, [world](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, world, "ipc_ops", 30);
    Matrix m{e.api, g, Layout{world, e.rank, {0}}};
    m.Run(/*full=*/true, /*fp8=*/WantFp8());
    e.api->group_destroy(g);
  }));
}

TEST(CudaIpc, EveryOpTwoRanks) { EveryOp(2); }
TEST(CudaIpc, EveryOpThreeRanks) { EveryOp(3); }
TEST(CudaIpc, EveryOpFourRanks) { EveryOp(4); }

// 64 KiB staging buffers (16 KiB mailboxes): every op below takes many steps or chunks,
// odd sizes leave a short last one, and the double buffering is reused many times.
TEST(CudaIpc, ChunkedThroughSmallStaging) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(3, 3, 240, [](Env &e) {
    setenv("DLPG_NCCL_IPC_CHUNK_BYTES", "65536", 1);
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 3, "ipc_chunks", 30);
    Matrix m{e.api, g, Layout{3, e.rank, {0}}};
    const int64_t n = 100003;  // 400 KB of float32: 7 steps
    m.Allreduce(DT::F32, DLPG_SUM, true, n, false);
    m.Allreduce(DT::BF16, DLPG_MAX, false, n, true);
    m.Allreduce(DT::F64, DLPG_AVG, false, n, false);
    m.ReduceScatter(DT::I32, DLPG_SUM, 30011);
    m.Reduce1(DT::F16, DLPG_MIN, 1, false, n);
    m.Allgather(DT::I64, 20011);
    m.Broadcast(DT::U8, 2, false, 300007);
    m.Alltoall(DT::F32, 20011);
    m.SendRecv(DT::F32, n);
    e.api->group_destroy(g);
  }));
}

// Kernel waits (what auto picks under MPS): steps of at most 64 KiB a rank run as one
// single-block kernel, larger ones as put and get kernels over the grid; both, mixed in one
// group, against the references. Without MPS every wait costs the GPU a time slice, so
// few operations.
TEST(CudaIpc, KernelWaitsOneBlockAndGridSteps) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(3, 3, 240, [](Env &e) {
    setenv("DLPG_NCCL_IPC_WAIT", "kernel", 1);
    setenv("DLPG_NCCL_IPC_CHUNK_BYTES", "1048576", 1);
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 3, "ipc_kernel_waits", 30);
    Matrix m{e.api, g, Layout{3, e.rank, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, true, 1001, false);     // one block
    m.Allreduce(DT::F32, DLPG_SUM, true, 270001, false);   // 1 MiB on the grid, then 32 KB
    m.Allreduce(DT::BF16, DLPG_MAX, false, 300007, true);  // 600 KB: grid, own streams
    m.ReduceScatter(DT::I32, DLPG_SUM, 3001);
    m.Broadcast(DT::U8, 2, false, 70001);
    m.Allgather(DT::I64, 2001);
    e.api->group_destroy(g);
  }));
}

// The rooted and uneven collectives (cuda_vmatrix.h) with 3 ranks on GPU 0: gather,
// scatter, allgatherv and alltoallv run as the path's sends and receives, reduce_scatter_v
// as one reduce per rank (premul_sum scaling each rank's input by its own factor).
TEST(CudaIpc, RootedAndUnevenThreeRanks) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(3, 3, 240, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 3, "ipc_vcoll", 30);
    vcoll::VMatrix m{e.api, g, 3, e.rank, 0};
    m.Run();
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

// A send and a receive each with a work handle, outside a batch, receive first: they run
// on the pair's internal streams, so the receive does not hold the send behind it.
TEST(CudaIpc, RecvBeforeSendWithWorks) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    setenv("DLPG_NCCL_IPC_CHUNK_BYTES", "65536", 1);
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ipc_ring", 30);
    const int64_t n = 50000;  // 200 KB: 13 chunks of 16 KiB
    int peer = 1 - e.rank;
    DevTensor snd(0, DT::F32, n), rcv(0, DT::F32, n);
    snd.Upload(Data(DT::F32, DLPG_SUM, 5, e.rank, n));
    dlpg_work_t *wr = nullptr, *ws = nullptr;
    CT_OK(e.api, e.api->recv(g, rcv.dl(), peer, 0, nullptr, &wr));
    CT_OK(e.api, e.api->send(g, snd.dl(), peer, 0, nullptr, &ws));
    Wait(e.api, ws);
    Wait(e.api, wr);
    CheckVec("recv", DT::F32, DLPG_SUM, rcv.Download(), Data(DT::F32, DLPG_SUM, 5, peer, n));
    e.api->group_destroy(g);
  }));
}

// Collectives and a send/receive pair captured into one CUDA graph after one eager
// operation (which makes and maps the memory), replayed three times on new inputs: each
// replay is a new exchange (the captured kernels number their steps on the device), right
// against the references; large ones move in several steps of the captured channel's
// smaller buffers, and eager operations between replays stay right.
TEST(CudaIpc, GraphCaptureReplays) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 180, [](Env &e) {
    setenv("DLPG_NCCL_IPC_CHUNK_BYTES", "1048576", 1);  // captured channel: 256 KiB buffers
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ipc_graph", 30);
    Matrix m{e.api, g, Layout{2, e.rank, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    const int peer = 1 - e.rank;
    const int64_t small = 1000, big = 300007, pn = 100003;  // 1.2 MB and 400 KB: many steps
    DevTensor a(0, DT::F32, small), b(0, DT::F32, big), bc(0, DT::F32, small);
    DevTensor gin(0, DT::F32, small), gout(0, DT::F32, 2 * small);
    DevTensor snd(0, DT::F32, pn), rcv(0, DT::F32, pn);
    cudaStream_t s;
    CT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *streams[1] = {s};
    DLTensor *ta = a.dl(), *tb = b.dl(), *tbc = bc.dl(), *tgi = gin.dl(), *tgo = gout.dl();
    CT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CT_OK(e.api, e.api->allreduce(g, &ta, nullptr, 1, DLPG_SUM, streams, nullptr));
    CT_OK(e.api, e.api->allreduce(g, &tb, nullptr, 1, DLPG_MAX, streams, nullptr));
    CT_OK(e.api, e.api->broadcast(g, &tbc, nullptr, 1, 1, streams, nullptr));
    CT_OK(e.api, e.api->allgather(g, &tgi, &tgo, 1, streams, nullptr));
    CT_OK(e.api, e.api->group_start(g));
    CT_OK(e.api, e.api->send(g, snd.dl(), peer, 0, s, nullptr));
    CT_OK(e.api, e.api->recv(g, rcv.dl(), peer, 0, s, nullptr));
    CT_OK(e.api, e.api->group_end(g));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CT_CUDA(cudaStreamEndCapture(s, &graph));
    CT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (uint64_t rep = 0; rep < 3; rep++) {
      uint64_t k = 100 + rep;
      a.Upload(Data(DT::F32, DLPG_SUM, k, e.rank, small));
      b.Upload(Data(DT::F32, DLPG_MAX, k, e.rank, big));
      bc.Upload(Data(DT::F32, DLPG_SUM, k + 10, e.rank, small));
      gin.Upload(Data(DT::F32, DLPG_SUM, k + 20, e.rank, small));
      snd.Upload(Data(DT::F32, DLPG_SUM, k + 30, e.rank, pn));
      CT_CUDA(cudaDeviceSynchronize());
      CT_CUDA(cudaGraphLaunch(exec, s));
      CT_CUDA(cudaStreamSynchronize(s));
      auto sum = Data(DT::F32, DLPG_SUM, k, 0, small), s1 = Data(DT::F32, DLPG_SUM, k, 1, small);
      for (size_t j = 0; j < sum.size(); j++) sum[j] += s1[j];
      auto mx = Data(DT::F32, DLPG_MAX, k, 0, big), m1 = Data(DT::F32, DLPG_MAX, k, 1, big);
      for (size_t j = 0; j < mx.size(); j++) mx[j] = std::max(mx[j], m1[j]);
      auto gw = Data(DT::F32, DLPG_SUM, k + 20, 0, small), g1 = Data(DT::F32, DLPG_SUM, k + 20, 1, small);
      gw.insert(gw.end(), g1.begin(), g1.end());
      CheckVec(CT_STR("captured allreduce, replay " << rep), DT::F32, DLPG_SUM, a.Download(), sum);
      CheckVec(CT_STR("captured max allreduce, replay " << rep), DT::F32, DLPG_MAX, b.Download(), mx);
      CheckVec(CT_STR("captured broadcast, replay " << rep), DT::F32, DLPG_SUM, bc.Download(),
               Data(DT::F32, DLPG_SUM, k + 10, 1, small));
      CheckVec(CT_STR("captured allgather, replay " << rep), DT::F32, DLPG_SUM, gout.Download(), gw);
      CheckVec(CT_STR("captured recv, replay " << rep), DT::F32, DLPG_SUM, rcv.Download(),
               Data(DT::F32, DLPG_SUM, k + 30, peer, pn));
      m.Allreduce(DT::F32, DLPG_SUM, true, 70001, false);  // eager, between replays
      m.SendRecv(DT::F32, 50001);
    }
    CT_CUDA(cudaGraphExecDestroy(exec));
    CT_CUDA(cudaGraphDestroy(graph));
    CT_CUDA(cudaStreamDestroy(s));
    e.api->group_destroy(g);
  }));
}

// A capture of a group's first CUDA operation cannot make and export its memory: the call
// says so (run one eager operation first), the capture ends cleanly, and the group works.
TEST(CudaIpc, CaptureBeforeFirstOperationIsRefused) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ipc_graph_first", 30);
    DevTensor x(0, DT::F32, 100);
    DLTensor *tx = x.dl();
    cudaStream_t s;
    CT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *streams[1] = {s};
    CT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    dlpg_status_t st = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, streams, nullptr);
    std::string msg = st == DLPG_OK ? "" : e.api->last_error();
    cudaGraph_t graph = nullptr;
    CT_CUDA(cudaStreamEndCapture(s, &graph));
    if (graph) CT_CUDA(cudaGraphDestroy(graph));
    CT_EXPECT(st == DLPG_ERR_INVALID_ARGUMENT, e.api->status_name(st) << ": " << msg);
    CT_EXPECT(msg.find("before capturing") != std::string::npos, msg);
    Matrix m{e.api, g, Layout{2, e.rank, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    CT_CUDA(cudaStreamDestroy(s));
    e.api->group_destroy(g);
  }));
}

// Rank 1 takes part once, then dies without a word. Rank 0's next allreduce fails with
// TIMEOUT naming rank 1 within the group's timeout plus a second, and the GPU still runs
// rank 0's later work.
TEST(CudaIpc, DeadPeerIsNamedAndGpuStillWorks) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    const double timeout = 3;
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ipc_dead", timeout);
    Matrix m{e.api, g, Layout{2, e.rank, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, true, 1000, false);
    if (e.rank == 1) {
      int64_t v = 0;
      e.api->store_add(e.store, "cuda_test/exit", 1, &v);  // counted out: rank 0 waits not
      _exit(0);
    }
    DevTensor x(0, DT::F32, 1000);
    DLTensor *tx = x.dl();
    dlpg_work_t *w = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    dlpg_status_t s = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w);
    std::string msg;
    if (s == DLPG_OK) {
      s = e.api->work_wait(w, 60);
      msg = e.api->last_error();
      e.api->work_free(w);
    } else {
      msg = e.api->last_error();
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CT_EXPECT(s == DLPG_ERR_TIMEOUT, e.api->status_name(s) << ": " << msg);
    CT_EXPECT(msg.find("rank 1") != std::string::npos, msg);
    CT_EXPECT(dt <= timeout + 1, "took " << dt << " s");
    // Later work on this GPU still runs: a copy and a one-rank group's allreduce.
    DevTensor y(0, DT::F32, 1000);
    y.Upload(Data(DT::F32, DLPG_SUM, 9, 0, 1000));
    CT_CUDA(cudaMemcpy(x.ptr, y.ptr, y.bytes(), cudaMemcpyDeviceToDevice));
    CT_CUDA(cudaDeviceSynchronize());
    CheckVec("copy after the failure", DT::F32, DLPG_SUM, x.Download(), Data(DT::F32, DLPG_SUM, 9, 0, 1000));
    e.api->group_destroy(g);
    dlpg_group_t *solo = MakeGroup(e.api, e.store, 0, 1, "ipc_solo", 30);
    Matrix one{e.api, solo, Layout{1, 0, {0}}};
    one.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    e.api->group_destroy(solo);
  }));
}

// Rank 0 waits on a collective rank 1 never joins; abort from another thread ends the
// kernel's wait with ABORTED long before the timeout.
TEST(CudaIpc, AbortWakesWaitingKernel) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ipc_abort", 30);
    Matrix m{e.api, g, Layout{2, e.rank, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, true, 1000, false);
    int64_t v = 0;
    if (e.rank == 0) {
      DevTensor x(0, DT::F32, 1000);
      DLTensor *tx = x.dl();
      dlpg_work_t *w = nullptr;
      CT_OK(e.api, e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w));
      std::thread ab([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        e.api->group_abort(g);
      });
      auto t0 = std::chrono::steady_clock::now();
      dlpg_status_t s = e.api->work_wait(w, 30);
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ab.join();
      CT_EXPECT(s == DLPG_ERR_ABORTED, e.api->status_name(s) << ": " << e.api->last_error());
      CT_EXPECT(dt < 10, "took " << dt << " s");
      e.api->work_free(w);
      e.api->store_add(e.store, "ipc_abort/done", 1, &v);
    } else {
      for (int i = 0; i < 600 && v < 1; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        e.api->store_add(e.store, "ipc_abort/done", 0, &v);
      }
    }
    e.api->group_destroy(g);
  }));
}

// 200 groups made, used once and destroyed: the staging allocations and the peers'
// mappings are all released (free GPU memory and open descriptors back where they were).
TEST(CudaIpc, CreateDestroyCyclesLeakNothing) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 300, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    auto cycle = [&](int i) {
      std::string name = "ipc_cycle_" + std::to_string(i);
      dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, name.c_str(), 30);
      DevTensor x(0, DT::F32, 256);
      x.Upload(Data(DT::F32, DLPG_SUM, (uint64_t)i, e.rank, 256));
      DLTensor *tx = x.dl();
      CT_OK(e.api, e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, nullptr));
      CT_CUDA(cudaDeviceSynchronize());
      auto a = Data(DT::F32, DLPG_SUM, (uint64_t)i, 0, 256), b = Data(DT::F32, DLPG_SUM, (uint64_t)i, 1, 256);
      for (size_t j = 0; j < a.size(); j++) a[j] += b[j];
      CheckVec(CT_STR("cycle " << i), DT::F32, DLPG_SUM, x.Download(), a);
      e.api->group_destroy(g);
    };
    for (int i = 0; i < 5; i++) cycle(i);  // warm: the module, CUDA's own pools
    size_t free0 = 0, total = 0;
    CT_CUDA(cudaMemGetInfo(&free0, &total));
    int fds0 = OpenFds();
    for (int i = 5; i < 205; i++) cycle(i);
    size_t free1 = 0;
    CT_CUDA(cudaMemGetInfo(&free1, &total));
    int fds1 = OpenFds();
    // One group's staging is ~12 MB per rank: 200 leaked would be GBs. The other rank's
    // allocations move the free figure too, so allow a few groups' worth.
    CT_EXPECT(free1 + (64ull << 20) >= free0, "free GPU memory went from " << free0 << " to " << free1);
    CT_EXPECT(fds1 <= fds0 + 8, "open descriptors went from " << fds0 << " to " << fds1);
  }));
}

// A group whose ranks share a GPU with DLPG_CUDA_BACKEND=nccl goes to NCCL, which refuses
// it: the failure is an error at the call, not a hang.
TEST(CudaIpc, ForcedNcclOnSharedGpuFailsClearly) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    setenv("DLPG_CUDA_BACKEND", "nccl", 1);
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ipc_forced_nccl", 10);
    DevTensor x(0, DT::F32, 100);
    DLTensor *tx = x.dl();
    dlpg_work_t *w = nullptr;
    dlpg_status_t s = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w);
    if (s == DLPG_OK) s = e.api->work_wait(w, 30), e.api->work_free(w);
    CT_EXPECT(s != DLPG_OK, "NCCL served two ranks on one GPU?");
    e.api->group_destroy(g);
  }));
}

}  // namespace
