/* The uneven collectives' cross-rank agreement (vcounts.h). */
#include "core/group/vcounts.h"

#include <stdio.h>
#include <string.h>

void dlpg__vcounts_publish(const dlpg__be_op_t *op, int size, int64_t *dst) {
  size_t n = (size_t)size;
  if (dlpg__vcounts_len(op->kind, size) == 0) return;
  memcpy(dst, op->counts, n * sizeof *dst);
  if (op->kind == DLPG__OP_ALLTOALLV) memcpy(dst + n, op->recv_counts, n * sizeof *dst);
}

int dlpg__vcounts_disagree(dlpg__op_kind_t kind, int size, const int64_t *const *pub, char *buf,
                           size_t cap) {
  if (kind == DLPG__OP_ALLTOALLV) {
    /* Sender i's send_counts[j] against receiver j's recv_counts[i], senders in rank order. */
    for (int i = 0; i < size; i++)
      for (int j = 0; j < size; j++) {
        long long sent = (long long)pub[i][j], want = (long long)pub[j][size + i];
        if (sent == want) continue;
        snprintf(buf, cap,
                 "rank %d sends %lld element%s to rank %d but rank %d expects %lld from rank %d "
                 "(rank %d's send_counts[%d] = %lld, rank %d's recv_counts[%d] = %lld)",
                 i, sent, sent == 1 ? "" : "s", j, j, want, i, i, j, sent, j, i, want);
        return 1;
      }
    return 0;
  }
  if (dlpg__vcounts_len(kind, size) == 0) return 0;
  for (int r = 1; r < size; r++)
    for (int k = 0; k < size; k++)
      if (pub[r][k] != pub[0][k]) {
        snprintf(buf, cap,
                 "rank 0 has counts[%d] = %lld but rank %d has counts[%d] = %lld (counts must "
                 "be the same on every rank)", k, (long long)pub[0][k], r, k, (long long)pub[r][k]);
        return 1;
      }
  return 0;
}
