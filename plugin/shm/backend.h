/* The shared-memory backend's table (backend.c), listed in plugin/registry/backends.c. */
#ifndef DLPG_SHM_BACKEND_H_
#define DLPG_SHM_BACKEND_H_

#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const dlpg__backend_vtbl_t dlpg__shm_backend;

#ifdef __cplusplus
}
#endif
#endif
