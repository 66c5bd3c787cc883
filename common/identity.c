/* identity.c - run identities (job hash + run id) in checkpoints, and the
 * start-up decision about a checkpoint directory that already holds
 * checkpoints (rules in fl_identity.h). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "fl_identity.h"
#include "fl_log.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv_add(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= FNV_PRIME;
  }
  return h;
}

/* 1 when line (of the dump) opens one of the hashed top-level sections. */
static int hashed_section(const char *line) {
  return !strncmp(line, "model:", 6) || !strncmp(line, "optimizer:", 10);
}

fl_status fl_job_hash(const fl_job *job, uint64_t *out) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return FL_ERR(FL_ENOMEM, "job hash: out of memory");
  fl_status st = fl_job_write_yaml(job, f);
  if (fclose(f) != 0 && st == FL_OK) st = FL_ERR(FL_EIO, "job hash: %s", strerror(errno));
  if (st != FL_OK) {
    free(text);
    return st;
  }
  /* The lines of the model and optimizer sections, in file order. */
  uint64_t h = FNV_OFFSET;
  int in = 0;
  for (char *line = text; line && *line;) {
    char *nl = strchr(line, '\n');
    size_t n = nl ? (size_t)(nl - line) + 1 : strlen(line);
    if (line[0] != ' ' && line[0] != '#') in = hashed_section(line);
    if (in) h = fnv_add(h, line, n);
    line = nl ? nl + 1 : NULL;
  }
  free(text);
  *out = h;
  return FL_OK;
}

static int valid_run_id(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= FL_RUN_ID_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] <= ' ' || s[i] > '~') return 0;
  return 1;
}

fl_status fl_run_identity_resolve(const fl_job *job, const fl_cluster *cl, fl_run_identity *out) {
  memset(out, 0, sizeof *out);
  FL_TRY(fl_job_hash(job, &out->job_hash));
  const char *env = getenv("FLOTILLA_RUN_ID");
  if (env && *env) {
    if (!valid_run_id(env))
      return FL_ERR(FL_EINVAL, "FLOTILLA_RUN_ID=%s: want 1 to %d printable characters without "
                    "spaces", env, FL_RUN_ID_MAX - 1);
    snprintf(out->run_id, sizeof out->run_id, "%s", env);
    return FL_OK;
  }
  out->derived = 1;
  if (cl->mode == FL_MODE_LOCAL) {
    unsigned char raw[8];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
      return FL_ERR(FL_EIO, "run id: getrandom: %s", strerror(errno));
    size_t k = (size_t)snprintf(out->run_id, sizeof out->run_id, "local-");
    for (size_t i = 0; i < sizeof raw; i++)
      k += (size_t)snprintf(out->run_id + k, sizeof out->run_id - k, "%02x", raw[i]);
    return FL_OK;
  }
  /* Every process of a job started by hand computes the same one. */
  uint64_t h = fnv_add(FNV_OFFSET, &out->job_hash, sizeof out->job_hash);
  char buf[FL_HOST_MAX + 16];
  int mode = (int)cl->mode;
  h = fnv_add(h, &mode, sizeof mode);
  h = fnv_add(h, &cl->trainers_num, sizeof cl->trainers_num);
  for (int i = 0; cl->mode == FL_MODE_PS && i < cl->n_pservers; i++) {
    fl_endpoint_format(&cl->pserver_endpoints[i], buf, sizeof buf);
    h = fnv_add(h, buf, strlen(buf) + 1);
  }
  for (int i = 0; cl->mode != FL_MODE_PS && i < cl->n_trainer_endpoints; i++) {
    fl_endpoint_format(&cl->trainer_endpoints[i], buf, sizeof buf);
    h = fnv_add(h, buf, strlen(buf) + 1);
  }
  snprintf(out->run_id, sizeof out->run_id, "job-%016" PRIx64, h);
  return FL_OK;
}

const char *fl_run_identity_str(const fl_run_identity *id, char *out, size_t cap) {
  snprintf(out, cap, "job %016" PRIx64 ", run %s", id->job_hash, id->run_id);
  return out;
}

fl_status fl_run_identity_put(fl_ckpt_writer *w, const fl_run_identity *id) {
  FL_TRY(fl_ckpt_put(w, "meta/job_hash", FL_CKPT_U64, 0, NULL, &id->job_hash));
  return fl_ckpt_put_blob(w, "meta/run_id", id->run_id, strlen(id->run_id));
}

fl_status fl_run_identity_get(const fl_ckpt *c, const char *name, fl_run_identity *out) {
  fl_ckpt_record h, r;
  memset(out, 0, sizeof *out);
  if (fl_ckpt_find(c, "meta/run_id", &r) != FL_OK) return FL_ENOTFOUND;
  if (fl_ckpt_find(c, "meta/job_hash", &h) != FL_OK || h.dtype != FL_CKPT_U64 || h.ndim != 0 ||
      r.dtype != FL_CKPT_U8 || r.ndim != 1 || r.nbytes == 0 || r.nbytes >= FL_RUN_ID_MAX)
    return FL_ERR(FL_ECORRUPT, "%s: malformed run identity records (meta/job_hash, meta/run_id)",
                  name);
  memcpy(&out->job_hash, h.data, sizeof out->job_hash);
  memcpy(out->run_id, r.data, r.nbytes);
  out->run_id[r.nbytes] = '\0';
  return FL_OK;
}

int fl_run_identity_same(const fl_run_identity *a, const fl_run_identity *b) {
  return a->job_hash == b->job_hash && strcmp(a->run_id, b->run_id) == 0;
}

fl_status fl_ckpt_dir_claim(const char *dir, const fl_run_identity *me, fl_ckpt_start mode,
                            int move_aside, fl_ckpt **ck, int64_t *step) {
  char mine[160], theirs[160], path[4096];
  fl_run_identity old;
  fl_status st;
  *ck = NULL;
  *step = 0;
  fl_run_identity_str(me, mine, sizeof mine);
  fl_ckpt_dir_clean_tmp(dir, 1, NULL);
  if (mode == FL_CKPT_START_FRESH) {
    size_t moved = 0;
    if (!move_aside) return FL_OK;
    FL_TRY(fl_ckpt_dir_move_aside(dir, path, sizeof path, &moved));
    if (moved)
      FL_LOGW("--fresh: moved %zu checkpoint(s) of %s aside into %s; starting from scratch "
              "(%s)", moved, dir, path, mine);
    return FL_OK;
  }
  st = fl_ckpt_dir_load_latest(dir, ck, step);
  if (st == FL_ENOTFOUND) {
    if (mode == FL_CKPT_START_RESUME)
      FL_LOGW("--resume: no checkpoint in %s, starting from scratch", dir);
    return FL_OK;
  }
  if (st != FL_OK) {
    FL_LOGE("checkpoint dir %s holds checkpoints but none can be read; refusing to start "
            "from scratch over them (--fresh moves them aside)", dir);
    return st;
  }
  fl_ckpt_dir_path(dir, *step, path, sizeof path);
  st = fl_run_identity_get(*ck, path, &old);
  if (st == FL_OK && fl_run_identity_same(&old, me)) {
    FL_LOGI("%s holds this run's checkpoints (%s): resuming from step %" PRId64, dir,
            mine, *step);
    return FL_OK;
  }
  if (st == FL_OK)
    fl_run_identity_str(&old, theirs, sizeof theirs);
  else if (st == FL_ENOTFOUND)
    snprintf(theirs, sizeof theirs, "an unknown run: written before run identities were "
             "recorded");
  else
    snprintf(theirs, sizeof theirs, "an unknown run: unreadable identity");
  if (mode == FL_CKPT_START_RESUME) {
    FL_LOGW("--resume: continuing from %s, a checkpoint of another run (%s); this run is %s%s",
            path, theirs, mine,
            st == FL_OK && old.job_hash != me->job_hash
                ? " - the model or optimizer section changed since" : "");
    return FL_OK;
  }
  fl_ckpt_free(*ck);
  *ck = NULL;
  FL_LOGE("checkpoint dir %s holds the checkpoints of another run (newest %s: %s); this run "
          "is %s. Pass --resume to continue from them or --fresh to move them aside (into "
          "%s/old-<time>/); nothing was changed", dir, path, theirs, mine, dir);
  return FL_ESTATE;
}
