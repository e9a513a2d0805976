/* The one list of backends, handed to core when the library loads (core/lines/backend.h). Adding
 * a backend: its folder under plugin/, implementing dlpg__backend_vtbl_t (core/group/backend_abi.h),
 * and one line here. Order matters only for a device two backends claim: validation hands
 * out the first, and each group chooses among them in this order (core/lines/backend.h). Core
 * never names anything here: this file reaches core (dlpg__backend_register) and the
 * built-in tables, not the other way round. */
#include <dlpack/dlpack.h>

#include "core/lines/backend.h"
#include "gloo/gloo.h"
#include "shm/backend.h"

static const dlpg__backend_entry_t dlpg__registry[] = {
    /* Built in: shared memory for host memory of groups on one host (its table's locality:
     * collectives chosen per group, backend_choice.c; sends and receives decided per pair,
     * handing a pair that does not share a host to the next line), then Gloo (a C++17
     * island) for any group and any pair. */
    {"shm", DLPG__DEV_BIT(kDLCPU) | DLPG__DEV_BIT(kDLCUDAHost), &dlpg__shm_backend, NULL,
     DLPG__PARAM_COUNT},
    /* Built in: Gloo (a C++17 island) for host memory. */
    {"gloo", DLPG__DEV_BIT(kDLCPU) | DLPG__DEV_BIT(kDLCUDAHost), &dlpg__gloo_backend, NULL,
     DLPG__PARAM_COUNT},
    /* A module loaded at the first CUDA tensor, so libdlpg.so links no CUDA library. */
    {"nccl", DLPG__DEV_BIT(kDLCUDA) | DLPG__DEV_BIT(kDLCUDAManaged), NULL, "libdlpg_nccl.so",
     DLPG__PARAM_NCCL_BACKEND},
};

_Static_assert(sizeof dlpg__registry / sizeof dlpg__registry[0] <= DLPG__BACKEND_MAX,
               "raise DLPG__BACKEND_MAX");

/* Runs when libdlpg.so (or a tool or test linking core's objects) is loaded, before any
 * operation can ask for a backend. */
__attribute__((constructor)) static void dlpg__registry_register(void) {
  for (size_t i = 0; i < sizeof dlpg__registry / sizeof dlpg__registry[0]; i++)
    dlpg__backend_register(&dlpg__registry[i]);
}
