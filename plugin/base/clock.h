/* The monotonic clock every deadline in dlpg is measured on (base/time.c). */
#ifndef DLPG_BASE_CLOCK_H_
#define DLPG_BASE_CLOCK_H_

#include <pthread.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary epoch (CLOCK_MONOTONIC). */
double dlpg__now(void);
/* The CLOCK_MONOTONIC time s seconds from now, for pthread_cond_timedwait on a condition
 * variable that uses that clock. */
struct timespec dlpg__abstime_in(double s);
/* pthread_cond_init of a condition variable on CLOCK_MONOTONIC (the clock of
 * dlpg__abstime_in); pthread_cond_init's result. */
int dlpg__cond_init_monotonic(pthread_cond_t *cv);
/* Sleep s seconds, resuming after signals. */
void dlpg__sleep(double s);

#ifdef __cplusplus
}
#endif
#endif
