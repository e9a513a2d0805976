// The conformance harness (see harness.h): N ranks as threads or forked processes over the
// plugin's TCP store on 127.0.0.1, with deadlines everywhere so a hang becomes a failure.
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace dlpgt {

double NowSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool ReduceSupported(const dlpg_api_t *api, DT dt, dlpg_reduce_op_t op, DLDevice device) {
  dlpg_status_t s = api->reduce_supported(device, DLType(dt), op);
  std::string what = std::string("reduce_supported(device type ") +
                     std::to_string(device.device_type) + ", " + Info(dt).name + ", " +
                     OpName(op) + ")";
  if (s == DLPG_OK) return true;
  std::string msg = api->last_error();
  EXPECT_EQ(s, DLPG_ERR_UNSUPPORTED) << what << " -> " << api->status_name(s) << ": " << msg;
  if (device.device_type == kDLCPU) {
    EXPECT_FALSE(AbiRequiresReduce(dt, op)) << what << ": dlpg.h promises this reduction: " << msg;
  }
  EXPECT_NE(msg.find(Info(dt).name), std::string::npos) << what << ": message lacks the dtype: " << msg;
  EXPECT_NE(msg.find(OpName(op)), std::string::npos) << what << ": message lacks the op: " << msg;
  return false;
}

bool MachineHasGpu() { return access("/dev/nvidia0", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0; }

// ------------------------------------------------------------------ failure forwarding

// In a forked child this is the write end of the pipe to the parent; -1 elsewhere.
static int g_child_fd = -1;
static int g_child_failures = 0;

static void WriteAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}

// Record: one type byte ('P' port, 'F' failure), a uint32 length, the payload.
static void SendRecord(char type, const std::string &payload) {
  if (g_child_fd < 0) return;
  uint32_t len = static_cast<uint32_t>(payload.size());
  std::string rec(1, type);
  rec.append(reinterpret_cast<const char *>(&len), 4);
  rec += payload;
  WriteAll(g_child_fd, rec.data(), rec.size());
}

class ForwardListener : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (g_child_fd < 0 || !r.failed()) return;
    g_child_failures++;
    std::string m = std::string(r.file_name() ? r.file_name() : "?") + ":" +
                    std::to_string(r.line_number()) + ": " + r.message();
    SendRecord('F', m);
  }
};

static void InstallListener() {
  static bool done = false;
  if (done) return;
  done = true;
  ::testing::UnitTest::GetInstance()->listeners().Append(new ForwardListener);
}

// ------------------------------------------------------------------ names and params

static std::string CurrentTestName() {
  const ::testing::TestInfo *ti = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!ti) return "notest";
  return std::string(ti->test_suite_name()) + "." + ti->name();
}

std::string UniqueName(const char *tag) {
  static std::atomic<int> counter{0};
  std::string n = CurrentTestName();
  for (char &c : n)
    if (c == '/') c = '_';
  return n + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + tag;
}

uint64_t TestSeed() { return HashStr(CurrentTestName()); }

std::string RankParamName(const ::testing::TestParamInfo<RankParam> &info) {
  return std::string(ModeName(info.param.mode)) + "_" + std::to_string(info.param.n);
}

std::vector<RankParam> StandardRankParams() {
  std::vector<RankParam> v;
  for (Mode m : {Mode::kThreads, Mode::kProcesses})
    for (int n = 1; n <= 4; n++) v.push_back({m, n, n == 2 || n == 3});
  return v;
}

// ------------------------------------------------------------------ tensors

std::vector<int64_t> CompactStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

HostTensor::HostTensor(DT dt, std::vector<int64_t> shape, size_t offset_elems,
                       bool explicit_strides, int dev)
    : use_strides(explicit_strides), device_type(dev), dt_(dt), shape_(std::move(shape)) {
  dtype = DLType(dt);
  strides_ = CompactStrides(shape_);
  numel_ = 1;
  for (int64_t d : shape_) numel_ *= static_cast<size_t>(d);
  offset_ = offset_elems * ElemSize(dt);
  mem_.assign(offset_ + numel_ * ElemSize(dt) + 64, 0xA5);
}

DLTensor *HostTensor::dl() {
  t_.data = mem_.data();
  t_.device.device_type = static_cast<DLDeviceType>(device_type);
  t_.device.device_id = device_id;
  t_.ndim = static_cast<int>(shape_.size());
  t_.dtype = dtype;
  t_.shape = shape_.empty() ? nullptr : shape_.data();
  t_.strides = use_strides && !strides_.empty() ? strides_.data() : nullptr;
  t_.byte_offset = offset_;
  return &t_;
}

// ------------------------------------------------------------------ one rank

// Runs one rank: store, group, fn, teardown. publish() hands rank 0's port to the others;
// await_port() returns it (<= 0 when rank 0 failed or the deadline passed).
static void RankBody(Mode mode, int rank, int n, const RunOptions &opts, const std::string &name,
                     uint64_t seed, const std::function<void(int)> &publish,
                     const std::function<int()> &await_port,
                     const std::function<void(RankCtx &)> &fn,
                     const std::function<void(dlpg_group_t *)> &register_group) {
  RankCtx ctx;
  ctx.api = dlpg_test_api();
  ctx.rank = rank;
  ctx.size = n;
  ctx.name = name;
  ctx.seed = seed;
  ctx.mode = mode;
  const dlpg_api_t *api = ctx.api;
  if (opts.open_store) {
    if (rank == 0) {
      dlpg_status_t s = api->store_open("tcp://127.0.0.1:0?serve=1", 30.0, &ctx.store);
      if (s == DLPG_OK) s = api->store_port(ctx.store, &ctx.port);
      if (s != DLPG_OK) {
        ADD_FAILURE() << "rank 0: serving store: " << api->status_name(s) << ": " << api->last_error();
        publish(-1);
        if (ctx.store) api->store_close(ctx.store);
        return;
      }
      publish(ctx.port);
    } else {
      ctx.port = await_port();
      if (ctx.port <= 0) {
        ADD_FAILURE() << "rank " << rank << ": no store port from rank 0";
        return;
      }
      std::string url = "tcp://127.0.0.1:" + std::to_string(ctx.port);
      dlpg_status_t s = api->store_open(url.c_str(), 30.0, &ctx.store);
      if (s != DLPG_OK) {
        ADD_FAILURE() << "rank " << rank << ": store_open(" << url << "): " << api->status_name(s)
                      << ": " << api->last_error();
        return;
      }
    }
    ctx.url = "tcp://127.0.0.1:" + std::to_string(ctx.port);
  }
  if (opts.create_group) {
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = opts.group_timeout_s;
    o.name = name.c_str();
    dlpg_status_t s = api->group_create(ctx.store, rank, n, &o, &ctx.group);
    if (s != DLPG_OK) {
      ADD_FAILURE() << "rank " << rank << ": group_create: " << api->status_name(s) << ": "
                    << api->last_error();
      ctx.group = nullptr;
    } else {
      register_group(ctx.group);
    }
  }
  if (!opts.create_group || ctx.group) fn(ctx);
  if (ctx.group) {
    register_group(nullptr);
    dlpg_status_t s = api->group_destroy(ctx.group);
    EXPECT_EQ(s, DLPG_OK) << "rank " << rank << ": group_destroy: " << api->last_error();
  }
  // Rank 0 serves the store: it waits until every other rank is done with it.
  if (ctx.store) {
    std::string mine = name + "/harness-done/" + std::to_string(rank);
    if (rank != 0) {
      api->store_set(ctx.store, mine.c_str(), "1", 1);
    } else if (n > 1) {
      std::vector<std::string> keys;
      for (int r = 1; r < n; r++) keys.push_back(name + "/harness-done/" + std::to_string(r));
      std::vector<const char *> k;
      for (auto &s : keys) k.push_back(s.c_str());
      api->store_wait(ctx.store, k.data(), k.size(), 30.0);
    }
    api->store_close(ctx.store);
  }
}

// ------------------------------------------------------------------ threads

static void RunThreads(int n, const std::function<void(RankCtx &)> &fn, const RunOptions &opts,
                       const std::string &name, uint64_t seed, double deadline) {
  std::promise<int> port_promise;
  std::shared_future<int> port_future = port_promise.get_future().share();
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<dlpg_group_t *> groups(n, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      auto publish = [&](int p) { port_promise.set_value(p); };
      auto await = [&]() -> int {
        if (port_future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) return -1;
        return port_future.get();
      };
      auto reg = [&](dlpg_group_t *g) {
        std::lock_guard<std::mutex> l(mu);
        groups[r] = g;
      };
      RankBody(Mode::kThreads, r, n, opts, name, seed, publish, await, fn, reg);
      std::lock_guard<std::mutex> l(mu);
      finished++;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> l(mu);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline);
  if (!cv.wait_until(l, until, [&] { return finished == n; })) {
    ADD_FAILURE() << "ranks did not finish within " << deadline << " s (" << finished << " of "
                  << n << " done); aborting their groups";
    for (auto *g : groups)
      if (g) dlpg_test_api()->group_abort(g);
    if (!cv.wait_for(l, std::chrono::seconds(30), [&] { return finished == n; })) {
      fprintf(stderr, "harness: rank threads still blocked 30 s after abort; exiting\n");
      fflush(stderr);
      _exit(3);
    }
  }
  l.unlock();
  for (auto &t : threads) t.join();
}

// ------------------------------------------------------------------ processes

struct Child {
  pid_t pid = -1;
  int res = -1;  // read end of the child's result pipe
  int ctl = -1;  // write end of the child's control pipe (the store port)
  std::string buf;
  std::vector<std::string> failures;
  bool reaped = false, eof = false;
  int status = 0;
};

static int ReadPort(int fd, double deadline_abs) {
  int port = 0;
  size_t got = 0;
  while (got < sizeof port) {
    double left = deadline_abs - NowSeconds();
    if (left <= 0) return -1;
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return -1;
    ssize_t r = read(fd, reinterpret_cast<char *>(&port) + got, sizeof port - got);
    if (r <= 0) return -1;
    got += static_cast<size_t>(r);
  }
  return port;
}

static void RunProcesses(int n, const std::function<void(RankCtx &)> &fn, const RunOptions &opts,
                         const std::string &name, uint64_t seed, double deadline) {
  InstallListener();
  fflush(stdout);
  fflush(stderr);
  std::vector<Child> kids(n);
  for (int r = 0; r < n; r++) {
    int res[2], ctl[2];
    if (pipe(res) != 0 || pipe(ctl) != 0) {
      ADD_FAILURE() << "pipe failed: " << strerror(errno);
      n = r;
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork failed: " << strerror(errno);
      close(res[0]); close(res[1]); close(ctl[0]); close(ctl[1]);
      n = r;
      break;
    }
    if (pid == 0) {
      // Child: keep only its own pipe ends.
      for (int k = 0; k < r; k++) {
        close(kids[k].res);
        close(kids[k].ctl);
      }
      close(res[0]);
      close(ctl[1]);
      g_child_fd = res[1];
      double dl_abs = NowSeconds() + 60.0;
      auto publish = [&](int p) { SendRecord('P', std::string(reinterpret_cast<char *>(&p), 4)); };
      auto await = [&]() { return ReadPort(ctl[0], dl_abs); };
      auto reg = [](dlpg_group_t *) {};
      RankBody(Mode::kProcesses, r, n, opts, name, seed, publish, await, fn, reg);
      fflush(stdout);
      fflush(stderr);
      _exit(g_child_failures ? 1 : 0);
    }
    close(res[1]);
    close(ctl[0]);
    kids[r].pid = pid;
    kids[r].res = res[0];
    kids[r].ctl = ctl[1];
  }
  kids.resize(n);

  double end = NowSeconds() + deadline;
  bool timed_out = false, crashed = false;
  for (;;) {
    bool all = true;
    for (auto &k : kids) {
      if (!k.reaped && waitpid(k.pid, &k.status, WNOHANG) == k.pid) {
        k.reaped = true;
        // A rank that died of a signal leaves its peers blocked until their group
        // timeout: give them a few seconds to notice, then end the run.
        if (WIFSIGNALED(k.status) && !crashed) {
          crashed = true;
          end = std::min(end, NowSeconds() + 5.0);
        }
      }
      if (!k.reaped || !k.eof) all = false;
    }
    if (all) break;
    if (NowSeconds() > end) {
      timed_out = true;
      break;
    }
    std::vector<struct pollfd> pfds;
    std::vector<int> idx;
    for (int r = 0; r < n; r++)
      if (!kids[r].eof) {
        pfds.push_back({kids[r].res, POLLIN, 0});
        idx.push_back(r);
      }
    if (pfds.empty()) {
      usleep(10000);
      continue;
    }
    if (poll(pfds.data(), pfds.size(), 50) <= 0) continue;
    for (size_t i = 0; i < pfds.size(); i++) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child &k = kids[idx[i]];
      char buf[65536];
      ssize_t got = read(k.res, buf, sizeof buf);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        k.eof = true;
        continue;
      }
      k.buf.append(buf, static_cast<size_t>(got));
      while (k.buf.size() >= 5) {
        uint32_t len;
        memcpy(&len, k.buf.data() + 1, 4);
        if (k.buf.size() < 5 + len) break;
        char type = k.buf[0];
        std::string payload = k.buf.substr(5, len);
        k.buf.erase(0, 5 + len);
        if (type == 'P' && len == 4) {
          for (int r = 1; r < n; r++) WriteAll(kids[r].ctl, payload.data(), 4);
        } else if (type == 'F') {
          k.failures.push_back(payload);
        }
      }
    }
  }
  for (int r = 0; r < n; r++) {
    Child &k = kids[r];
    if (!k.reaped) {
      kill(k.pid, SIGKILL);
      waitpid(k.pid, &k.status, 0);
      ADD_FAILURE() << "rank " << r << " (pid " << k.pid << ") did not finish "
                    << (crashed ? "within 5 s of a peer's crash" : "within the deadline") << " ("
                    << deadline << " s); killed";
    }
    close(k.res);
    close(k.ctl);
    for (auto &f : k.failures) ADD_FAILURE() << "rank " << r << " (pid " << k.pid << "): " << f;
    if (!timed_out || k.reaped) {
      if (WIFSIGNALED(k.status))
        ADD_FAILURE() << "rank " << r << " (pid " << k.pid << ") died of signal " << WTERMSIG(k.status);
      else if (WIFEXITED(k.status) && WEXITSTATUS(k.status) != 0 && k.failures.empty())
        ADD_FAILURE() << "rank " << r << " (pid " << k.pid << ") exited with code "
                      << WEXITSTATUS(k.status);
    }
  }
}

void RunRanks(Mode mode, int n, const std::function<void(RankCtx &)> &fn, RunOptions opts) {
  double deadline = opts.deadline_s > 0 ? opts.deadline_s : opts.group_timeout_s + 60;
  std::string name = UniqueName();
  uint64_t seed = TestSeed();
  dlpg_test_api();  // load before forking, so every child inherits the mapping
  if (mode == Mode::kThreads) RunThreads(n, fn, opts, name, seed, deadline);
  else RunProcesses(n, fn, opts, name, seed, deadline);
}

void Meet(RankCtx &c, const std::string &tag) {
  std::string mine = c.name + "/meet/" + tag + "/" + std::to_string(c.rank);
  c.api->store_set(c.store, mine.c_str(), "1", 1);
  std::vector<std::string> keys;
  std::vector<const char *> ks;
  for (int r = 0; r < c.size; r++) keys.push_back(c.name + "/meet/" + tag + "/" + std::to_string(r));
  for (auto &k : keys) ks.push_back(k.c_str());
  DLPG_EXPECT_OK(c.api, c.api->store_wait(c.store, ks.data(), ks.size(), Scaled(60)));
}

std::string CaptureStderr(const std::function<void()> &fn) {
  char path[] = "/tmp/dlpg_stderr_XXXXXX";
  int fd = mkstemp(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  lseek(fd, 0, SEEK_SET);
  char b[4096];
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0) out.append(b, static_cast<size_t>(n));
  close(fd);
  unlink(path);
  return out;
}

}  // namespace dlpgt
