// Resource soak: 1 000 create / first operation / destroy cycles of a 2-rank
// group under one name on one store (ranks as threads of this process) leave the process's
// descriptor count flat and its resident memory bounded: no socket, thread or buffer of a
// destroyed group survives it, and the scoped rendezvous never reads an earlier cycle's keys.
// DLPG_SOAK_CYCLES overrides the count (ci/sanitize.sh runs it under ASan too).
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "harness.h"

using namespace dlpgt;

namespace {

int CountFds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (struct dirent *e = readdir(d))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

double RssMiB() {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return static_cast<double>(rss) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

TEST(FaultsSoak, CreateDestroyCyclesKeepFdsAndMemoryFlat) {
  const char *e = getenv("DLPG_SOAK_CYCLES");
  const int cycles = e && atoi(e) > 0 ? atoi(e) : 1000;
  const int warm = cycles / 10;
  RunOptions ro;
  ro.create_group = false;
  ro.group_timeout_s = 30;
  ro.deadline_s = 600;
  std::mutex mu;
  int fds0 = 0, fds1 = 0;
  double rss0 = 0, rss1 = 0;
  double t0 = NowSeconds();
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    for (int i = 0; i < cycles; i++) {
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.timeout_s = 30;
      o.name = c.name.c_str();
      dlpg_group_t *g = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_create(c.store, c.rank, c.size, &o, &g));
      HostTensor t(DT::I32, {4});
      for (int k = 0; k < 4; k++) static_cast<int32_t *>(t.elems())[k] = i + c.rank;
      DLTensor *tp = t.dl();
      DLPG_ASSERT_OK(c.api, c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr));
      ASSERT_EQ(static_cast<int32_t *>(t.elems())[3], 2 * i + 1) << "cycle " << i;
      DLPG_ASSERT_OK(c.api, c.api->group_destroy(g));
      // Both ranks pass here before either measures: the peer's sockets are closed too.
      // (One counter for the whole run: a per-cycle key deleted by one rank would be
      // re-created at 0 by the other's next read.)
      std::string k = c.name + "/soak/barrier";
      int64_t v = 0;
      c.api->store_add(c.store, k.c_str(), 1, &v);
      for (int spin = 0; v < 2 * (i + 1) && spin < 200000; spin++) {
        usleep(50);
        c.api->store_add(c.store, k.c_str(), 0, &v);
      }
      if (c.rank == 0 && (i == warm || i == cycles - 1)) {
        usleep(200000);  // sockets closing in the kernel
        std::lock_guard<std::mutex> l(mu);
        (i == warm ? fds0 : fds1) = CountFds();
        (i == warm ? rss0 : rss1) = RssMiB();
      }
    }
  }, ro);
  printf("soak: %d cycles in %.1f s; fds %d -> %d; RSS %.1f -> %.1f MiB\n", cycles,
         NowSeconds() - t0, fds0, fds1, rss0, rss1);
  EXPECT_GT(fds0, 0);
  EXPECT_LE(fds1, fds0 + 2) << "descriptors grew over " << cycles - warm << " cycles";
  EXPECT_LT(rss1 - rss0, 32.0) << "resident memory grew over " << cycles - warm << " cycles";
}

}  // namespace
