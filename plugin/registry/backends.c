/* The one list of backends (core/backend.h). Adding a backend: its folder under plugin/,
 * implementing dlpg__backend_vtbl_t, and one line here. Order matters only for a device two
 * backends claim: the first line wins. */
#include <dlpack/dlpack.h>

#include "core/backend.h"
#include "gloo/gloo.h"

const dlpg__backend_entry_t dlpg__backend_registry[] = {
    /* Built in: Gloo (a C++17 island) for host memory. */
    {"gloo", DLPG__DEV_BIT(kDLCPU) | DLPG__DEV_BIT(kDLCUDAHost), &dlpg__gloo_backend, NULL,
     DLPG__PARAM_COUNT, NULL},
    /* A module loaded at the first CUDA tensor, so libdlpg.so links no CUDA library. */
    {"nccl", DLPG__DEV_BIT(kDLCUDA) | DLPG__DEV_BIT(kDLCUDAManaged), NULL, "libdlpg_nccl.so",
     DLPG__PARAM_NCCL_BACKEND, "dlpg_nccl_backend_init"},
};

const int dlpg__backend_count =
    (int)(sizeof dlpg__backend_registry / sizeof dlpg__backend_registry[0]);

_Static_assert(sizeof dlpg__backend_registry / sizeof dlpg__backend_registry[0] <=
                   DLPG__BACKEND_MAX,
               "raise DLPG__BACKEND_MAX");
