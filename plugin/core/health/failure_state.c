/* The per-group failure state (struct dlpg__watch, failure_impl.h): allocated with the group,
 * freed at its last release, and the cause of a group that failed because of a peer. It
 * calls nothing of core's, so the group's reference count, work completion and validation,
 * which read it, sit below the watcher thread and the failure records (watch.c, failure.c). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "core/health/failure_impl.h"
#include "core/group/group.h"

struct dlpg__watch *dlpg__watch_new(void) {
  struct dlpg__watch *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  pthread_mutex_init(&w->mu, NULL);
  dlpg__cond_init_monotonic(&w->cv);
  return w;
}

void dlpg__watch_free(struct dlpg__watch *w) {
  if (!w) return;
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

int dlpg__failure_remote(struct dlpg_group *g, char *buf, size_t cap) {
  struct dlpg__watch *w = g ? g->watch : NULL;
  if (!w || !atomic_load(&w->remote)) return 0;
  snprintf(buf, cap, "%s", w->cause); /* final once remote is set */
  return 1;
}
