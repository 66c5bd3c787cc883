/* tune.c - the choice of allreduce algorithm per bucket size: a short
 * probe of the job's own network between group members 0 and 1, an
 * alpha-beta-gamma fit, the per-size table, and its broadcast from rank 0
 * so that every rank runs the same algorithm on the same bucket.
 *
 * The probe is a ping-pong of PROBE_SIZES messages (best of PROBE_REPS
 * round trips each, one warm-up), alpha from the smallest one-way time,
 * beta from the slope to the largest, and the local cost of
 * adding a byte (gamma: fp32 reduce of 256 KiB).  On a 1 Gbit/s link
 * with 0.1 ms delay it takes about 60 ms.  A tuning restored from a
 * checkpoint for the same group size is used as is, so a resumed run
 * keeps its algorithms, hence its bits. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"

#define PROBE_REPS 3
static const size_t probe_sizes[] = {8, 4096, 65536, 262144, 1048576};
#define PROBE_SIZES (sizeof probe_sizes / sizeof probe_sizes[0])
#define GAMMA_FLOATS 65536

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Move len bytes to or from group member peer on channel 0, blocking. */
static fl_status xfer(const coll_xport *x, int peer, int send, uint8_t *p, size_t len) {
  coll_idle idle = {0, 0};
  while (len) {
    size_t m = 0;
    FL_TRY(send ? x->send(x->st, peer, 0, p, len, &m) : x->recv(x->st, peer, 0, p, len, &m));
    p += m;
    len -= m;
    if (m) {
      idle.since_ns = 0;
      continue;
    }
    coll_want w = {peer, 0, !send, send};
    FL_TRY(x->wait(x->st, &w, 1, &idle, "network probe"));
  }
  return FL_OK;
}

/* Member 0 pings, member 1 pongs; member 0 gets the one-way times. */
static fl_status ping_pong(const coll_xport *x, uint8_t *buf, double *oneway) {
  int peer = x->me == 0 ? 1 : 0;
  for (size_t i = 0; i < PROBE_SIZES; i++) {
    double best = 1e30;
    for (int r = 0; r <= PROBE_REPS; r++) {
      double t0 = now_s();
      if (x->me == 0) {
        FL_TRY(xfer(x, peer, 1, buf, probe_sizes[i]));
        FL_TRY(xfer(x, peer, 0, buf, probe_sizes[i]));
      } else {
        FL_TRY(xfer(x, peer, 0, buf, probe_sizes[i]));
        FL_TRY(xfer(x, peer, 1, buf, probe_sizes[i]));
      }
      double dt = (now_s() - t0) / 2.0;
      if (r > 0 && dt < best) best = dt;
    }
    oneway[i] = best;
  }
  return FL_OK;
}

static void fit(const double *t, coll_model *m) {
  /* Alpha from the smallest message, beta from the slope to the largest:
   * a least-squares line over sizes this far apart leaves the intercept
   * to the noise of the large ones. */
  size_t k = PROBE_SIZES - 1;
  double beta = (t[k] - t[0]) / (double)(probe_sizes[k] - probe_sizes[0]);
  if (!(beta > 1e-12)) beta = 1e-12;
  double alpha = t[0] - beta * (double)probe_sizes[0];
  if (!(alpha > 1e-7)) alpha = 1e-7;
  m->alpha = alpha;
  m->beta = beta;
  float *a = calloc(2 * GAMMA_FLOATS, sizeof(float));
  m->gamma = 1e-10;
  if (!a) return;
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    double t0 = now_s();
    coll_reduce_into(FL_COLL_F32, a, a + GAMMA_FLOATS, GAMMA_FLOATS);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
  }
  free(a);
  m->gamma = best / (GAMMA_FLOATS * sizeof(float));
}

/* "<=64 KiB tree, <=1 MiB halving_doubling, above ring" */
static void describe(const coll_tuning *t, char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (int b = 0; b < COLL_TABLE_BINS && o < cap; b++) {
    if (b + 1 < COLL_TABLE_BINS && t->table[b + 1] == t->table[b]) continue;
    if (b + 1 == COLL_TABLE_BINS)
      o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "above " : "all ",
                            coll_algo_names[t->table[b]]);
    else if (b >= 20)
      o += (size_t)snprintf(out + o, cap - o, "<=%d MiB %s, ", 1 << (b - 20),
                            coll_algo_names[t->table[b]]);
    else if (b >= 10)
      o += (size_t)snprintf(out + o, cap - o, "<=%d KiB %s, ", 1 << (b - 10),
                            coll_algo_names[t->table[b]]);
    else
      o += (size_t)snprintf(out + o, cap - o, "<=%d B %s, ", 1 << b, coll_algo_names[t->table[b]]);
  }
}

/* Member 0: restored tuning, or the probe's; says member 1 whether a
 * probe follows. */
static fl_status decide(const coll_xport *x, coll_tuning *t, uint8_t *buf) {
  fl_coll *c = x->c;
  coll_tuning old;
  int reuse = c->tuning_in_len &&
              coll_tuning_decode(c->tuning_in, c->tuning_in_len, &old) == FL_OK && old.n == x->n;
  uint8_t flag = (uint8_t)!reuse;
  FL_TRY(xfer(x, 1, 1, &flag, 1));
  char desc[512];
  if (reuse) {
    *t = old;
    describe(t, desc, sizeof desc);
    FL_LOGI("collective: allreduce algorithms from the checkpoint (%d ranks, alpha %.1f us, "
            "beta %.3f ns/B): %s",
            t->n, t->m.alpha * 1e6, t->m.beta * 1e9, desc);
    return FL_OK;
  }
  if (c->tuning_in_len)
    FL_LOGI("collective: the checkpoint's allreduce tuning is for another world size (or "
            "unreadable); probing the network again");
  double oneway[PROBE_SIZES];
  double t0 = now_s();
  FL_TRY(ping_pong(x, buf, oneway));
  t->n = x->n;
  fit(oneway, &t->m);
  coll_model_table(&t->m, x->n, (double)x->chunk, t->table);
  describe(t, desc, sizeof desc);
  FL_LOGI("collective: network probe (%.0f ms): alpha %.1f us, beta %.3f ns/B (%.2f GB/s), "
          "reduce %.3f ns/B; allreduce algorithm for %d ranks by bucket size: %s",
          (now_s() - t0) * 1e3, t->m.alpha * 1e6, t->m.beta * 1e9, 1e-9 / t->m.beta,
          t->m.gamma * 1e9, x->n, desc);
  return FL_OK;
}

fl_status coll_tune(const coll_xport *x, coll_sched *s, uint64_t *seq, int *algo, coll_tuning *t) {
  fl_coll *c = x->c;
  memset(t, 0, sizeof(*t));
  *algo = c->algo_req == COLL_ALGO_HIER ? COLL_ALGO_AUTO : c->algo_req;
  if (*algo != COLL_ALGO_AUTO) {
    t->n = x->n;
    memset(t->table, *algo, COLL_TABLE_BINS);
    return FL_OK;
  }
  uint8_t *buf = malloc(probe_sizes[PROBE_SIZES - 1]);
  if (!buf) return FL_ERR(FL_ENOMEM, "collective: out of memory for the network probe");
  memset(buf, 0, probe_sizes[PROBE_SIZES - 1]);
  fl_status st = FL_OK;
  if (x->me == 0) {
    st = decide(x, t, buf);
  } else if (x->me == 1) {
    uint8_t flag = 0;
    st = xfer(x, 0, 0, &flag, 1);
    double unused[PROBE_SIZES];
    if (st == FL_OK && flag) st = ping_pong(x, buf, unused);
  }
  free(buf);
  FL_TRY(st);
  uint8_t blob[COLL_TUNING_BYTES];
  if (x->me == 0) coll_tuning_encode(t, blob);
  coll_op a = {COLL_OP_BROADCAST, COLL_ALGO_RING, blob, sizeof blob, FL_COLL_F32, 0, ++*seq};
  FL_TRY(coll_sched_run(s, x, &a));
  if (coll_tuning_decode(blob, sizeof blob, t) != FL_OK)
    return FL_ERR(FL_EPROTO, "collective: rank 0 sent an unreadable allreduce tuning");
  return FL_OK;
}
