// The island's pool of threads for blocking transfers. A job may block for as long as its
// peer takes (a receive waits for its send), so the pool never makes a job wait for another:
// a job runs on an idle thread, or on a new one when none is idle. Threads idle for a few
// seconds leave. The pool lives for the whole process (it is never destroyed, so a thread
// still waiting at exit touches no destroyed object).
#pragma once

#include <functional>

namespace dlpg_gloo {

// Run job on a pool thread. Returns false (job not run) when no thread could be started
// and none is idle. job must not throw.
bool pool_run(std::function<void()> job);

}  // namespace dlpg_gloo
