// A value of one of dlpg's variables that is unknown or malformed gets exactly one warning
// naming the variable, the value and the accepted values; a valid one gets none. The
// variables are read once per process, so each case runs this binary again (ParamChild.Reads,
// skipped unless DLPG_TEST_PARAM_CHILD is set) with the variable in its environment from the
// start, as a user sets it, and reads the child's stderr.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// group.h uses C11 atomic_int, which C++17 cannot name; std::atomic<int> has the same
// layout on GCC and Clang (as in test_core.cc).
using atomic_int = std::atomic<int>;
#define _STDATOMIC_H 1
extern "C" {
#include "base/log.h"
#include "base/timeout.h"
#include "core/group/group.h"
#include "core/health/stall.h"
}

namespace {

// Every reader of the variables under test, twice, as a long job reads them many times.
void ReadEverything() {
  static struct dlpg_group g;  // zeroed; the stall threshold reads only its timeout
  g.timeout_s = 10;
  for (int i = 0; i < 2; i++) {
    dlpg__timeout_resolve(0);
    dlpg__log_enabled(DLPG__LOG_INFO, DLPG__SUB_INIT);
    dlpg__stall_after_s(&g);
  }
}

// The stderr of this binary's ParamChild.Reads run with name=value added to the environment.
std::string ChildStderr(const char *name, const char *value) {
  char path[] = "/tmp/dlpg_param_warnings_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  pid_t pid = fork();
  if (pid == 0) {
    setenv("DLPG_TEST_PARAM_CHILD", "1", 1);
    setenv(name, value, 1);
    dup2(fd, 2);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    execl("/proc/self/exe", "test_param_warnings", "--gtest_filter=ParamChild.Reads",
          static_cast<char *>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::string out;
  char buf[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  unlink(path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status << ": "
                                                             << out;
  return out;
}

// The lines of text that are dlpg warnings mentioning words.
std::vector<std::string> Warnings(const std::string &text, const std::string &words) {
  std::vector<std::string> got;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (line.find("dlpg WARN") != std::string::npos && line.find(words) != std::string::npos)
      got.push_back(line);
    at = end + 1;
  }
  return got;
}

void ExpectOneWarning(const char *name, const char *value, const std::string &accepted) {
  std::string err = ChildStderr(name, value);
  std::vector<std::string> w = Warnings(err, name);
  ASSERT_EQ(w.size(), 1u) << name << "=" << value << " gave:\n" << err;
  EXPECT_NE(w[0].find(std::string(name) + "=\"" + value + "\""), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("accepted values: " + accepted), std::string::npos) << w[0];
}

void ExpectNoWarning(const char *name, const char *value) {
  std::string err = ChildStderr(name, value);
  EXPECT_TRUE(Warnings(err, "").empty()) << name << "=" << value << " gave:\n" << err;
}

}  // namespace

TEST(ParamChild, Reads) {
  if (!getenv("DLPG_TEST_PARAM_CHILD")) GTEST_SKIP() << "run by the ParamWarnings tests";
  ReadEverything();
}

TEST(ParamWarnings, MalformedTimeoutWarnsOnce) {
  ExpectOneWarning("DLPG_TIMEOUT", "abc", "a number of seconds > 0");
  ExpectOneWarning("DLPG_TIMEOUT", "-5", "a number of seconds > 0");
  ExpectNoWarning("DLPG_TIMEOUT", "30");
}

TEST(ParamWarnings, UnknownLogLevelWarnsOnce) {
  ExpectOneWarning("DLPG_DEBUG", "VERBOSE", "NONE, WARN, INFO or TRACE");
  ExpectNoWarning("DLPG_DEBUG", "info");
}

TEST(ParamWarnings, UnknownLogSubsystemWarnsOnce) {
  ExpectOneWarning("DLPG_DEBUG_SUBSYS", "FOO", "a comma list of ALL, INIT, STORE, COLL, P2P");
  ExpectOneWarning("DLPG_DEBUG_SUBSYS", "^STORE,FOO", "a comma list of ALL, INIT, STORE");
  // A backend's subsystem, a module's included before the module loads.
  ExpectNoWarning("DLPG_DEBUG_SUBSYS", "^GLOO,store");
  ExpectNoWarning("DLPG_DEBUG_SUBSYS", "NCCL,INIT");
}

TEST(ParamWarnings, NegativeStallThresholdWarnsOnce) {
  ExpectOneWarning("DLPG_STALL_WARN_S", "-3", "0 (off) or a number of seconds > 0");
  ExpectOneWarning("DLPG_STALL_WARN_S", "soon", "0 (off) or a number of seconds > 0");
  ExpectNoWarning("DLPG_STALL_WARN_S", "0");
}
