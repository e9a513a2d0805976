/* Stopping a per-group thread that may be stuck (the failure watcher in a store call, the
 * worker inside a backend), written once for both (watch.c, worker.c). The thread sets its
 * exited flag under its mutex as its last shared act and broadcasts its condition variable;
 * the stopper waits a bounded time for that, then joins the thread, or gives up: it marks
 * the thread detached (the thread then frees what it shares when it ends) and detaches it. */
#ifndef DLPG_CORE_THREAD_H_
#define DLPG_CORE_THREAD_H_

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

/* mu held: wait on cv (CLOCK_MONOTONIC) until *exited or timeout_s have passed. Returns
 * *exited. */
int dlpg__thread_wait_exit(pthread_mutex_t *mu, pthread_cond_t *cv, const int *exited,
                           double timeout_s);

/* mu held: the stopper's last wait. As dlpg__thread_wait_exit; when the thread still has
 * not exited, sets *detached (under mu, so the thread sees it as it ends). Returns *exited. */
int dlpg__thread_wait_or_give_up(pthread_mutex_t *mu, pthread_cond_t *cv, const int *exited,
                                 int *detached, double timeout_s);

/* mu not held, after dlpg__thread_wait_or_give_up: join the thread when it exited, else
 * detach it. */
void dlpg__thread_reap(pthread_t thread, int exited);

#ifdef __cplusplus
}
#endif
#endif
