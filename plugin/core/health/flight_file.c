/* The flight record's dump at an abort (flight.h, dlpg__flight_dump_all): the log's lines,
 * and on timeout, abort or a peer's failure each rank's record as one JSON object in
 * DLPG_FLIGHT_RECORDER_DUMP, a directory ("<dir>/<group>.<rank>.json") or a path prefix
 * ("<prefix><group>.<rank>.json"), so `python -m dlpg.trace DIR` can read the dumps of all
 * ranks side by side. Written to a temporary name and renamed, so a reader sees a whole
 * file or none. Times are Unix seconds (the recorder's monotonic times shifted by the
 * offset between the two clocks at the dump), comparable across hosts as far as their
 * clocks agree. The fields are listed in docs/debugging.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/params.h"
#include "core/lines/backend.h"
#include "core/health/flight.h"
#include "core/group/group.h"
#include "core/lines/tensor.h"

#define DLPG__DUMP_PATH_MAX 4096

/* s as a JSON string (control characters escaped; other bytes as they are). */
static void dlpg__json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c == '\n') fputs("\\n", f);
    else if (*c == '\t') fputs("\\t", f);
    else if (*c < 0x20 || *c == 0x7f) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  }
  fputc('"', f);
}

/* A monotonic time as Unix seconds, or null when not reached (0). */
static void dlpg__json_time(FILE *f, double t, double offset) {
  if (t > 0) fprintf(f, "%.6f", t + offset);
  else fputs("null", f);
}

static void dlpg__json_entry(FILE *f, const dlpg__flight_entry_t *e, double offset) {
  const char *op = dlpg__op_name(e->kind);
  fprintf(f, "    {\"id\": %" PRIu64 ", \"seq_kind\": \"%s\", \"seq\": %" PRIu64 ", \"kind\": ",
          e->id, e->p2p ? "p2p" : "coll", e->seq);
  dlpg__json_str(f, strncmp(op, "dlpg_", 5) == 0 ? op + 5 : op);
  fputs(", \"dtype\": ", f);
  if (e->dtype >= 0) dlpg__json_str(f, dlpg__dtype_name((dlpg__dtype_t)e->dtype));
  else fputs("null", f);
  fprintf(f, ", \"count\": %" PRId64 ", \"ntensors\": %d, \"device\": ", e->count, e->ntensors);
  if (e->ntensors > 0) dlpg__json_str(f, dlpg__device_name(e->device_type));
  else fputs("null", f);
  fputs(", \"device_ids\": [", f);
  for (int d = 0, n = 0; d < 64; d++)
    if (e->device_ids & ((uint64_t)1 << d)) fprintf(f, "%s%d", n++ ? ", " : "", d);
  fputs("], \"peer\": ", f);
  if (e->peer >= 0) fprintf(f, "%d", e->peer);
  else fputs(e->p2p ? "\"any\"" : "null", f); /* a receive from any source */
  fputs(", \"backend\": ", f);
  dlpg__json_str(f, dlpg__backend_name(e->backend));
  fprintf(f, ", \"state\": \"%s\", \"status\": ", dlpg__flight_state_name(e->state));
  if (e->state >= DLPG__FL_DONE) dlpg__json_str(f, dlpg_status_name(e->status));
  else fputs("null", f);
  fputs(", \"issued\": ", f);
  dlpg__json_time(f, e->t_issue, offset);
  fputs(", \"started\": ", f);
  dlpg__json_time(f, e->t_start, offset);
  fputs(", \"ended\": ", f);
  dlpg__json_time(f, e->t_end, offset);
  fputs(", \"duration_ms\": ", f);
  if (e->t_end > 0) fprintf(f, "%.3f", (e->t_end - e->t_issue) * 1e3);
  else fputs("null", f);
  fputc('}', f);
}

/* The file for g under the parameter's value v; 0 when the path does not fit. A value that
 * ends in '/' or names a directory is a directory (created when missing, one level). */
static int dlpg__dump_path(struct dlpg_group *g, const char *v, char *path, size_t cap) {
  char name[256];
  size_t n = 0;
  for (const char *c = g->name; *c && n + 1 < sizeof name; c++) {
    int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
             *c == '.' || *c == '-' || *c == '_';
    name[n++] = ok ? *c : '_'; /* a name with '/' must not reach another directory */
  }
  name[n] = '\0';
  size_t len = strlen(v);
  struct stat st;
  int dir = (len > 0 && v[len - 1] == '/') || (stat(v, &st) == 0 && S_ISDIR(st.st_mode));
  if (dir && len > 0 && v[len - 1] == '/' && stat(v, &st) != 0) mkdir(v, 0755);
  int w = snprintf(path, cap, "%s%s%s.%d.json", v, dir && v[len - 1] != '/' ? "/" : "", name,
                   g->rank);
  return w > 0 && (size_t)w < cap;
}

static void dlpg__flight_dump_file(struct dlpg_group *g, const char *why) {
  const char *v = dlpg__param_str(DLPG__PARAM_FLIGHT_RECORDER_DUMP);
  if (!g || !g->flight || !v || !v[0]) return;
  char path[DLPG__DUMP_PATH_MAX], tmp[DLPG__DUMP_PATH_MAX + 32];
  if (!dlpg__dump_path(g, v, path, sizeof path)) {
    DLPG_WARN(COLL, g->rank, "group \"%s\": DLPG_FLIGHT_RECORDER_DUMP=\"%s\": the dump's path "
              "is too long; not written", g->name, v);
    return;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  dlpg__flight_entry_t *ent = NULL;
  dlpg__flight_progress_t p;
  int cap = 0;
  int n = dlpg__flight_entries(g, &ent, &cap, &p);
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  double unix_now = (double)rt.tv_sec + (double)rt.tv_nsec * 1e-9;
  double offset = unix_now - dlpg__now();
  char host[256];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';

  FILE *f = fopen(tmp, "w");
  int err = f ? 0 : errno;
  if (f) {
    fputs("{\n  \"format\": \"dlpg-flight-record\", \"version\": 1,\n  \"group\": ", f);
    dlpg__json_str(f, g->name);
    fprintf(f, ", \"rank\": %d, \"size\": %d, \"host\": ", g->rank, g->size);
    dlpg__json_str(f, host);
    fprintf(f, ", \"pid\": %d,\n  \"timeout_s\": %g, \"dumped_at\": %.6f,\n  \"reason\": ",
            (int)getpid(), g->timeout_s, unix_now);
    dlpg__json_str(f, why);
    fprintf(f, ",\n  \"progress\": {\"coll_seq_started\": %" PRIu64 ", \"coll_seq_completed\": %"
            PRIu64 ", \"p2p_seq_started\": %" PRIu64 ", \"p2p_seq_completed\": %" PRIu64
            ", \"in_flight\": %d},\n  \"capacity\": %d,\n  \"ops\": [\n",
            p.coll_started, p.coll_done, p.p2p_started, p.p2p_done, p.inflight, cap);
    for (int i = 0; i < n; i++) {
      dlpg__json_entry(f, &ent[i], offset);
      fputs(i + 1 < n ? ",\n" : "\n", f);
    }
    fputs("  ]\n}\n", f);
    if (ferror(f)) err = EIO;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
  }
  free(ent);
  if (err)
    DLPG_WARN(COLL, g->rank, "group \"%s\": cannot write the flight record to \"%s\": %s",
              g->name, path, strerror(err));
  else
    DLPG_WARN(COLL, g->rank, "group \"%s\": flight record written to %s", g->name, path);
}

static _Thread_local char dlpg__dump_cause[1024];

void dlpg__flight_dump_cause(const char *what) {
  snprintf(dlpg__dump_cause, sizeof dlpg__dump_cause, "%s", what ? what : "");
}

void dlpg__flight_dump_all(struct dlpg_group *g, const char *why) {
  char reason[DLPG__DUMP_PATH_MAX];
  if (dlpg__dump_cause[0]) {
    snprintf(reason, sizeof reason, "%s: %s", why, dlpg__dump_cause);
    why = reason;
    dlpg__dump_cause[0] = '\0';
  }
  dlpg__flight_dump(g, why);
  dlpg__flight_dump_file(g, why);
}

void dlpg__flight_dump_file_only(struct dlpg_group *g, const char *why) {
  dlpg__dump_cause[0] = '\0';
  dlpg__flight_dump_file(g, why);
}
