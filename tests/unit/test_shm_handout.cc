// The segment's hand-out seen by a local process that is no rank of the job: it reads the
// owner's abstract socket in /proc/net/unix (as anyone on the host can) and connects before
// the real ranks do -- silent, a few bytes of a hello and then silent, a whole hello with a
// wrong token, the same carrying a memfd of its own, or as another user. The group (and a
// pair) is still made, none of those holds the real ranks back, the owner keeps none of
// the fds it was sent, and another user's connection is closed without a word.
#include "test_shm_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <fstream>
#include <sstream>

extern "C" {
#include "shm/pair.h"
}

using namespace shmtest;

namespace {

// The socket names hash the group's name (or the pair's prefix) with FNV-1a (create.c,
// pair_create.c): the probe finds this test's socket and no other test's.
std::string Fnv16(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char b[17];
  snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

// The abstract name (without '@') of a listening socket whose name starts with prefix, as
// /proc/net/unix shows it to every local process; "" when none appeared within secs.
std::string FindListener(const std::string &prefix, double secs) {
  double end = Now() + secs;
  while (Now() < end) {
    std::ifstream f("/proc/net/unix");
    std::string line;
    std::getline(f, line);  // the header
    while (std::getline(f, line)) {
      std::istringstream is(line);
      std::string num, ref, proto, flags, type, st, inode, path;
      if (!(is >> num >> ref >> proto >> flags >> type >> st >> inode >> path)) continue;
      // 00010000: __SO_ACCEPTCON, a listening socket (accepted ones show the same path).
      if (flags == "00010000" && path.rfind("@" + prefix, 0) == 0) return path.substr(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return "";
}

int Connect(const std::string &name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr *>(&a), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// What a rank's hello looks like (seg.h): rank, pid, a 16-byte token; this one's is wrong.
struct FakeHello {
  int32_t rank, pid;
  uint8_t token[16];
};

bool SendWithFd(int c, const void *buf, size_t n, int fd) {
  iovec iov{const_cast<void *>(buf), n};
  union {
    char b[CMSG_SPACE(sizeof(int))];
    cmsghdr align;
  } ctl{};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.b;
  m.msg_controllen = sizeof ctl.b;
  cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  return sendmsg(c, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

enum Kind { kSilent, kPartial, kWrongToken, kWrongTokenWithFd };

// The probe's connections, open until it goes out of scope (the real ranks come after).
struct Probes {
  std::vector<int> fds;
  ~Probes() {
    for (int f : fds) close(f);
  }
  // Connects once per kind; false (with a failure) when a connection could not be made.
  bool Open(const std::string &name, const std::vector<Kind> &kinds, int claim_rank) {
    for (Kind k : kinds) {
      int c = Connect(name);
      EXPECT_GE(c, 0) << "connect to @" << name << ": " << strerror(errno);
      if (c < 0) return false;
      fds.push_back(c);
      FakeHello h{claim_rank, static_cast<int32_t>(getpid()), {0}};
      memset(h.token, 0x5a, sizeof h.token);
      if (k == kPartial) {
        EXPECT_EQ(write(c, &h, 7), 7);
      }
      if (k == kWrongToken) {
        EXPECT_EQ(write(c, &h, sizeof h), static_cast<ssize_t>(sizeof h));
      }
      if (k == kWrongTokenWithFd) {
        // A memfd of the probe's own, which the owner must not keep.
        int mfd = memfd_create("dlpg-probe", MFD_CLOEXEC);
        EXPECT_GE(mfd, 0);
        EXPECT_TRUE(SendWithFd(c, &h, sizeof h, mfd)) << strerror(errno);
        close(mfd);
      }
    }
    return true;
  }
};

// This process's open fds, and how many of them are the probe's memfd.
std::pair<int, int> OpenFds() {
  int n = 0, probe = 0;
  if (DIR *d = opendir("/proc/self/fd")) {
    while (struct dirent *e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      n++;
      char link[256] = {0}, path[300];
      snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      if (readlink(path, link, sizeof link - 1) > 0 && strstr(link, "dlpg-probe")) probe++;
    }
    closedir(d);
  }
  return {n - 1, probe};  // less the directory's own fd
}

// Ranks other than the socket's owner wait for this key before they connect, so the
// probe's connections are first in the owner's backlog.
const char *kReady = "handout/probe-ready";

void WaitReady(Rank &k) {
  char buf[8];
  size_t len = 0;
  ASSERT_EQ(dlpg_store_get(k.store, kReady, Scaled(30), buf, sizeof buf, &len), DLPG_OK)
      << dlpg_last_error();
}

// The parent's side: find the owner's socket, open the probes, let the ranks come.
void ProbeThenRelease(Store &st, const std::string &sock_prefix, const std::vector<Kind> &kinds,
                      int claim_rank, Probes &pr) {
  std::string name = FindListener(sock_prefix, Scaled(20));
  EXPECT_FALSE(name.empty()) << "no listening socket @" << sock_prefix << "* appeared";
  if (!name.empty()) pr.Open(name, kinds, claim_rank);
  EXPECT_EQ(dlpg_store_set(st.s, kReady, "1", 1), DLPG_OK);
}

dlpg__shm_config_t Cfg(double timeout) {
  dlpg__shm_config_t cfg{};
  cfg.slot_bytes = 4096, cfg.timeout_s = timeout, cfg.spin = -1;
  return cfg;
}

// Make the group after the probe connected and check it works: an allreduce of the ranks'
// numbers against the sum computed here.
void MakeGroupAndReduce(Rank &k, const std::string &name, double timeout) {
  if (k.rank > 0) WaitReady(k);
  auto before = OpenFds();
  dlpg__shm_config_t cfg = Cfg(timeout);
  dlpg__shm_t *sh = nullptr;
  ASSERT_EQ(dlpg__shm_create(k.store, name.c_str(), k.rank, k.size, &cfg, &sh), DLPG_OK)
      << "rank " << k.rank << ": " << dlpg_last_error();
  if (k.rank == 0) {
    auto after = OpenFds();
    EXPECT_EQ(after.second, 0) << "rank 0 keeps the probe's memfd";
    EXPECT_EQ(after.first, before.first) << "rank 0's open fds before and after the creation";
  }
  int64_t v = 10 + k.rank, out = 0;
  ASSERT_EQ(dlpg__shm_allreduce(sh, &v, &out, 1, DLPG__DT_INT64, DLPG_SUM), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(out, 10 * k.size + k.size * (k.size - 1) / 2);
  dlpg__shm_destroy(sh);
}

// Silent, half-hello and wrong-token connections ahead of the real ranks: the group is made
// well before its deadline (before, rank 0 read the silent one until the deadline, and every
// rank failed blaming rank 1 for not fetching the segment).
TEST(ShmHandout, SilentAndGarbageLocalsDoNotStallTheGroup) {
  const std::string name = "handout-" + std::to_string(getpid());
  const double timeout = Scaled(15);
  Probes pr;
  Opts o;
  o.create = false;
  o.deadline = Scaled(60);
  o.parent = [&](const std::vector<pid_t> &, Store &st) {
    ProbeThenRelease(st, "dlpg-shm-" + Fnv16(name) + "-",
                     {kSilent, kPartial, kWrongToken, kWrongTokenWithFd, kSilent}, 1, pr);
  };
  double t0 = Now();
  auto codes = RunRanks(3, o, [&](Rank &k) { MakeGroupAndReduce(k, name, timeout); });
  ExpectAllPass(codes);
  // Not a timing bound of the hand-out itself: only that nobody waited out the deadline.
  EXPECT_LT(Now() - t0, timeout) << "the group was made only at its deadline";
}

// A wrong token with an fd attached, alone (so that the old serial reader reached it): the
// owner closes the fd it was sent, and holds as many fds afterwards as before.
TEST(ShmHandout, RejectedHelloFdIsClosed) {
  const std::string name = "handout-fd-" + std::to_string(getpid());
  Probes pr;
  Opts o;
  o.create = false;
  o.parent = [&](const std::vector<pid_t> &, Store &st) {
    ProbeThenRelease(st, "dlpg-shm-" + Fnv16(name) + "-", {kWrongTokenWithFd, kWrongTokenWithFd}, 1, pr);
  };
  auto codes = RunRanks(2, o, [&](Rank &k) { MakeGroupAndReduce(k, name, Scaled(20)); });
  ExpectAllPass(codes);
}

// The same probes against a pair's socket (send/recv's segment of two ranks).
TEST(ShmHandout, SilentAndGarbageLocalsDoNotStallAPair) {
  const std::string prefix = "handout/pair/" + std::to_string(getpid());
  const double timeout = Scaled(15);
  Probes pr;
  Opts o;
  o.create = false;
  o.deadline = Scaled(60);
  o.parent = [&](const std::vector<pid_t> &, Store &st) {
    ProbeThenRelease(st, "dlpg-shm-pair-" + Fnv16(prefix) + "-",
                     {kSilent, kPartial, kWrongToken, kWrongTokenWithFd}, 1, pr);
  };
  auto codes = RunRanks(2, o, [&](Rank &k) {
    if (k.rank == 1) WaitReady(k);
    auto before = OpenFds();
    dlpg__shm_pair_config_t cfg{4096, 0, timeout, -1, nullptr};
    dlpg__shm_pair_t *p = nullptr;
    ASSERT_EQ(dlpg__shm_pair_create(k.store, prefix.c_str(), k.rank, 1 - k.rank, &cfg, &p), DLPG_OK)
        << "rank " << k.rank << ": " << dlpg_last_error();
    if (k.rank == 0) {
      auto after = OpenFds();
      EXPECT_EQ(after.second, 0) << "rank 0 keeps the probe's memfd";
      EXPECT_EQ(after.first, before.first) << "rank 0's open fds before and after the pair";
    }
    dlpg__shm_pair_destroy(p);
  });
  ExpectAllPass(codes);
}

// Another user's connection (CI runs as root: a child that becomes nobody) is closed at once
// and holds nobody back; the child sees its connection end without an answer.
TEST(ShmHandout, AnotherUserIsRefusedAtOnce) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user (uid 65534)";
  const std::string name = "handout-uid-" + std::to_string(getpid());
  const double timeout = Scaled(15);
  pid_t child = -1;
  Opts o;
  o.create = false;
  o.deadline = Scaled(60);
  o.parent = [&](const std::vector<pid_t> &, Store &st) {
    std::string sock = FindListener("dlpg-shm-" + Fnv16(name) + "-", Scaled(20));
    EXPECT_FALSE(sock.empty());
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    child = fork();
    if (child == 0) {
      // Exit codes: 0 closed without an answer, 2 setuid failed, 3 connect failed, 4 no end
      // within the bound, 5 an answer came.
      close(ready[0]);
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      int c = Connect(sock);
      char b = c >= 0 ? 'c' : 'x';
      if (write(ready[1], &b, 1) != 1) _exit(3);
      if (c < 0) _exit(3);
      pollfd p{c, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(Scaled(30) * 1000)) <= 0) _exit(4);
      char x;
      _exit(read(c, &x, 1) <= 0 ? 0 : 5);
    }
    close(ready[1]);
    char b = 0;
    EXPECT_EQ(read(ready[0], &b, 1), 1);
    EXPECT_EQ(b, 'c') << "the other user could not connect";
    close(ready[0]);
    EXPECT_EQ(dlpg_store_set(st.s, kReady, "1", 1), DLPG_OK);
  };
  double t0 = Now();
  auto codes = RunRanks(2, o, [&](Rank &k) { MakeGroupAndReduce(k, name, timeout); });
  ExpectAllPass(codes);
  EXPECT_LT(Now() - t0, timeout) << "the group was made only at its deadline";
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the other user's connection: exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace
