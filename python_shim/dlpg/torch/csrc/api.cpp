// The library and the rendezvous store: libdlpg is reached only through dlopen and
// dlpg_get_api (no link-time dependency, so one extension serves any libdlpg of ABI major
// 0), and torch's store is handed to it as a dlpg_store_ops_t.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dlpg_c10d.h"

namespace dlpg_torch {
namespace {

std::mutex g_lib_mu;
const dlpg_api_t* g_api = nullptr;
std::string g_path;

}  // namespace

void load_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_lib_mu);
  if (g_api) {
    TORCH_CHECK(path == g_path, "dlpg: libdlpg is already loaded from ", g_path,
                "; cannot load a second one from ", path);
    return;
  }
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(h, "dlpg: dlopen(", path, ") failed: ", dlerror());
  auto get = reinterpret_cast<dlpg_get_api_fn>(dlsym(h, "dlpg_get_api"));
  TORCH_CHECK(get, "dlpg: ", path, " has no dlpg_get_api symbol");
  const dlpg_api_t* a = get(DLPG_ABI_MAJOR);
  TORCH_CHECK(a, "dlpg: ", path, " does not implement ABI major ", DLPG_ABI_MAJOR);
  TORCH_CHECK(a->struct_size >= offsetof(dlpg_api_t, work_free) + sizeof(a->work_free),
              "dlpg: ", path, "'s function table is ", a->struct_size,
              " bytes, smaller than this extension needs (", sizeof(dlpg_api_t), ")");
  g_api = a;
  g_path = path;
}

const dlpg_api_t& api() {
  TORCH_CHECK(g_api, "dlpg: the library is not loaded (internal error)");
  return *g_api;
}

namespace {

// The store callbacks can hand libdlpg only a status, so the text of the last unexpected
// exception torch's store raised is kept here and added to the next error this extension
// raises: a user then sees why the store failed, not only that it did.
std::mutex g_exc_mu;
std::string g_store_exc;

std::string take_store_exception() {
  std::lock_guard<std::mutex> lock(g_exc_mu);
  std::string e;
  e.swap(g_store_exc);
  return e.empty() ? e : " (the last exception from torch's store: " + e + ")";
}

}  // namespace

namespace {

// A failed status as a torch exception. A timeout is torch's DistBackendError (what its own
// backends raise; Python's torch.distributed.DistBackendError, a RuntimeError) and leads
// with the words torch and its users match on (" Timed out "), then libdlpg's precise cause;
// every other status stays a RuntimeError with libdlpg's message.
[[noreturn]] void raise(dlpg_status_t status, const char* msg) {
  std::string text = c10::str(g_api->status_name(status), ": ", msg, take_store_exception());
  if (status == DLPG_ERR_TIMEOUT)
    C10_THROW_ERROR(DistBackendError, "[dlpg] Timed out waiting for an operation: " + text);
  TORCH_CHECK(false, text);
}

}  // namespace

void check(dlpg_status_t status, const char* what) {
  if (status == DLPG_OK) return;
  const char* msg = g_api->last_error();
  raise(status, (msg && *msg) ? msg : what);
}

void check_work(dlpg_status_t status, dlpg_work_t* w) {
  if (status == DLPG_OK) return;
  const char* msg = g_api->work_error(w);
  if (!msg || !*msg) msg = g_api->last_error();
  raise(status, msg ? msg : "dlpg operation failed");
}

// ---------------------------------------------------------------- the store adapter

namespace {

struct TorchStore {
  c10::intrusive_ptr<c10d::Store> store;
  double timeout_s;
};

// Every callback turns an exception into a status: none may cross into libdlpg.
dlpg_status_t status_of(const std::exception& e) {
  std::string m = e.what();
  for (auto& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (m.find("timeout") != std::string::npos || m.find("timed out") != std::string::npos)
    return DLPG_ERR_TIMEOUT;
  return DLPG_ERR_SYSTEM;
}

// A timeout is an expected answer (dlpg waits in slices); anything else is kept and printed
// once on stderr, since libdlpg's message can only say which callback failed on which key.
dlpg_status_t store_failed(const char* cb, const char* key, const std::string& what) {
  std::string e = std::string(cb) + "('" + key + "'): " + what;
  std::fprintf(stderr, "dlpg.torch: torch's store raised in %s\n", e.c_str());
  std::lock_guard<std::mutex> lock(g_exc_mu);
  g_store_exc = e;
  return DLPG_ERR_SYSTEM;
}

template <typename F>
dlpg_status_t guarded(const char* cb, const char* key, F&& f) {
  try {
    f();
    return DLPG_OK;
  } catch (const std::exception& e) {
    dlpg_status_t st = status_of(e);
    return st == DLPG_ERR_TIMEOUT ? st : store_failed(cb, key, e.what());
  } catch (...) {
    return store_failed(cb, key, "an exception that is not a std::exception");
  }
}

dlpg_status_t cb_set(void* ctx, const char* key, const void* value, size_t len) {
  return guarded("set", key, [&] {
    auto p = static_cast<const uint8_t*>(value);
    static_cast<TorchStore*>(ctx)->store->set(key, std::vector<uint8_t>(p, p + len));
  });
}

// A bounded wait that polls check(), which never blocks, with a growing pause. torch's
// TCPStore client cannot take a wait() that times out: the server's late answer is then read
// as the reply to the client's next request, and every later call on that store (all
// threads of the process share its one connection) fails or hangs; short socket timeouts
// also make torch log "waitForInput ... timed out". dlpg waits in short slices on keys that
// may not exist yet (where a rank runs, a creation's nonce), so every wait goes through here.
void wait_polling(c10d::Store& store, const std::vector<std::string>& keys, double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::microseconds(200);
  while (!store.check(keys)) {
    auto now = clock::now();
    if (now >= deadline)
      throw std::runtime_error("timed out after " + std::to_string(timeout_s) +
                               " s waiting for key '" + keys.front() + "'");
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

dlpg_status_t cb_get(void* ctx, const char* key, double timeout_s, void* buf, size_t capacity,
                     size_t* len) {
  return guarded("get", key, [&] {
    auto* s = static_cast<TorchStore*>(ctx);
    double t = timeout_s > 0 ? timeout_s : s->timeout_s;
    wait_polling(*s->store, {key}, t);
    std::vector<uint8_t> v = s->store->get(key);
    if (capacity && buf) std::memcpy(buf, v.data(), std::min(capacity, v.size()));
    *len = v.size();
  });
}

dlpg_status_t cb_add(void* ctx, const char* key, int64_t delta, int64_t* result) {
  return guarded("add", key, [&] {
    int64_t v = static_cast<TorchStore*>(ctx)->store->add(key, delta);
    if (result) *result = v;
  });
}

dlpg_status_t cb_wait(void* ctx, const char* const* keys, size_t nkeys, double timeout_s) {
  return guarded("wait", nkeys ? keys[0] : "", [&] {
    auto* s = static_cast<TorchStore*>(ctx);
    std::vector<std::string> k(keys, keys + nkeys);
    if (!k.empty()) wait_polling(*s->store, k, timeout_s > 0 ? timeout_s : s->timeout_s);
  });
}

void cb_release(void* ctx) { delete static_cast<TorchStore*>(ctx); }

dlpg_status_t cb_check(void* ctx, const char* const* keys, size_t nkeys, int* all_exist) {
  return guarded("check", nkeys ? keys[0] : "", [&] {
    std::vector<std::string> k(keys, keys + nkeys);
    *all_exist = static_cast<TorchStore*>(ctx)->store->check(k) ? 1 : 0;
  });
}

dlpg_status_t cb_delete(void* ctx, const char* key, int* deleted) {
  return guarded("delete_key", key, [&] {
    bool d = static_cast<TorchStore*>(ctx)->store->deleteKey(key);
    if (deleted) *deleted = d ? 1 : 0;
  });
}

}  // namespace

namespace {

// The host of the TCPStore under torch's PrefixStores ("" for other stores): Gloo's peers
// listen on the local address that routes there, as they do for a dlpg tcp:// store.
std::string tcp_host(c10::intrusive_ptr<c10d::Store> s) {
  for (int depth = 0; s && depth < 16; depth++) {
    if (auto* p = dynamic_cast<c10d::PrefixStore*>(s.get())) {
      s = p->getUnderlyingStore();
      continue;
    }
    if (auto* t = dynamic_cast<c10d::TCPStore*>(s.get())) return t->getHost();
    break;
  }
  return "";
}

}  // namespace

dlpg_store_t* store_from_torch(c10::intrusive_ptr<c10d::Store> store, double timeout_s) {
  const std::string host = tcp_host(store);
  const dlpg_store_ops_t ops = {sizeof(dlpg_store_ops_t), cb_set, cb_get, cb_add,
                                cb_wait, cb_release, cb_check, cb_delete,
                                host.empty() ? nullptr : host.c_str()};
  auto* ctx = new TorchStore{std::move(store), timeout_s};
  dlpg_store_t* s = nullptr;
  dlpg_status_t st = api().store_from_ops(&ops, ctx, timeout_s, &s);
  if (st != DLPG_OK) {
    delete ctx;
    check(st, "dlpg_store_from_ops");
  }
  return s;
}

}  // namespace dlpg_torch
