/* The list of a parent's live children (split.h). Its memory is shared by the parent and
 * its children and goes with the last of them, so destroying either first is safe; the
 * list holds its children unretained, each removing itself at its destroy, and a walker
 * retains what it found under the list's lock. */
#include <stdlib.h>
#include <string.h>

#include "core/group/group.h"
#include "core/group/split.h"

struct dlpg__subset_count {
  uint64_t hash;
  int made;
};

static void dlpg__family_unref(dlpg__family_t *f) {
  if (!f || atomic_fetch_sub(&f->refs, 1) != 1) return;
  pthread_mutex_destroy(&f->mu);
  free(f->lists);
  free(f->kids);
  free(f);
}

/* parent's list, made at its first split (be_mu: two threads may split at once). */
static dlpg__family_t *dlpg__family_of(struct dlpg_group *parent) {
  pthread_mutex_lock(&parent->be_mu);
  if (!parent->kids) {
    dlpg__family_t *f = calloc(1, sizeof *f);
    if (f && pthread_mutex_init(&f->mu, NULL) != 0) {
      free(f);
      f = NULL;
    }
    if (f) atomic_init(&f->refs, 1); /* the parent's */
    parent->kids = f;
  }
  dlpg__family_t *f = parent->kids;
  pthread_mutex_unlock(&parent->be_mu);
  return f;
}

int dlpg__family_add(struct dlpg_group *parent, struct dlpg_group *child) {
  dlpg__family_t *f = dlpg__family_of(parent);
  if (!f) return 0;
  pthread_mutex_lock(&f->mu);
  if (f->n == f->cap) {
    int cap = f->cap ? f->cap * 2 : 4;
    struct dlpg_group **k = realloc(f->kids, sizeof *k * (size_t)cap);
    if (!k) {
      pthread_mutex_unlock(&f->mu);
      return 0;
    }
    f->kids = k;
    f->cap = cap;
  }
  f->kids[f->n++] = child;
  atomic_fetch_add(&f->refs, 1);
  child->up = f;
  pthread_mutex_unlock(&f->mu);
  return 1;
}

int dlpg__family_subset_seq(struct dlpg_group *parent, uint64_t list_hash) {
  dlpg__family_t *f = dlpg__family_of(parent);
  if (!f) return -1;
  pthread_mutex_lock(&f->mu);
  int seq = -1;
  for (int i = 0; i < f->nlists && seq < 0; i++)
    if (f->lists[i].hash == list_hash) seq = f->lists[i].made++;
  if (seq < 0) {
    if (f->nlists == f->caplists) {
      int cap = f->caplists ? f->caplists * 2 : 8;
      struct dlpg__subset_count *l = realloc(f->lists, sizeof *l * (size_t)cap);
      if (l) {
        f->lists = l;
        f->caplists = cap;
      }
    }
    if (f->nlists < f->caplists) {
      f->lists[f->nlists++] = (struct dlpg__subset_count){.hash = list_hash, .made = 1};
      seq = 0;
    }
  }
  pthread_mutex_unlock(&f->mu);
  return seq;
}

void dlpg__family_leave(struct dlpg_group *child) {
  dlpg__family_t *f = child->up;
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->n; i++)
    if (f->kids[i] == child) {
      f->kids[i] = f->kids[--f->n];
      break;
    }
  child->up = NULL;
  pthread_mutex_unlock(&f->mu);
  dlpg__family_unref(f);
}

int dlpg__family_children(struct dlpg_group *parent, struct dlpg_group ***out) {
  *out = NULL;
  pthread_mutex_lock(&parent->be_mu);
  dlpg__family_t *f = parent->kids;
  pthread_mutex_unlock(&parent->be_mu);
  if (!f) return 0;
  pthread_mutex_lock(&f->mu);
  int n = f->n;
  struct dlpg_group **v = n ? malloc(sizeof *v * (size_t)n) : NULL;
  if (!v) n = 0;
  for (int i = 0; i < n; i++) {
    v[i] = f->kids[i];
    dlpg__group_retain(v[i]); /* alive: a child leaves the list before its handle goes */
  }
  pthread_mutex_unlock(&f->mu);
  *out = v;
  return n;
}

void dlpg__family_release_all(struct dlpg_group *g) {
  dlpg__family_leave(g); /* normally done at destroy already */
  dlpg__family_unref(g->kids);
  g->kids = NULL;
  free(g->parent_ranks);
  g->parent_ranks = NULL;
  free(g->where_scope);
  g->where_scope = NULL;
  free(g->where_ranks);
  g->where_ranks = NULL;
}
