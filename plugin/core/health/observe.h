/* Health's part of a group (core/group/observer.h is how the execution path reports to it). */
#ifndef DLPG_CORE_OBSERVE_H_
#define DLPG_CORE_OBSERVE_H_

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* At creation: the group's flight recorder and failure state (either may be NULL on no
 * memory: the group then runs without it), and its observer. */
void dlpg__health_attach(struct dlpg_group *g);
/* At the last release (the watcher thread, if any, has exited or holds no reference). */
void dlpg__health_detach(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
