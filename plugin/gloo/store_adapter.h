// A gloo::rendezvous::Store over a dlpg store, so one store serves both the NCCL unique-id
// exchange and Gloo's full-mesh rendezvous. The adapter holds a reference on the dlpg store
// for its whole life. A failing dlpg call throws dlpg_gloo::StatusError (status + message),
// which Gloo passes through connectFullMesh unchanged. Waits poll a counter set beside each
// key and never block in the store (store_adapter.cc says why).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "gloo/c_headers.h"

namespace dlpg_gloo {

class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  // timeout_s bounds get and the one-argument wait (Gloo passes its own to the other).
  // A deadline (dlpg__now() seconds, > 0) bounds every call, whatever timeout Gloo passes.
  StoreAdapter(dlpg_store_t *store, double timeout_s, double deadline = 0);
  ~StoreAdapter() override;
  StoreAdapter(const StoreAdapter &) = delete;
  StoreAdapter &operator=(const StoreAdapter &) = delete;

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;
  // The key of the last get or wait (Gloo's full-mesh rendezvous waits for and reads rank
  // i's addresses under "<prefix>/<i>" just before connecting to it: a failure names i).
  const std::string &last_get() const { return last_get_; }

 private:
  double bound(double timeout_s) const;  // timeout_s cut to the deadline (>= 1 ms)
  dlpg_store_t *store_;
  double timeout_s_;
  double deadline_;
  std::string last_get_;
};

}  // namespace dlpg_gloo
