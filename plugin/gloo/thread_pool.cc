// The island's cached thread pool (thread_pool.h).
#include "gloo/thread_pool.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include <pthread.h>

namespace dlpg_gloo {
namespace {

// How long an idle thread waits for a job before it leaves.
constexpr std::chrono::seconds kIdleExit{5};

struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  int waiting = 0;  // threads inside the wait below, each about to take one job
};

// Never destroyed: see thread_pool.h.
Pool *g_pool = nullptr;

// A forked child has none of the parent's threads: it starts with an empty pool (the
// parent's, whose mutex a parent thread may have held at the fork, is left alone).
void reset_in_child() { g_pool = new Pool(); }

void make_pool() {
  g_pool = new Pool();
  pthread_atfork(nullptr, nullptr, reset_in_child);
}

Pool &pool() {
  static std::once_flag once;
  std::call_once(once, make_pool);
  return *g_pool;
}

void thread_main() {
  Pool &p = pool();
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    p.waiting++;
    bool got = p.cv.wait_for(lk, kIdleExit, [&] { return !p.jobs.empty(); });
    p.waiting--;
    if (!got) return;
    std::function<void()> job = std::move(p.jobs.front());
    p.jobs.pop_front();
    lk.unlock();
    job();
    job = nullptr;  // release what the job captured before waiting again
    lk.lock();
  }
}

}  // namespace

bool pool_run(std::function<void()> job) {
  Pool &p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  p.jobs.push_back(std::move(job));
  // Every waiting thread takes one queued job: start a thread when the queue outgrows them.
  if (static_cast<int>(p.jobs.size()) <= p.waiting) {
    p.cv.notify_one();
    return true;
  }
  try {
    std::thread(thread_main).detach();
    return true;
  } catch (const std::system_error &) {
    if (p.waiting > 0) {  // an idle thread will get to it
      p.cv.notify_one();
      return true;
    }
    p.jobs.pop_back();
    return false;
  }
}

}  // namespace dlpg_gloo
