/* Stall warnings: once an operation has been blocked for DLPG_STALL_WARN_S (default
 * min(60 s, half the group's timeout)), the failure watcher (failure.h) logs one WARN per
 * operation naming the ranks whose progress records show they have not called it (with
 * their last call and its age) and the ranks that published none (whose progress is
 * unknown), long before the deadline. The records are the ones the watcher publishes
 * (progress.h); nothing is added to the hot path. */
#ifndef DLPG_CORE_STALL_H_
#define DLPG_CORE_STALL_H_

#include <stddef.h>
#include <stdint.h>

#include "core/health/flight.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* The group's stall threshold in seconds; 0: stall warnings are off. */
double dlpg__stall_after_s(const struct dlpg_group *g);
/* The watcher's look while blocked for blocked_s with p (this rank's progress, already
 * published): warns once per operation (*warned: the flight id last warned about). Reads
 * the peers' progress records (bounded store round trips) only when it warns. */
void dlpg__stall_check(struct dlpg_group *g, const dlpg__flight_progress_t *p, double blocked_s,
                       uint64_t *warned);

#ifdef __cplusplus
}
#endif
#endif
