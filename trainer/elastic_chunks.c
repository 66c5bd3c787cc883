/* elastic_chunks.c - an elastic PServer job's epochs as chunks that the
 * live trainers claim on etcd (contract and keys in fl_chunks.h).
 *
 * Why chunks and not the rank's share: in async and geo mode trainers come
 * and go between steps, so a fixed share of a trainer slot would go
 * untrained while the slot is empty.  Claims are etcd transactions
 * (fl_etcd_create): a chunk goes to exactly one live trainer at a time, a
 * dead trainer's claim vanishes with its lease, and a done mark keeps a
 * finished chunk from ever being taken again. */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_chunks.h"
#include "fl_etcd.h"
#include "fl_log.h"

#define CHUNKS_MAX 4096
#define POLL_US (200 * 1000)

struct fl_chunks {
  fl_etcd *etcd;
  fl_etcd_keeper *keeper;
  int64_t lease;
  char prefix[256];
  char id[64];
  int64_t n;            /* chunks per epoch */
  int64_t steps;        /* steps per epoch */
  int64_t step_samples; /* samples per step */
  int64_t limit;        /* the job's steps (max_steps), 0 = every epoch's */
  uint64_t seed;
  int64_t epoch;        /* the epoch of cur */
  int64_t cur;          /* the chunk being trained, -1 = none */
  int64_t skip;         /* its steps a stopped trainer trained (its at mark) */
  int64_t left;         /* its steps not yet begun */
};

/* Parse "<chunks> <lease_s> <endpoints> <prefix>". */
static fl_status parse_env(const char *v, fl_chunks *c, double *lease_s, char *ep, size_t cap) {
  char fmt[32];
  long long n = 0;
  snprintf(fmt, sizeof fmt, "%%lld %%lf %%%zus %%%zus", cap - 1, sizeof c->prefix - 1);
  if (sscanf(v, fmt, &n, lease_s, ep, c->prefix) != 4 || n < 1 || n > CHUNKS_MAX || *lease_s < 1)
    return FL_ERR(FL_EINVAL, "FLOTILLA_ELASTIC_CHUNKS '%s': want '<chunks 1..%d> <lease_s> "
                  "<etcd endpoints> <key prefix>' (flotilla-run's elastic agent sets it)", v,
                  CHUNKS_MAX);
  c->n = n;
  return FL_OK;
}

/* Ownership: the caller owns *out. */
fl_status fl_chunks_open(int64_t steps, int64_t step_samples, uint64_t seed, fl_chunks **out) {
  const char *v = getenv("FLOTILLA_ELASTIC_CHUNKS");
  char ep[512];
  double lease_s = 0;
  fl_status st;
  *out = NULL;
  if (!v || !v[0]) return FL_OK;
  fl_chunks *c = calloc(1, sizeof *c);
  if (!c) return FL_ERR(FL_ENOMEM, "elastic chunks: out of memory");
  c->cur = -1;
  c->steps = steps;
  c->step_samples = step_samples;
  c->seed = seed;
  snprintf(c->id, sizeof c->id, "pid %ld", (long)getpid());
  st = parse_env(v, c, &lease_s, ep, sizeof ep);
  if (st == FL_OK && c->n > steps) {
    FL_LOGW("elastic chunks: %" PRId64 " chunks asked but an epoch has %" PRId64 " steps: %" PRId64
            " chunks of one step", c->n, steps, steps);
    c->n = steps;
  }
  if (st == FL_OK) st = fl_etcd_connect(ep, 5, &c->etcd);
  if (st == FL_OK) st = fl_etcd_lease_grant(c->etcd, (int64_t)lease_s, &c->lease);
  if (st == FL_OK)
    st = fl_etcd_keeper_start(ep, c->lease, (int64_t)lease_s, lease_s / 4, &c->keeper);
  if (st != FL_OK) {
    fl_chunks_close(c);
    return st;
  }
  FL_LOGI("elastic chunks: each epoch is %" PRId64 " chunks of about %" PRId64 " steps, claimed "
          "on etcd %s under %s (lease %.0f s)", c->n, steps / c->n, ep, c->prefix, lease_s);
  *out = c;
  return FL_OK;
}

/* Ownership: frees c. */
void fl_chunks_close(fl_chunks *c) {
  if (!c) return;
  if (c->keeper) fl_etcd_keeper_stop(c->keeper);
  if (c->etcd && c->lease) fl_etcd_lease_revoke(c->etcd, c->lease); /* logged; it expires anyway */
  fl_etcd_close(c->etcd);
  free(c);
}

static int64_t chunk_first_step(const fl_chunks *c, int64_t ch) { return ch * c->steps / c->n; }

/* The end of chunk ch of epoch e: the next chunk's first step, or the
 * job's last step (max_steps) when that comes first. */
static int64_t chunk_end(const fl_chunks *c, int64_t e, int64_t ch) {
  int64_t end = chunk_first_step(c, ch + 1);
  if (c->limit > 0 && c->limit - e * c->steps < end) end = c->limit - e * c->steps;
  return end;
}

/* Ownership: nothing kept. */
void fl_chunks_limit(fl_chunks *c, int64_t max_steps) {
  if (max_steps > 0 && max_steps != c->limit)
    FL_LOGI("elastic chunks: the job ends after %" PRId64 " steps of the epochs' order, whoever "
            "trains them (train.max_steps counts the job's steps, not this trainer's)", max_steps);
  c->limit = max_steps > 0 ? max_steps : 0;
}

/* Ownership: nothing kept. */
int64_t fl_chunks_epochs(const fl_chunks *c, int64_t epochs) {
  if (c->limit <= 0) return epochs;
  const int64_t need = (c->limit + c->steps - 1) / c->steps;
  return need < epochs ? need : epochs;
}

/* The chunks of epoch e: state[i] 0 free, 1 claimed, 2 done; *done counted. */
static fl_status read_epoch(fl_chunks *c, int64_t e, unsigned char *state, int64_t *done) {
  char k[320];
  fl_etcd_kv *kvs;
  size_t n;
  snprintf(k, sizeof k, "%se%" PRId64 "/", c->prefix, e);
  FL_TRY(fl_etcd_range(c->etcd, k, 0, &kvs, &n, NULL));
  memset(state, 0, (size_t)c->n);
  *done = 0;
  for (size_t i = 0; i < n; i++) {
    const char *p = kvs[i].key + strlen(k), *end;
    if (*p != 'c') continue;
    long long ch = strtoll(p + 1, (char **)&end, 10);
    if (ch < 0 || ch >= c->n) continue;
    unsigned char s = !strcmp(end, "/done") ? 2 : !*end ? 1 : 0;
    if (s > state[ch]) state[ch] = s;
  }
  for (int64_t i = 0; i < c->n; i++) /* past the job's last step: never trained */
    if (chunk_end(c, e, i) <= chunk_first_step(c, i)) state[i] = 2;
  for (int64_t i = 0; i < c->n; i++) *done += state[i] == 2;
  fl_etcd_kvs_free(kvs, n);
  return FL_OK;
}

/* Ownership: nothing kept. */
fl_status fl_chunks_first_epoch(fl_chunks *c, int64_t from, int64_t epochs, int64_t *epoch) {
  unsigned char state[CHUNKS_MAX];
  int64_t done = 0;
  for (*epoch = from; *epoch < epochs; (*epoch)++) {
    FL_TRY(read_epoch(c, *epoch, state, &done));
    if (done < c->n) break;
  }
  if (*epoch > from)
    FL_LOGI("elastic chunks: epochs %" PRId64 "..%" PRId64 " are done; starting at epoch %" PRId64,
            from, *epoch - 1, *epoch);
  return FL_OK;
}

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The order this epoch's chunks are tried in: a permutation drawn from
 * (seed, epoch), the same on every trainer. */
static void chunk_order(const fl_chunks *c, int64_t e, int64_t *order) {
  uint64_t s = c->seed * 0x2545f4914f6cdd1dULL + (uint64_t)e;
  for (int64_t i = 0; i < c->n; i++) order[i] = i;
  for (int64_t i = c->n - 1; i > 0; i--) {
    int64_t j = (int64_t)(mix(&s) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

/* Mark the chunk being trained done.  Logged before the mark is put, so
 * that a log never lacks a chunk etcd holds done: a trainer stopped in
 * between leaves a chunk logged done and still claimed, which another
 * trainer trains again once the claim's lease expires (the documented
 * at-least-once window), never one done on etcd that no log shows. */
static fl_status finish_chunk(fl_chunks *c) {
  char k[320];
  snprintf(k, sizeof k, "%se%" PRId64 "/c%" PRId64 "/done", c->prefix, c->epoch, c->cur);
  FL_LOGI("elastic chunks: epoch %" PRId64 " chunk %" PRId64 " done (%" PRId64 " samples)",
          c->epoch, c->cur,
          (chunk_end(c, c->epoch, c->cur) - chunk_first_step(c, c->cur)) * c->step_samples);
  FL_TRY(fl_etcd_put(c->etcd, k, c->id, 0));
  c->cur = -1;
  return FL_OK;
}

/* The steps of the chunk claimed as key that a stopped trainer trained
 * (its "<key>/at" mark; fl_chunks_leave), 0 without one. */
static fl_status chunk_at(fl_chunks *c, const char *key, int64_t len, int64_t *at) {
  char k[340];
  fl_etcd_kv *kvs;
  size_t n;
  snprintf(k, sizeof k, "%s/at", key);
  FL_TRY(fl_etcd_range(c->etcd, k, 1, &kvs, &n, NULL));
  *at = n ? strtoll(kvs[0].value, NULL, 10) : 0;
  fl_etcd_kvs_free(kvs, n);
  if (*at < 0 || *at >= len) {
    FL_LOGW("elastic chunks: %s says %" PRId64 " of the chunk's %" PRId64 " steps are trained: "
            "training the chunk whole", k, *at, len);
    *at = 0;
  }
  return FL_OK;
}

/* Chunk ch of epoch e, just claimed: trained from its start, or where a
 * stopped trainer left it. */
static fl_status take_chunk(fl_chunks *c, int64_t e, int64_t ch, const char *key) {
  const int64_t first = chunk_first_step(c, ch), len = chunk_end(c, e, ch) - first;
  FL_TRY(chunk_at(c, key, len, &c->skip));
  c->epoch = e;
  c->cur = ch;
  c->left = len - c->skip;
  FL_LOGI("elastic chunks: epoch %" PRId64 " chunk %" PRId64 " claimed (samples %" PRId64 "..%"
          PRId64 " of the epoch's order)%s", e, ch, (first + c->skip) * c->step_samples,
          (first + len) * c->step_samples - 1,
          c->skip ? ", going on where a stopped trainer left it" : "");
  return FL_OK;
}

/* Try to claim a free chunk of epoch e: *won 1 and c->cur set when one was. */
static fl_status claim_free(fl_chunks *c, int64_t e, const unsigned char *state, int *won) {
  int64_t order[CHUNKS_MAX];
  char k[320], d[330];
  chunk_order(c, e, order);
  *won = 0;
  for (int64_t i = 0; i < c->n && !*won; i++) {
    int64_t ch = order[i];
    if (state[ch]) continue;
    snprintf(k, sizeof k, "%se%" PRId64 "/c%" PRId64, c->prefix, e, ch);
    snprintf(d, sizeof d, "%s/done", k);
    FL_TRY(fl_etcd_create(c->etcd, k, c->id, c->lease, d, won));
    if (*won) FL_TRY(take_chunk(c, e, ch, k));
  }
  return FL_OK;
}

/* Ownership: nothing kept. */
fl_status fl_chunks_leave(fl_chunks *c) {
  char k[320], v[32];
  if (c->cur < 0) return FL_OK;
  if (c->left == 0) return finish_chunk(c);
  const int64_t len = chunk_end(c, c->epoch, c->cur) - chunk_first_step(c, c->cur);
  snprintf(k, sizeof k, "%se%" PRId64 "/c%" PRId64 "/at", c->prefix, c->epoch, c->cur);
  snprintf(v, sizeof v, "%" PRId64, len - c->left);
  FL_LOGI("elastic chunks: epoch %" PRId64 " chunk %" PRId64 " left after %" PRId64 " of its %"
          PRId64 " steps (its next trainer goes on from there)", c->epoch, c->cur, len - c->left,
          len); /* logged first, as a done mark (finish_chunk) */
  FL_TRY(fl_etcd_put(c->etcd, k, v, 0));
  c->cur = -1;
  return FL_OK;
}

/* Ownership: nothing kept. */
int64_t fl_chunks_left(const fl_chunks *c) { return c->cur >= 0 ? c->left : 0; }

/* Ownership: nothing kept. */
fl_status fl_chunks_next_step(fl_chunks *c, int64_t epoch, int64_t *first_sample, int *more) {
  unsigned char state[CHUNKS_MAX];
  int64_t done;
  int won = 0;
  *first_sample = -1;
  *more = 1;
  if (c->cur >= 0 && c->epoch == epoch && c->left > 0) {
    c->left--;
    return FL_OK;
  }
  for (;;) {
    /* a lost lease freed the chunk being trained: another trainer may hold
     * it now, so it is not marked done here */
    if (!fl_etcd_keeper_alive(c->keeper))
      return FL_ERR(FL_ECLOSED, "elastic chunks: this trainer's etcd lease is lost (its claims "
                    "went with it): stopping; the agent starts it again");
    if (c->cur >= 0) FL_TRY(finish_chunk(c));
    FL_TRY(read_epoch(c, epoch, state, &done));
    if (done == c->n) {
      *more = 0;
      return FL_OK;
    }
    FL_TRY(claim_free(c, epoch, state, &won));
    if (won) break;
    usleep(POLL_US); /* the epoch's last chunks are held by others */
  }
  *first_sample = (chunk_first_step(c, c->cur) + c->skip) * c->step_samples;
  c->left--;
  return FL_OK;
}
