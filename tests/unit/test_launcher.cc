// White-box tests of store/launcher.h: launcher detection over made-up environments
// (torchrun, Open MPI, MPICH/Hydra, Slurm; their precedence; the store address rules), Slurm
// node lists, the port derived from a job id, and that every variable it reads is declared.
// Ranks and sizes are drawn at random per test, so no table of fixed answers can pass it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>

extern "C" {
#include "base/params.h"
#include "base/status.h"
#include "store/launcher.h"
}

namespace {

using Env = std::map<std::string, std::string>;

struct Lookup {
  const Env *env;
  std::set<std::string> asked;
};

const char *Get(void *ctx, const char *name) {
  auto *l = static_cast<Lookup *>(ctx);
  l->asked.insert(name);
  auto it = l->env->find(name);
  return it == l->env->end() ? nullptr : it->second.c_str();
}

struct Result {
  dlpg_status_t st;
  dlpg__launch_t l;
  std::string error;
  std::set<std::string> asked;
};

Result Detect(const Env &env, long ppid = 4242, int need_store = 1) {
  Lookup lk{&env, {}};
  Result r;
  r.st = dlpg__launch_detect(Get, &lk, ppid, need_store, &r.l);
  r.error = r.st == DLPG_OK ? "" : dlpg_last_error();
  r.asked = lk.asked;
  return r;
}

std::mt19937 &Rng() {
  static std::mt19937 rng(static_cast<unsigned>(
      std::hash<std::string>()(::testing::UnitTest::GetInstance()->current_test_info()->name())));
  return rng;
}

int Draw(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(Rng()); }

TEST(Launcher, NothingSetIsNoLauncher) {
  Result r = Detect({}, 1, 0);
  ASSERT_EQ(r.st, DLPG_OK);
  EXPECT_EQ(r.l.launcher, nullptr);
  r = Detect({});  // and asked for a store: the message names the ways to give one
  ASSERT_EQ(r.st, DLPG_ERR_INVALID_ARGUMENT);
  for (const char *v : {"MASTER_ADDR", "RANK", "OMPI_COMM_WORLD", "PMI_RANK", "SLURM_PROCID",
                        "DLPG_STORE_URL"})
    EXPECT_NE(r.error.find(v), std::string::npos) << v << " in: " << r.error;
}

TEST(Launcher, Torchrun) {
  int size = Draw(2, 64), rank = Draw(0, size - 1), mport = Draw(20000, 30000);
  Env env = {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(size)},
             {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"},
             {"MASTER_PORT", std::to_string(mport)}};
  Result r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_STREQ(r.l.launcher, "torchrun");
  EXPECT_EQ(r.l.rank, rank);
  EXPECT_EQ(r.l.size, size);
  EXPECT_EQ(r.l.local_rank, 1);
  EXPECT_EQ(r.l.local_size, 2);
  EXPECT_STREQ(r.l.host, "10.1.2.3");
  EXPECT_EQ(r.l.port, mport + 1);  // torchrun's own store keeps MASTER_PORT
  EXPECT_EQ(r.l.serve, rank == 0);
  env["RANK"] = "0";
  env["DLPG_STORE_PORT"] = "31001";
  env["DLPG_STORE_BIND"] = "*";
  r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_EQ(r.l.port, 31001);
  EXPECT_TRUE(r.l.serve);
  EXPECT_STREQ(r.l.bind, "*");
}

TEST(Launcher, OpenMpiOnOneHostDerivesThePortFromTheJobId) {
  int size = Draw(2, 32);
  std::string job = std::to_string(Draw(1, 1 << 30));
  int port = -1;
  for (int rank = 0; rank < size; rank++) {
    Env env = {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
               {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
               {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(size)},
               {"OMPI_MCA_ess_base_jobid", job}, {"PMIX_NAMESPACE", "other"},
               // mpirun inside a Slurm allocation: the allocation's variables are inherited
               {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "99"}};
    Result r = Detect(env, 1000 + rank);  // each rank its own parent: the job id decides
    ASSERT_EQ(r.st, DLPG_OK) << r.error;
    EXPECT_STREQ(r.l.launcher, "Open MPI");
    EXPECT_EQ(r.l.rank, rank);
    EXPECT_EQ(r.l.size, size);
    EXPECT_EQ(r.l.local_size, size);
    EXPECT_STREQ(r.l.host, "127.0.0.1");
    EXPECT_EQ(r.l.serve, rank == 0);
    if (rank == 0) {
      EXPECT_STREQ(r.l.bind, "127.0.0.1");
      port = r.l.port;
    }
    EXPECT_EQ(r.l.port, port) << "every rank must derive the same port";
    EXPECT_EQ(r.l.port, dlpg__launch_port(job.c_str()));
    EXPECT_NE(std::string(r.l.how).find("OMPI_MCA_ess_base_jobid"), std::string::npos) << r.l.how;
  }
}

TEST(Launcher, OpenMpiAcrossHostsNeedsMasterAddrOrStoreUrl) {
  int size = 2 * Draw(2, 16);
  Env env = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(size / 2)},
             {"OMPI_MCA_ess_base_jobid", "77"}};
  Result r = Detect(env);
  ASSERT_EQ(r.st, DLPG_ERR_INVALID_ARGUMENT);
  const std::string nranks = std::to_string(size) + " ranks";
  for (const std::string &v : {std::string("Open MPI"), std::string("MASTER_ADDR"),
                               std::string("DLPG_STORE_URL"), nranks})
    EXPECT_NE(r.error.find(v), std::string::npos) << v << " in: " << r.error;
  // Only the rank is wanted: no error.
  EXPECT_EQ(Detect(env, 1, 0).st, DLPG_OK);
  env["MASTER_ADDR"] = "host0";  // no MASTER_PORT: the port still comes from the job id
  r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_STREQ(r.l.host, "host0");
  EXPECT_EQ(r.l.port, dlpg__launch_port("77"));
  EXPECT_FALSE(r.l.serve);
  env["DLPG_STORE_URL"] = "tcp://store.example:4000?token=x";
  r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_STREQ(r.l.url, "tcp://store.example:4000?token=x");
  EXPECT_FALSE(r.l.serve);
  env["DLPG_STORE_URL"] = "env://";
  EXPECT_EQ(Detect(env).st, DLPG_ERR_INVALID_ARGUMENT);
}

TEST(Launcher, MpichHydra) {
  int size = Draw(2, 16), rank = Draw(0, size - 1);
  Env env = {{"PMI_RANK", std::to_string(rank)}, {"PMI_SIZE", std::to_string(size)},
             {"MPI_LOCALRANKID", std::to_string(rank)},
             {"MPI_LOCALNRANKS", std::to_string(size)}};
  Result a = Detect(env, 5555), b = Detect(env, 5555), c = Detect(env, 5556);
  ASSERT_EQ(a.st, DLPG_OK) << a.error;
  EXPECT_STREQ(a.l.launcher, "MPICH");
  EXPECT_EQ(a.l.rank, rank);
  EXPECT_EQ(a.l.size, size);
  EXPECT_STREQ(a.l.host, "127.0.0.1");
  // No job id variable: the ranks of one host share Hydra's proxy as their parent.
  EXPECT_EQ(a.l.port, b.l.port);
  EXPECT_EQ(a.l.port, dlpg__launch_port("ppid-5555"));
  EXPECT_NE(a.l.port, c.l.port);
  EXPECT_NE(std::string(a.l.how).find("parent process"), std::string::npos) << a.l.how;
  env.erase("MPI_LOCALNRANKS");  // how many are local is then unknown
  Result d = Detect(env);
  EXPECT_EQ(d.st, DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(d.error.find("MASTER_ADDR"), std::string::npos) << d.error;
}

TEST(Launcher, SlurmAcrossNodesUsesTheStepsFirstNode) {
  int size = Draw(4, 64), rank = Draw(0, size - 1);
  Env env = {{"SLURM_PROCID", std::to_string(rank)}, {"SLURM_NTASKS", "1000"},
             {"SLURM_STEP_NUM_TASKS", std::to_string(size)}, {"SLURM_LOCALID", "0"},
             {"SLURM_STEP_NUM_NODES", "4"}, {"SLURM_JOB_NUM_NODES", "8"},
             {"SLURM_STEP_NODELIST", "node[03-05,7],gpu1"},
             {"SLURM_JOB_NODELIST", "other[1-8]"}, {"SLURM_JOB_ID", "4711"},
             {"SLURM_STEP_ID", "2"}};
  Result r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_STREQ(r.l.launcher, "Slurm");
  EXPECT_EQ(r.l.rank, rank);
  EXPECT_EQ(r.l.size, size);  // the step's tasks, not the job's
  EXPECT_STREQ(r.l.host, "node03");
  EXPECT_EQ(r.l.port, dlpg__launch_port("4711.2"));
  EXPECT_EQ(r.l.serve, rank == 0);
  env["SLURM_PROCID"] = "0";
  r = Detect(env);
  EXPECT_STREQ(r.l.bind, "node03");
  env["MASTER_ADDR"] = "10.0.0.9";  // says otherwise
  r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_STREQ(r.l.host, "10.0.0.9");
  env.erase("MASTER_ADDR");
  env.erase("SLURM_STEP_NODELIST");  // the job's list, when the step's is missing
  EXPECT_STREQ(Detect(env).l.host, "other1");
  env["SLURM_JOB_NODELIST"] = "bad[";
  r = Detect(env);
  EXPECT_EQ(r.st, DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("SLURM_JOB_NODELIST"), std::string::npos) << r.error;
}

TEST(Launcher, SlurmOnOneNodeUsesLoopback) {
  int size = Draw(2, 16);
  Env env = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", std::to_string(size)},
             {"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_STEP_NODELIST", "n1"},
             {"SLURM_JOB_ID", "9"}};
  Result r = Detect(env);
  ASSERT_EQ(r.st, DLPG_OK) << r.error;
  EXPECT_STREQ(r.l.host, "127.0.0.1");
  EXPECT_EQ(r.l.port, dlpg__launch_port("9.batch"));
  env.erase("SLURM_JOB_NUM_NODES");
  env["SLURM_NTASKS_PER_NODE"] = std::to_string(size);
  EXPECT_STREQ(Detect(env).l.host, "127.0.0.1");
}

TEST(Launcher, BadValuesNameTheVariable) {
  Result r = Detect({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(r.st, DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("OMPI_COMM_WORLD_RANK is 4 but OMPI_COMM_WORLD_SIZE is 4"),
            std::string::npos) << r.error;
  r = Detect({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(r.st, DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("SLURM_PROCID is \"x1\""), std::string::npos) << r.error;
  r = Detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}});
  EXPECT_NE(r.error.find("PMI_SIZE is \"0\""), std::string::npos) << r.error;
  r = Detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(r.error.find("MASTER_PORT is \"70000\""), std::string::npos) << r.error;
}

TEST(Launcher, NodeListFirstHost) {
  const std::pair<const char *, const char *> ok[] = {
      {"a", "a"},           {"a,b", "a"},         {"n[1-3]", "n1"},
      {"n[07,9]", "n07"},   {"n[003-010]", "n003"}, {"r[1-2]n[3-4]", "r1n3"},
      {"x[1-2]-ib,y", "x1-ib"}, {"gpu-a100-[12]", "gpu-a100-12"}};
  for (auto &c : ok) {
    char out[64];
    ASSERT_EQ(dlpg__nodelist_first(c.first, out, sizeof out), 0) << c.first;
    EXPECT_STREQ(out, c.second) << c.first;
  }
  for (const char *bad : {"", "n[", "n[a]", "[]", "n[1-", "]x", ",a"}) {
    char out[64];
    EXPECT_EQ(dlpg__nodelist_first(bad, out, sizeof out), -1) << bad;
  }
  char small[4];
  EXPECT_EQ(dlpg__nodelist_first("node1", small, sizeof small), -1);
}

TEST(Launcher, PortIsStableInRangeAndSpreads) {
  std::set<int> seen;
  for (int i = 0; i < 200; i++) {
    std::string id = std::to_string(Draw(0, 1 << 30)) + "." + std::to_string(i);
    int p = dlpg__launch_port(id.c_str());
    EXPECT_GE(p, 10000);
    EXPECT_LT(p, 32000);
    EXPECT_EQ(p, dlpg__launch_port(id.c_str()));
    seen.insert(p);
  }
  EXPECT_GT(seen.size(), 150u);  // 200 ids over 22000 ports: a few collisions at most
}

// The detection reads the environment only through base/params.h, where each variable is
// declared (dlpg-info lists them): every name it asks for, on every path, is declared.
TEST(Launcher, EveryVariableReadIsDeclared) {
  std::set<std::string> asked;
  const Env envs[] = {
      {},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}},
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}},
      {{"SLURM_PROCID", "0"}, {"SLURM_NPROCS", "2"}},
      {{"SLURM_PROCID", "0"}, {"SLURM_NPROCS", "2"}, {"SLURM_NODELIST", "a"}},
      {{"SLURM_PROCID", "0"}, {"SLURM_NPROCS", "2"}, {"SLURM_NNODES", "1"}},
      {{"SLURM_PROCID", "0"}, {"SLURM_NPROCS", "2"}, {"MASTER_ADDR", "h"}},
      {{"DLPG_STORE_URL", "tcp://h:1"}},
  };
  for (const Env &e : envs) {
    Result r = Detect(e);
    asked.insert(r.asked.begin(), r.asked.end());
  }
  std::set<std::string> declared;
  for (int i = 0; i < DLPG__PARAM_COUNT; i++) declared.insert(dlpg__core_params[i].env);
  EXPECT_GE(asked.size(), 25u);
  for (const std::string &v : asked) EXPECT_TRUE(declared.count(v)) << v << " is not declared";
}

}  // namespace
