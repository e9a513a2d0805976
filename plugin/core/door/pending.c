/* Functions of the header whose implementation has not landed yet: each refuses plainly,
 * so a host that finds it in the table learns that instead of crashing. Each moves to its
 * own file when implemented. */
#include "base/status.h"
#include "dlpg/dlpg.h"

#define DLPG__PENDING(fn) \
  return dlpg__error(DLPG_ERR_UNSUPPORTED, fn ": not implemented in this build of dlpg")

dlpg_status_t dlpg_gather(dlpg_group_t *g, DLTensor *input, DLTensor *output, int root,
                          void *stream, dlpg_work_t **work) {
  (void)g, (void)input, (void)output, (void)root, (void)stream, (void)work;
  DLPG__PENDING("dlpg_gather");
}

dlpg_status_t dlpg_scatter(dlpg_group_t *g, DLTensor *input, DLTensor *output, int root,
                           void *stream, dlpg_work_t **work) {
  (void)g, (void)input, (void)output, (void)root, (void)stream, (void)work;
  DLPG__PENDING("dlpg_scatter");
}

dlpg_status_t dlpg_allgatherv(dlpg_group_t *g, DLTensor *input, DLTensor *output,
                              const int64_t *counts, const int64_t *displs, void *stream,
                              dlpg_work_t **work) {
  (void)g, (void)input, (void)output, (void)counts, (void)displs, (void)stream, (void)work;
  DLPG__PENDING("dlpg_allgatherv");
}

dlpg_status_t dlpg_alltoallv(dlpg_group_t *g, DLTensor *input, const int64_t *send_counts,
                             const int64_t *send_displs, DLTensor *output,
                             const int64_t *recv_counts, const int64_t *recv_displs,
                             void *stream, dlpg_work_t **work) {
  (void)g, (void)input, (void)send_counts, (void)send_displs, (void)output, (void)recv_counts;
  (void)recv_displs, (void)stream, (void)work;
  DLPG__PENDING("dlpg_alltoallv");
}

dlpg_status_t dlpg_reduce_scatter_v(dlpg_group_t *g, DLTensor *input, DLTensor *output,
                                    const int64_t *counts, const int64_t *displs,
                                    const dlpg_reduce_desc_t *op, void *stream,
                                    dlpg_work_t **work) {
  (void)g, (void)input, (void)output, (void)counts, (void)displs, (void)op, (void)stream;
  (void)work;
  DLPG__PENDING("dlpg_reduce_scatter_v");
}
