/* The job state's memory (job.h), apart from job.c so that the group's last release, which
 * frees it, sits below the thread that releases the group. */
#include <stdlib.h>

#include "base/clock.h"
#include "core/group/job.h"

struct dlpg__job *dlpg__job_new(void) {
  struct dlpg__job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  pthread_mutex_init(&j->mu, NULL);
  dlpg__cond_init_monotonic(&j->cv);
  return j;
}

void dlpg__job_free(struct dlpg__job *j) {
  if (!j) return;
  pthread_cond_destroy(&j->cv);
  pthread_mutex_destroy(&j->mu);
  free(j);
}
