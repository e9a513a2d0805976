// Fault injection through the ABI (test_faults*.cc): a trial forks a store server process
// (the plugin's TCP store on 127.0.0.1) and N rank processes; a controller in the parent
// may stop or kill any of them while they run. Each rank reports its observations as
// "key<TAB>value" lines through a pipe; the parent makes the assertions, so a rank that
// dies (the victim) needs no cooperation. Every wait has a deadline.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness.h"

namespace dlpgt {

// What a rank process gets.
struct FaultRank {
  const dlpg_api_t *api = nullptr;
  int rank = 0, size = 0;
  std::string url;   // tcp://127.0.0.1:PORT of the store process
  std::string name;  // the group name of this trial
  int out_fd = -1;
  // Report one observation to the parent.
  void Put(const std::string &key, const std::string &value) const;
  // Tell the parent this rank reached a point the controller waits for.
  void Mark(const std::string &what) const { Put("mark", what); }
};

// What the parent learns of a rank.
struct RankOutcome {
  pid_t pid = -1;
  int exit_code = -1;  // -1: died of a signal or killed
  int signal = 0;
  std::map<std::string, std::string> kv;  // the last value of each key
  std::vector<std::string> marks;
  std::string Get(const std::string &k) const {
    auto it = kv.find(k);
    return it == kv.end() ? "" : it->second;
  }
  double Secs(const std::string &k) const;  // -1 when absent
};

struct Trial {
  pid_t store_pid = -1;
  int port = 0;
  std::vector<pid_t> pids;
  std::vector<RankOutcome> out;
  // For controllers: wait until rank r has reported mark `what` (false at the deadline).
  bool WaitMark(int r, const std::string &what, double timeout_s);
  std::function<bool(double)> pump;  // internal: reads pipes up to a deadline
};

// Run one trial of n ranks; fn runs in each rank process; control (may be empty) runs in
// the parent once the ranks are forked. Ranks still alive after deadline_s are killed.
// store_url empty: the trial forks a store process of its own (killed at its end); else
// the ranks use that store (a long-lived one that outlives many trials: SpawnStore).
void RunTrial(int n, const std::string &name, double deadline_s,
              const std::function<void(FaultRank &)> &fn,
              const std::function<void(Trial &)> &control, Trial *trial,
              const std::string &store_url = "");
// A process serving the TCP store on 127.0.0.1 (its port in *port, -1 when it did not
// report one) until it is killed.
pid_t SpawnStore(int *port);

// Helpers for rank functions.
// Open the trial's store and create its group (name: the trial's, or name); NULL on
// failure, reported under "join" (else "join" = "ok").
dlpg_group_t *JoinTrialGroup(FaultRank &c, double timeout_s, const std::string &name = "");
// Block until key exists on the trial's store (a rank that stays alive but idle).
void WaitKey(FaultRank &c, const std::string &key, double timeout_s);
void SetKey(FaultRank &c, const std::string &key);
// A 1-element-per-rank float32 allreduce of `count` elements; returns the status, stores
// the elapsed seconds and the message under prefix_st/_secs/_msg, and checks the sum; when
// it succeeded, the backend that ran it (the group's flight record) under prefix_backend.
// at_call (may be empty) runs just before the call, once the input is ready.
dlpg_status_t TimedAllreduce(FaultRank &c, dlpg_group_t *g, int64_t count, const std::string &prefix,
                             const std::function<void()> &at_call = nullptr);
// Create a group of `size` ranks under `name` and allreduce on it; reports "<key>" = "ok" or
// the failure.
void CheckFreshGroup(FaultRank &c, int rank, int size, const std::string &name,
                     const std::string &key, double timeout_s);
// Destroy g and report the seconds it took under key.
void TimedDestroy(FaultRank &c, dlpg_group_t *g, const std::string &key);

// The backend of the group's latest flight-record entry ("" when there is none).
std::string LastBackend(const FaultRank &c, dlpg_group_t *g);
// The backend the host-memory collectives of these one-host trials must run on: "gloo" when
// DLPG_CPU_BACKEND forces it, else "shm" (the default choice for ranks of one host).
std::string ExpectedCpuBackend();

// One line for docs/reliability.md: fault, trial, per-survivor status and seconds.
void RecordOutcome(const std::string &fault, int trial, const Trial &t, const std::vector<int> &survivors,
                   const std::string &prefix);
// DLPG_FAULT_TRIALS, else def.
int TrialCount(int def);

}  // namespace dlpgt
