/* The monotonic clock every deadline in dlpg is measured on. */
#include <errno.h>
#include <time.h>

#include "base/clock.h"

struct timespec dlpg__abstime_in(double s) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (s < 0) s = 0;
  ts.tv_sec += (time_t)s;
  ts.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

int dlpg__cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
}

void dlpg__sleep(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

double dlpg__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
