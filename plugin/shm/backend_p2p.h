/* Sends and receives of the shared-memory backend (backend_p2p.c): the p2p state of its
 * table (core/group/backend_abi.h's p2p_state_create, p2p_abort, p2p_destroy) and the issue of
 * SEND/RECV ops, decided per pair. */
#ifndef DLPG_SHM_BACKEND_P2P_H_
#define DLPG_SHM_BACKEND_P2P_H_

#include "core/group/backend_abi.h"

dlpg_status_t dlpg__shm_p2p_state_create(const dlpg__be_group_t *g, void **state);
dlpg_status_t dlpg__shm_p2p_issue(dlpg__be_op_t *const *ops, int n);
void dlpg__shm_p2p_abort(void *state);
void dlpg__shm_p2p_destroy(void *state);

#endif
