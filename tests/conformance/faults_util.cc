// The fault-injection runner (faults_util.h).
#include "faults_util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace dlpgt {

void FaultRank::Put(const std::string &key, const std::string &value) const {
  std::string line = key + "\t" + value;
  for (char &ch : line)
    if (ch == '\n') ch = ' ';
  line += '\n';
  const char *p = line.data();
  size_t n = line.size();
  while (n > 0) {
    ssize_t w = write(out_fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

double RankOutcome::Secs(const std::string &k) const {
  std::string v = Get(k);
  return v.empty() ? -1.0 : atof(v.c_str());
}

bool Trial::WaitMark(int r, const std::string &what, double timeout_s) {
  double end = NowSeconds() + timeout_s;
  for (;;) {
    const auto &m = out[r].marks;
    if (std::find(m.begin(), m.end(), what) != m.end()) return true;
    if (NowSeconds() >= end) return false;
    pump(std::min(end, NowSeconds() + 0.05));
  }
}

// The store process: serves, reports its port, then waits to be killed.
pid_t SpawnStore(int *port) {
  int p[2];
  if (pipe(p) != 0) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    const dlpg_api_t *api = dlpg_test_api();
    dlpg_store_t *s = nullptr;
    int prt = -1;
    if (api->store_open("tcp://127.0.0.1:0?serve=1", 30.0, &s) != DLPG_OK ||
        api->store_port(s, &prt) != DLPG_OK)
      prt = -1;
    if (write(p[1], &prt, sizeof prt) != sizeof prt) _exit(1);
    for (;;) pause();
  }
  close(p[1]);
  *port = -1;
  if (pid > 0) {
    struct pollfd pf = {p[0], POLLIN, 0};
    if (poll(&pf, 1, 30000) <= 0 || read(p[0], port, sizeof *port) != sizeof *port) *port = -1;
  }
  close(p[0]);
  return pid;
}

void RunTrial(int n, const std::string &name, double deadline_s,
              const std::function<void(FaultRank &)> &fn,
              const std::function<void(Trial &)> &control, Trial *t,
              const std::string &store_url) {
  dlpg_test_api();  // loaded before forking: every child inherits it
  if (store_url.empty()) {
    t->store_pid = SpawnStore(&t->port);
    ASSERT_GT(t->store_pid, 0);
    ASSERT_GT(t->port, 0) << "the store process did not report a port";
  }
  t->out.assign(n, RankOutcome());
  t->pids.assign(n, -1);
  std::vector<int> fds(n, -1);
  std::vector<std::string> bufs(n);
  std::vector<bool> eof(n, false), reaped(n, false);
  for (int r = 0; r < n; r++) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(p[0]);
      for (int k = 0; k < r; k++) close(fds[k]);
      FaultRank c;
      c.api = dlpg_test_api();
      c.rank = r;
      c.size = n;
      c.url = store_url.empty() ? "tcp://127.0.0.1:" + std::to_string(t->port) : store_url;
      c.name = name;
      c.out_fd = p[1];
      fn(c);
      c.Put("end", "1");
      fflush(stdout);
      fflush(stderr);
      _exit(0);
    }
    close(p[1]);
    fds[r] = p[0];
    t->pids[r] = pid;
    t->out[r].pid = pid;
  }
  // Reads every pipe and reaps exited ranks until end (absolute); true when all are done.
  t->pump = [&, n](double end) {
    for (;;) {
      bool all = true;
      for (int r = 0; r < n; r++) {
        int st = 0;
        if (!reaped[r] && waitpid(t->pids[r], &st, WNOHANG) == t->pids[r]) {
          reaped[r] = true;
          t->out[r].exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
          t->out[r].signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        }
        if (!reaped[r] || !eof[r]) all = false;
      }
      if (all) return true;
      double left = end - NowSeconds();
      if (left <= 0) return false;
      std::vector<struct pollfd> pf;
      std::vector<int> idx;
      for (int r = 0; r < n; r++)
        if (!eof[r]) {
          pf.push_back({fds[r], POLLIN, 0});
          idx.push_back(r);
        }
      int ms = static_cast<int>(std::min(left, 0.02) * 1000) + 1;
      if (pf.empty()) {
        usleep(static_cast<useconds_t>(ms) * 1000);
        continue;
      }
      if (poll(pf.data(), pf.size(), ms) <= 0) continue;
      for (size_t i = 0; i < pf.size(); i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int r = idx[i];
        char buf[8192];
        ssize_t got = read(fds[r], buf, sizeof buf);
        if (got <= 0) {
          if (got < 0 && errno == EINTR) continue;
          eof[r] = true;
          continue;
        }
        bufs[r].append(buf, static_cast<size_t>(got));
        size_t nl;
        while ((nl = bufs[r].find('\n')) != std::string::npos) {
          std::string line = bufs[r].substr(0, nl);
          bufs[r].erase(0, nl + 1);
          size_t tab = line.find('\t');
          if (tab == std::string::npos) continue;
          std::string k = line.substr(0, tab), v = line.substr(tab + 1);
          if (k == "mark") t->out[r].marks.push_back(v);
          else t->out[r].kv[k] = v;
        }
      }
    }
  };
  double end = NowSeconds() + deadline_s;
  if (control) control(*t);
  bool done = t->pump(end);
  for (int r = 0; r < n; r++) {
    if (!reaped[r]) {
      kill(t->pids[r], SIGKILL);
      kill(t->pids[r], SIGCONT);
      waitpid(t->pids[r], nullptr, 0);
    }
    close(fds[r]);
  }
  if (!done) {
    for (int r = 0; r < n; r++)
      if (!reaped[r]) t->out[r].kv["killed"] = "did not finish within the trial's deadline";
  }
  if (t->store_pid > 0) {
    kill(t->store_pid, SIGKILL);
    waitpid(t->store_pid, nullptr, 0);
  }
  t->pump = nullptr;
}

static std::string Fmt(double v) {
  char b[32];
  snprintf(b, sizeof b, "%.3f", v);
  return b;
}

dlpg_status_t TimedAllreduce(FaultRank &c, dlpg_group_t *g, int64_t count, const std::string &p,
                             const std::function<void()> &at_call) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; i++) v[i] = static_cast<float>((i % 7) + c.rank);
  HostTensor t(DT::F32, {count});
  memcpy(t.elems(), v.data(), v.size() * sizeof(float));
  DLTensor *tp = t.dl();
  if (at_call) at_call();
  double t0 = NowSeconds();
  dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  double secs = NowSeconds() - t0;
  c.Put(p + "_st", c.api->status_name(s));
  c.Put(p + "_secs", Fmt(secs));
  if (s != DLPG_OK) {
    c.Put(p + "_msg", c.api->last_error());
    return s;
  }
  c.Put(p + "_backend", LastBackend(c, g));
  int size = 0;
  c.api->group_size(g, &size);
  const float *got = static_cast<const float *>(t.elems());
  for (int64_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < size; r++) want += static_cast<float>((i % 7) + r);
    if (std::fabs(got[i] - want) > 1e-3f * std::fabs(want) + 1e-3f) {
      c.Put(p + "_msg", "wrong sum at [" + std::to_string(i) + "]");
      c.Put(p + "_st", "WRONG_RESULT");
      return DLPG_ERR_INTERNAL;
    }
  }
  return s;
}

std::string LastBackend(const FaultRank &c, dlpg_group_t *g) {
  size_t len = 0;
  if (c.api->group_flight_record(g, nullptr, 0, &len) != DLPG_OK) return "";
  std::string buf(len + 1, '\0');
  if (c.api->group_flight_record(g, &buf[0], buf.size(), &len) != DLPG_OK) return "";
  buf.resize(strlen(buf.c_str()));
  // One line per entry, oldest first; fields "key=value" separated by spaces.
  size_t line = buf.rfind('\n', buf.size() > 1 ? buf.size() - 2 : 0);
  line = line == std::string::npos ? 0 : line + 1;
  size_t at = buf.find(" backend=", line);
  if (at == std::string::npos) return "";
  at += strlen(" backend=");
  return buf.substr(at, buf.find_first_of(" \n", at) - at);
}

std::string ExpectedCpuBackend() {
  const char *e = getenv("DLPG_CPU_BACKEND");
  return e && std::string(e) == "gloo" ? "gloo" : "shm";
}

void CheckFreshGroup(FaultRank &c, int rank, int size, const std::string &name,
                     const std::string &key, double timeout_s) {
  dlpg_store_t *s = nullptr;
  dlpg_status_t st = c.api->store_open(c.url.c_str(), timeout_s, &s);
  if (st != DLPG_OK) {
    c.Put(key, std::string("store_open: ") + c.api->last_error());
    return;
  }
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout_s;
  o.name = name.c_str();
  dlpg_group_t *g = nullptr;
  st = c.api->group_create(s, rank, size, &o, &g);
  c.api->store_close(s);
  if (st != DLPG_OK) {
    c.Put(key, std::string("group_create: ") + c.api->last_error());
    return;
  }
  FaultRank cr = c;
  cr.rank = rank;
  st = TimedAllreduce(cr, g, 1000, key + "_op");
  c.Put(key, st == DLPG_OK ? "ok" : std::string("allreduce: ") + c.api->status_name(st));
  c.api->group_destroy(g);
}

void TimedDestroy(FaultRank &c, dlpg_group_t *g, const std::string &key) {
  double t0 = NowSeconds();
  c.api->group_destroy(g);
  c.Put(key, Fmt(NowSeconds() - t0));
}

void RecordOutcome(const std::string &fault, int trial, const Trial &t,
                   const std::vector<int> &survivors, const std::string &p) {
  std::string line = "FAULT " + fault + " trial " + std::to_string(trial) + ":";
  for (int r : survivors) {
    const RankOutcome &o = t.out[r];
    line += " rank " + std::to_string(r) + " " + o.Get(p + "_st") + " after " +
            o.Get(p + "_secs") + " s;";
  }
  if (!survivors.empty()) line += " msg(rank " + std::to_string(survivors[0]) + "): " +
                                  t.out[survivors[0]].Get(p + "_msg");
  printf("%s\n", line.c_str());
  fflush(stdout);
}

dlpg_group_t *JoinTrialGroup(FaultRank &c, double timeout_s, const std::string &name) {
  dlpg_store_t *s = nullptr;
  dlpg_status_t st = c.api->store_open(c.url.c_str(), 30.0, &s);
  if (st != DLPG_OK) {
    c.Put("join", std::string("store_open: ") + c.api->last_error());
    return nullptr;
  }
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout_s;
  std::string n = name.empty() ? c.name : name;
  o.name = n.c_str();
  dlpg_group_t *g = nullptr;
  st = c.api->group_create(s, c.rank, c.size, &o, &g);
  c.api->store_close(s);
  if (st != DLPG_OK) {
    c.Put("join", std::string("group_create: ") + c.api->last_error());
    return nullptr;
  }
  c.Put("join", "ok");
  return g;
}

void WaitKey(FaultRank &c, const std::string &key, double timeout_s) {
  dlpg_store_t *s = nullptr;
  if (c.api->store_open(c.url.c_str(), 30.0, &s) != DLPG_OK) return;
  const char *k = key.c_str();
  c.api->store_wait(s, &k, 1, timeout_s);
  c.api->store_close(s);
}

void SetKey(FaultRank &c, const std::string &key) {
  dlpg_store_t *s = nullptr;
  if (c.api->store_open(c.url.c_str(), 30.0, &s) != DLPG_OK) return;
  c.api->store_set(s, key.c_str(), "1", 1);
  c.api->store_close(s);
}

int TrialCount(int def) {
  const char *e = getenv("DLPG_FAULT_TRIALS");
  int n = e ? atoi(e) : 0;
  return n > 0 ? n : def;
}

}  // namespace dlpgt
