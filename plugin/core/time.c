/* The monotonic clock every deadline in dlpg is measured on. */
#include <time.h>

#include "core/group.h"

double dlpg__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
