/* Stopping a per-group thread within a bound (thread.h). */
#include "core/group/thread.h"

#include <time.h>

#include "base/clock.h"

/* The longest sleep between two looks at the exited flag (the thread broadcasts when it
 * exits, so this bounds only a missed wake-up). */
#define DLPG__THREAD_SLICE_S 0.05

int dlpg__thread_wait_exit(pthread_mutex_t *mu, pthread_cond_t *cv, const int *exited,
                           double timeout_s) {
  double deadline = dlpg__now() + timeout_s;
  while (!*exited) {
    double left = deadline - dlpg__now();
    if (left <= 0) break;
    if (left > DLPG__THREAD_SLICE_S) left = DLPG__THREAD_SLICE_S;
    struct timespec ts = dlpg__abstime_in(left);
    pthread_cond_timedwait(cv, mu, &ts);
  }
  return *exited;
}

int dlpg__thread_wait_or_give_up(pthread_mutex_t *mu, pthread_cond_t *cv, const int *exited,
                                 int *detached, double timeout_s) {
  int done = dlpg__thread_wait_exit(mu, cv, exited, timeout_s);
  if (!done) *detached = 1;
  return done;
}

void dlpg__thread_reap(pthread_t thread, int exited) {
  if (exited) pthread_join(thread, NULL);
  else pthread_detach(thread);
}
