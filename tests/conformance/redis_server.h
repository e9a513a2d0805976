// A redis-server of a test's own (Debian's, on a loopback port, no persistence), for the
// tests that run a store on Redis (test_store_redis.cc, test_relaunch.cc). Inline, so each
// test file includes it freely.
#pragma once

#include <fcntl.h>
#include <signal.h>

#include <random>

#include "test_store_util.h"
#include "test_store_wire.h"

namespace dlpg_redis {

inline const char *RedisServerPath() {
  for (const char *p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
    if (access(p, X_OK) == 0) return p;
  return nullptr;
}

// Whether the redis-server answering on port is the process pid: INFO's process_id (with
// AUTH first when it needs a password). Another server that holds the port answers with its
// own pid, so a port taken by someone else is never mistaken for ours.
inline bool IsOurRedis(int port, pid_t pid, const std::string &password) {
  int fd = RawConnect(port);
  if (fd < 0) return false;
  std::string req = password.empty() ? "" : "AUTH " + password + "\r\n";
  req += "INFO server\r\n";
  std::string got;
  bool ok = wire::SendAll(fd, req);
  std::string want = "process_id:" + std::to_string(pid) + "\r\n";
  for (double end = Now() + 5; ok && got.find(want) == std::string::npos && Now() < end;) {
    std::string chunk;
    if (!wire::RecvN(fd, 1, &chunk, end - Now())) break;
    got += chunk;
  }
  close(fd);
  return got.find(want) != std::string::npos;
}

// A redis-server of this test's own, stopped at the end of the scope. redis-server cannot
// report a port it picked itself, so a port is chosen at random and, when the server does not
// come up there (the port is taken: it exits), another one is tried.
struct Redis {
  pid_t pid = -1;
  int port = 0;
  explicit Redis(const std::string &password = "") {
    const char *bin = RedisServerPath();
    if (!bin) return;
    std::mt19937 rng(static_cast<unsigned>(getpid()) * 7919u + static_cast<unsigned>(Now() * 1e6));
    for (int attempt = 0; attempt < 20; attempt++) {
      port = 20000 + static_cast<int>(rng() % 30000);
      if (Start(bin, password)) return;
    }
    ADD_FAILURE() << "redis-server did not start on any of 20 ports (last " << port << ")";
  }
  // One attempt on port: true when our server answers there; false (reaped) when it exited.
  bool Start(const char *bin, const std::string &password) {
    std::string p = std::to_string(port);
    pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      std::vector<const char *> argv{bin, "--port", p.c_str(), "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no"};
      if (!password.empty()) {
        argv.push_back("--requirepass");
        argv.push_back(password.c_str());
      }
      argv.push_back(nullptr);
      execv(bin, const_cast<char *const *>(argv.data()));
      _exit(127);
    }
    // Ready when it answers as itself (a few ms unloaded; generous for a busy machine).
    for (double end = Now() + Scaled(30); Now() < end;) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) {  // exited: the port was taken
        pid = -1;
        return false;
      }
      if (IsOurRedis(port, pid, password)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
    return false;
  }
  ~Redis() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
  std::string Url(const std::string &tail = "") const {
    return "redis://127.0.0.1:" + std::to_string(port) + tail;
  }
};

}  // namespace dlpg_redis

#define SKIP_WITHOUT_REDIS()                                                              \
  if (!dlpg_redis::RedisServerPath())                                                     \
  GTEST_SKIP() << "redis-server is not installed (apt-get install redis-server; "       \
                  "ci/install-deps.sh does)"

