/* Subgroups (dlpg.h, dlpg_group_split), the group room's part: the list of a parent's live
 * children (family.c) and the one exchange of the ranks' colors and keys (split_exchange.c).
 * The public function, which makes the child, is the door's (door/split.c).
 *
 * A parent and its children share one list, reference counted, so that either may be
 * destroyed first: the parent's abort walks it (health/abort.c) and a child leaves it at its
 * destroy. The child keeps nothing else of the parent but copies: the store (its own
 * reference), the job's number and a scope under the parent's, and the parent rank of each
 * of its ranks. */
#ifndef DLPG_CORE_SPLIT_H_
#define DLPG_CORE_SPLIT_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

typedef struct dlpg__family {
  pthread_mutex_t mu;       /* the list */
  atomic_int refs;          /* the parent's + one per registered child */
  struct dlpg_group **kids; /* live children, not retained: each leaves before it goes */
  int n, cap;
  /* dlpg_group_create_subset's count per member list (by its hash): how many children of
   * that list this rank made, which names the next one's scope (door/subset.c). */
  struct dlpg__subset_count *lists;
  int nlists, caplists;
} dlpg__family_t;

/* Register child in parent's list (made now if it has none): 0 on no memory. */
int dlpg__family_add(struct dlpg_group *parent, struct dlpg_group *child);
/* How many children of the member list whose hash is list_hash this rank made of parent
 * before (0 for the first), counting this one; -1 on no memory. */
int dlpg__family_subset_seq(struct dlpg_group *parent, uint64_t list_hash);
/* child leaves its parent's list (at its destroy; nothing if it has none). */
void dlpg__family_leave(struct dlpg_group *child);
/* The parent's live children, each retained (the caller releases them and frees *out);
 * returns how many (0: none, *out NULL). */
int dlpg__family_children(struct dlpg_group *parent, struct dlpg_group ***out);
/* At a group's last release: drop its reference to its own list and to the one it is in. */
void dlpg__family_release_all(struct dlpg_group *g);

/* The exchange of split number seq of g: every rank's color and key, into table[2 * r] and
 * table[2 * r + 1] for each rank r (table: 2 * g->size ints). One store write per rank and
 * one table that g's rank 0 publishes once every rank's write is there. Ends by deadline
 * (dlpg__now() seconds) with DLPG_ERR_TIMEOUT naming the ranks that had not split, or
 * DLPG_ERR_ABORTED when g is aborted. fn prefixes messages. */
dlpg_status_t dlpg__split_exchange(struct dlpg_group *g, const char *fn, int seq, int color,
                                   int key, double deadline, int *table);

#ifdef __cplusplus
}
#endif
#endif
