// The dlpg store seen through Gloo's rendezvous::Store interface (see store_adapter.h).
#include "gloo/store_adapter.h"

#include "core/clock.h"
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

void StoreAdapter::set(const std::string &key, const std::vector<char> &data) {
  throw_if_failed(dlpg_store_set(store_, key.c_str(), data.data(), data.size()),
                  "store set");
}

std::vector<char> StoreAdapter::get(const std::string &key) {
  // Learn the length first (this also waits for the key), then fetch; a value that grew
  // between the two calls (a concurrent set) is fetched again with the larger size.
  last_get_ = key;
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
  std::vector<const char *> ptrs;
  ptrs.reserve(keys.size());
  for (const auto &k : keys) ptrs.push_back(k.c_str());
  // Gloo passes its context timeout; a non-positive one means "the store's default".
  double t = timeout.count() > 0 ? static_cast<double>(timeout.count()) / 1000.0 : timeout_s_;
  throw_if_failed(dlpg_store_wait(store_, ptrs.data(), ptrs.size(), bound(t)),
                  "store wait");
}

}  // namespace dlpg_gloo
