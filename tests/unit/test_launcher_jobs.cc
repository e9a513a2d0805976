// dlpg_group_create_from_env in jobs whose launcher is simulated: forked processes given the
// variables Slurm's srun, MPICH's Hydra and Open MPI's mpirun set (and nothing of
// torchrun's), each meeting the others on the store the detection finds (rank 0 serves on a
// port derived from the job id), then a checked allreduce of random per-rank data. The job
// id is drawn at random, and drawn again when the port it names is taken (rank 0's creation
// then fails with DLPG_ERR_SYSTEM); rank 0 hands the one that worked to the others through
// the harness's store, so no port is found by binding and releasing it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using dlpgt::Mode;
using dlpgt::RankCtx;

// Every variable of every launcher the detection reads, cleared before a job's own are set
// (ctest's environment might carry some).
const char *const kLauncherVars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "DLPG_STORE_URL", "DLPG_STORE_PORT", "DLPG_STORE_BIND", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NUM_NODES",
    "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST"};

// set_env(rank, size, job id): the launcher's variables of one rank.
using SetEnv = std::function<void(int, int, const std::string &)>;

void RunJob(int n, const SetEnv &set_env) {
  dlpgt::RunOptions ro;
  ro.create_group = false;
  dlpgt::RunRanks(Mode::kProcesses, n, [&](RankCtx &c) {
    for (const char *v : kLauncherVars) unsetenv(v);
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = Scaled(30);
    o.name = c.name.c_str();
    dlpg_group_t *g = nullptr;
    const std::string key = c.name + "/job-id";
    std::string job;
    if (c.rank == 0) {
      dlpgt::Rng rng(c.seed ^ static_cast<uint64_t>(getpid()));
      dlpg_status_t st = DLPG_ERR_SYSTEM;
      for (int attempt = 0; attempt < 20 && st == DLPG_ERR_SYSTEM; attempt++) {
        job = std::to_string(rng.Range(1, 1 << 30));
        set_env(c.rank, c.size, job);
        st = c.api->group_create_from_env(&o, &g);
      }
      DLPG_ASSERT_OK(c.api, st);
      DLPG_ASSERT_OK(c.api, c.api->store_set(c.store, key.c_str(), job.data(), job.size()));
    } else {
      char buf[32] = {0};
      size_t len = 0;
      DLPG_ASSERT_OK(c.api, c.api->store_get(c.store, key.c_str(), 30, buf, sizeof buf - 1, &len));
      set_env(c.rank, c.size, std::string(buf, len));
      DLPG_ASSERT_OK(c.api, c.api->group_create_from_env(&o, &g));
    }
    int r = -1, s = -1;
    DLPG_EXPECT_OK(c.api, c.api->group_rank(g, &r));
    DLPG_EXPECT_OK(c.api, c.api->group_size(g, &s));
    EXPECT_EQ(r, c.rank);
    EXPECT_EQ(s, c.size);
    // Random per-rank data (multiples of 1/4: every sum is exact), summed over the job.
    const size_t count = 1000;
    std::vector<float> x(count), want(count, 0.0f);
    for (int q = 0; q < c.size; q++) {
      dlpgt::Rng rng(dlpgt::Mix(c.seed, static_cast<uint64_t>(q) + 1));
      for (size_t i = 0; i < count; i++) {
        float v = static_cast<float>(rng.Range(-64, 64)) / 4.0f;
        want[i] += v;
        if (q == c.rank) x[i] = v;
      }
    }
    int64_t shape = static_cast<int64_t>(count);
    DLTensor t{};
    t.data = x.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.shape = &shape;
    DLTensor *pt = &t;
    DLPG_ASSERT_OK(c.api, c.api->allreduce(g, &pt, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    for (size_t i = 0; i < count; i++) ASSERT_EQ(x[i], want[i]) << "element " << i;
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(g));
  }, ro);
}

void Set(const char *name, const std::string &v) { setenv(name, v.c_str(), 1); }

TEST(LauncherJobs, SlurmOnOneNode) {
  RunJob(3, [](int r, int n, const std::string &job) {
    Set("SLURM_PROCID", std::to_string(r));
    Set("SLURM_LOCALID", std::to_string(r));
    Set("SLURM_NTASKS", std::to_string(n));
    Set("SLURM_STEP_NUM_TASKS", std::to_string(n));
    Set("SLURM_JOB_NUM_NODES", "1");
    Set("SLURM_STEP_NODELIST", "node17");
    Set("SLURM_JOB_ID", job);
    Set("SLURM_STEP_ID", "0");
  });
}

// The step spans "nodes" 127.0.0.[1-2]: the store is on the first one (rank 0's), as on
// a cluster whose node names resolve to their addresses.
TEST(LauncherJobs, SlurmAcrossNodesMeetsOnTheStepsFirstNode) {
  RunJob(4, [](int r, int n, const std::string &job) {
    Set("SLURM_PROCID", std::to_string(r));
    Set("SLURM_LOCALID", std::to_string(r / 2));
    Set("SLURM_NTASKS", std::to_string(n));
    Set("SLURM_STEP_NUM_NODES", "2");
    Set("SLURM_STEP_NODELIST", "127.0.0.[1-2]");
    Set("SLURM_JOB_ID", job);
    Set("SLURM_STEP_ID", "3");
  });
}

TEST(LauncherJobs, MpichHydra) {
  RunJob(3, [](int r, int n, const std::string &job) {
    Set("PMI_RANK", std::to_string(r));
    Set("PMI_SIZE", std::to_string(n));
    Set("MPI_LOCALRANKID", std::to_string(r));
    Set("MPI_LOCALNRANKS", std::to_string(n));
    Set("PMIX_NAMESPACE", "hydra-" + job);
  });
}

TEST(LauncherJobs, OpenMpi) {
  RunJob(2, [](int r, int n, const std::string &job) {
    Set("OMPI_COMM_WORLD_RANK", std::to_string(r));
    Set("OMPI_COMM_WORLD_SIZE", std::to_string(n));
    Set("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r));
    Set("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(n));
    Set("OMPI_MCA_ess_base_jobid", job);
  });
}

// Across hosts without MASTER_ADDR, mpirun's ranks cannot know where the store is: the
// creation fails at once, naming the variables that say it.
TEST(LauncherJobs, OpenMpiAcrossHostsFailsNamingTheVariables) {
  dlpgt::RunOptions ro;
  ro.create_group = false;
  dlpgt::RunRanks(Mode::kProcesses, 1, [&](RankCtx &c) {
    for (const char *v : kLauncherVars) unsetenv(v);
    Set("OMPI_COMM_WORLD_RANK", "0");
    Set("OMPI_COMM_WORLD_SIZE", "4");
    Set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    dlpg_group_t *g = nullptr;
    EXPECT_EQ(c.api->group_create_from_env(nullptr, &g), DLPG_ERR_INVALID_ARGUMENT);
    std::string msg = c.api->last_error();
    EXPECT_NE(msg.find("MASTER_ADDR"), std::string::npos) << msg;
    EXPECT_NE(msg.find("DLPG_STORE_URL"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dlpg_group_create_from_env"), std::string::npos) << msg;
    EXPECT_EQ(g, nullptr);
    for (const char *v : kLauncherVars) unsetenv(v);
    EXPECT_EQ(c.api->group_create_from_env(nullptr, &g), DLPG_ERR_INVALID_ARGUMENT);
    msg = c.api->last_error();
    for (const char *v : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
      EXPECT_NE(msg.find(v), std::string::npos) << v << " in: " << msg;
  }, ro);
}

}  // namespace
