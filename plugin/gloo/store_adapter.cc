// The dlpg store seen through Gloo's rendezvous::Store interface (see store_adapter.h).
#include "gloo/store_adapter.h"

#include <cstdio>

#include "base/clock.h"
#include "gloo/errors.h"

namespace dlpg_gloo {

StoreAdapter::StoreAdapter(dlpg_store_t *store, double timeout_s, double deadline)
    : store_(store), timeout_s_(timeout_s), deadline_(deadline) {
  dlpg__store_retain(store_);
}

double StoreAdapter::bound(double timeout_s) const {
  if (deadline_ <= 0) return timeout_s;
  // Gloo passes its context timeout, which the caller may have shortened for its own
  // reasons (context.cc): the deadline alone decides.
  double left = deadline_ - dlpg__now();
  return left < 1e-3 ? 1e-3 : left;
}

StoreAdapter::~StoreAdapter() { dlpg__store_release(store_); }

namespace {

// Beside every key Gloo sets, a counter says that it is there. Waits poll these counters
// with dlpg_store_add(0), which never blocks: a host store (torch's TCPStore through the
// Python shim) may not survive a wait that timed out (torch leaves it registered at its
// server, whose late answer then desynchronises the connection), and a wait in short slices
// (so that several threads can share the store) would time out again and again while
// point-to-point pairs are connected concurrently.
std::string marker(const std::string &key) { return key + "/dlpg-set"; }

}  // namespace

void StoreAdapter::set(const std::string &key, const std::vector<char> &data) {
  throw_if_failed(dlpg_store_set(store_, key.c_str(), data.data(), data.size()),
                  "store set");
  throw_if_failed(dlpg_store_add(store_, marker(key).c_str(), 1, nullptr), "store add");
}

std::vector<char> StoreAdapter::get(const std::string &key) {
  // Learn the length first (this also waits for the key), then fetch; a value that grew
  // between the two calls (a concurrent set) is fetched again with the larger size.
  last_get_ = key;
  wait({key});
  size_t len = 0;
  throw_if_failed(dlpg_store_get(store_, key.c_str(), bound(timeout_s_), nullptr, 0, &len),
                  "store get");
  std::vector<char> buf;
  for (int attempt = 0; attempt < 8; attempt++) {
    buf.resize(len);
    size_t got = 0;
    throw_if_failed(dlpg_store_get(store_, key.c_str(), bound(timeout_s_), buf.data(), buf.size(), &got),
                    "store get");
    if (got <= buf.size()) {
      buf.resize(got);
      return buf;
    }
    len = got;
  }
  throw StatusError(DLPG_ERR_INTERNAL,
                    "store get: value of key '" + key + "' keeps changing size");
}

void StoreAdapter::wait(const std::vector<std::string> &keys) {
  wait(keys, std::chrono::milliseconds(static_cast<long long>(timeout_s_ * 1000.0)));
}

void StoreAdapter::wait(const std::vector<std::string> &keys,
                        const std::chrono::milliseconds &timeout) {
  if (keys.empty()) return;
  last_get_ = keys.back();
  // Gloo passes its context timeout; a non-positive one means "the store's default". The
  // group's deadline (bound) caps it.
  double t = bound(timeout.count() > 0 ? static_cast<double>(timeout.count()) / 1000.0 : timeout_s_);
  const double deadline = dlpg__now() + t;
  double nap = 100e-6;
  for (size_t i = 0; i < keys.size();) {
    int64_t n = 0;
    throw_if_failed(dlpg_store_add(store_, marker(keys[i]).c_str(), 0, &n), "store wait");
    if (n > 0) {
      i++;
      continue;
    }
    double left = deadline - dlpg__now();
    if (left <= 0) {
      char secs[32];
      snprintf(secs, sizeof secs, "%g", t);
      throw StatusError(DLPG_ERR_TIMEOUT, std::string("store wait: timed out after ") + secs +
                                              " s waiting for key '" + keys[i] + "'");
    }
    dlpg__sleep(nap < left ? nap : left);
    if (nap < 0.01) nap *= 2;
  }
}

}  // namespace dlpg_gloo
