/* The monotonic clock every deadline in dlpg is measured on (core/time.c). */
#ifndef DLPG_CORE_CLOCK_H_
#define DLPG_CORE_CLOCK_H_

#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary epoch (CLOCK_MONOTONIC). */
double dlpg__now(void);
/* The CLOCK_MONOTONIC time s seconds from now, for pthread_cond_timedwait on a condition
 * variable that uses that clock. */
struct timespec dlpg__abstime_in(double s);
/* Sleep s seconds, resuming after signals. */
void dlpg__sleep(double s);

#ifdef __cplusplus
}
#endif
#endif
