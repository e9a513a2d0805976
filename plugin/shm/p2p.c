/* Pair channels: send and receive between two ranks, independent of the collectives and
 * of every other pair. The ordered pair (s, d) owns two slots in the segment; s writes
 * chunk n into slot n % 2 once d has consumed chunk n - 2 (its `done` counter), then
 * counts it in `sent`; d waits for `sent`, copies, counts `done`. Each chunk carries the
 * message's total size and tag, so a receive that does not match its send is detected,
 * and drained so the next message still starts on a chunk boundary. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "shm/seg.h"

static size_t dlpg__shm_cap(const dlpg__shm_t *sh) { return sh->p2p_slot_bytes - DLPG__SHM_P2P_HEAD; }

static dlpg_status_t dlpg__shm_p2p_start(dlpg__shm_t *sh, const char *fn, const void *buf,
                                         size_t nbytes, int peer, int tag) {
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  DLPG_ARG_CHECK(peer >= 0 && peer < sh->size && peer != sh->rank,
                 "%s: rank %d: peer %d is out of range or this rank (size %d)", fn,
                 sh ? sh->rank : -1, peer, sh->size);
  DLPG_ARG_CHECK(nbytes == 0 || buf, "%s: rank %d: buf is NULL for %zu bytes", fn, sh->rank, nbytes);
  snprintf(sh->op_label, sizeof sh->op_label, "%s %s rank %d", fn + 10,
           fn[10] == 's' ? "to" : "from", peer);
  (void)tag;
  return dlpg__shm_op_start(sh, sh->op_label);
}

dlpg_status_t dlpg__shm_send(dlpg__shm_t *sh, const void *buf, size_t nbytes, int peer, int tag) {
  DLPG_CHECK(dlpg__shm_p2p_start(sh, "dlpg__shm_send", buf, nbytes, peer, tag));
  dlpg__shm_chan_t *ch = dlpg__shm_chan(sh, sh->rank, peer);
  size_t cap = dlpg__shm_cap(sh), off = 0;
  char what[96];
  snprintf(what, sizeof what, "receive %zu bytes (tag %d) sent by this rank", nbytes, tag);
  do {
    uint32_t n = sh->sent[peer];
    size_t len = nbytes - off < cap ? nbytes - off : cap;
    DLPG_CHECK(dlpg__shm_wait(sh, &ch->done, &ch->done_waiters, n - 1, peer, what));
    uint8_t *slot = dlpg__shm_p2p_slot(sh, sh->rank, peer, n);
    dlpg__shm_msg_t head = {nbytes, tag, (uint32_t)len};
    memcpy(slot, &head, sizeof head);
    if (len) memcpy(slot + DLPG__SHM_P2P_HEAD, (const uint8_t *)buf + off, len);
    sh->sent[peer] = n + 1;
    dlpg__shm_post(&ch->sent, &ch->sent_waiters, n + 1);
    off += len;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_recv(dlpg__shm_t *sh, void *buf, size_t nbytes, int peer, int tag) {
  DLPG_CHECK(dlpg__shm_p2p_start(sh, "dlpg__shm_recv", buf, nbytes, peer, tag));
  dlpg__shm_chan_t *ch = dlpg__shm_chan(sh, peer, sh->rank);
  char what[96];
  snprintf(what, sizeof what, "send the %zu bytes (tag %d) this rank receives", nbytes, tag);
  size_t off = 0, total = nbytes;
  int32_t got_tag = tag;
  do {
    uint32_t n = sh->recvd[peer];
    DLPG_CHECK(dlpg__shm_wait(sh, &ch->sent, &ch->sent_waiters, n + 1, peer, what));
    const uint8_t *slot = dlpg__shm_p2p_slot(sh, peer, sh->rank, n);
    dlpg__shm_msg_t head;
    memcpy(&head, slot, sizeof head);
    if (off == 0) {
      total = head.total;
      got_tag = head.tag;
    }
    /* A mismatched message is consumed whole (nothing written past buf's nbytes). */
    if (total == nbytes && got_tag == tag && head.len)
      memcpy((uint8_t *)buf + off, slot + DLPG__SHM_P2P_HEAD, head.len);
    off += head.len;
    sh->recvd[peer] = n + 1;
    dlpg__shm_post(&ch->done, &ch->done_waiters, n + 1);
  } while (off < total);
  if (total != nbytes || got_tag != tag)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "dlpg__shm_recv: rank %d: rank %d sent %zu bytes with tag %d, this rank "
                       "expected %zu bytes with tag %d (the message was dropped)",
                       sh->rank, peer, total, (int)got_tag, nbytes, tag);
  return DLPG_OK;
}
