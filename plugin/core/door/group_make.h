/* What dlpg_group_create and dlpg_group_split share (group_make.c): the options as the
 * caller compiled them, the timeout rule, and a group struct made ready for its first
 * operation but for its job (the creator starts it, the splitter inherits it). */
#ifndef DLPG_CORE_GROUP_MAKE_H_
#define DLPG_CORE_GROUP_MAKE_H_

#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* Longest group name accepted: it prefixes every store key of a created group. */
#define DLPG__GROUP_NAME_MAX 512

/* The options the caller compiled against, copied as far as its struct_size reaches (NULL:
 * the defaults). */
dlpg_status_t dlpg__group_read_options(const char *fn, const dlpg_group_options_t *in,
                                       dlpg_group_options_t *out);
/* options->timeout_s must be finite; <= 0 is the default (base/timeout.h). */
dlpg_status_t dlpg__group_resolve_timeout(const char *fn, const dlpg_group_options_t *o,
                                          double *timeout_s);
/* g's device communicator settings: o's nccl_* fields where set, else parent's (a split
 * child), else the library's defaults. Fails only for want of memory. */
dlpg_status_t dlpg__group_set_comm(const char *fn, struct dlpg_group *g,
                                   const dlpg_group_options_t *o,
                                   const struct dlpg_group *parent);
/* A group of rank of size on store (retained), its name copied, diagnostics attached, an
 * empty job (g->job, which the caller starts or inherits). */
dlpg_status_t dlpg__group_make(const char *fn, dlpg_store_t *store, int rank, int size,
                               double timeout_s, const char *name, struct dlpg_group **out);

#ifdef __cplusplus
}
#endif
#endif
