/* tune.c - the choice of allreduce algorithm per bucket size: a short
 * probe of the job's own network between group members 0 and 1, an
 * alpha-beta-gamma fit, the per-size table, and its broadcast from rank 0
 * so that every rank runs the same algorithm on the same bucket.
 *
 * The probe is a ping-pong of PROBE_SIZES messages (best of PROBE_REPS
 * round trips each, one warm-up), alpha from the smallest one-way time,
 * beta from the slope to the largest, and the local cost of
 * adding a byte (gamma: fp32 reduce of 256 KiB).  Then the whole group
 * runs allreduces of each algorithm at two sizes (1 MiB, less where the
 * model says that takes over GROUP_BUDGET_S, and 1/16 of it; a warm-up
 * and the best of GROUP_REPS rounds), and each algorithm's latency and
 * bandwidth terms get the factors (coll_model.lat, eff) that make the
 * model give what they really took: two algorithms that move the same
 * bytes need not move them equally fast (halving-doubling's few large
 * exchanges, one after the other, ran 1.6 times slower than the ring's
 * pipelined steps on 8 shaped namespaces, where the plain model called
 * them equal), and a step costs more than one link's alpha when every
 * rank sends at once.  On 8 nodes at 1 Gbit/s with 0.1 ms delay the probe takes
 * under a second.  A tuning restored from a checkpoint for the same
 * group size is used as is, so a resumed run keeps its algorithms, hence
 * its bits. */
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
#define GROUP_REPS 2
#define GROUP_MAX ((size_t)1 << 20)
#define GROUP_MIN ((size_t)1 << 16)
#define GROUP_BUDGET_S 0.05
#define GROUP_CHUNK(bytes) ((bytes) / 8)
#define GROUP_SMALL(bytes) ((bytes) / 16)
#define EFF_MIN 0.1
#define EFF_MAX 100.0
static const int group_algos[COLL_MODEL_ALGOS] = {COLL_ALGO_RING, COLL_ALGO_HD, COLL_ALGO_TREE};

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
  for (int i = 0; i < COLL_MODEL_ALGOS; i++) m->lat[i] = m->eff[i] = 1.0;
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

/* The group probe's size: GROUP_MAX, halved while the model gives the
 * ring more than GROUP_BUDGET_S for it. */
static size_t group_bytes(const coll_model *m, int n, double chunk) {
  size_t b = GROUP_MAX;
  while (b > GROUP_MIN && coll_model_time(m, COLL_ALGO_RING, n, (double)b, chunk) > GROUP_BUDGET_S)
    b /= 2;
  return b;
}

/* Every member: a warm-up round and GROUP_REPS rounds of one allreduce of
 * GROUP_SMALL(bytes) and one of `bytes` per algorithm, interleaved, in
 * pieces of GROUP_CHUNK(bytes) so that the tree pipelines as it does on
 * large buckets; best[k][i]: member 0's best time of group_algos[i] at
 * the small (k 0) and the large size (k 1). */
static fl_status group_probe(const coll_xport *xp, coll_sched *s, uint64_t *seq, uint8_t *buf,
                             size_t bytes, double best[2][COLL_MODEL_ALGOS]) {
  coll_xport xc = *xp, *x = &xc;
  xc.chunk = GROUP_CHUNK(bytes);
  for (int i = 0; i < 2 * COLL_MODEL_ALGOS; i++) best[i / COLL_MODEL_ALGOS][i % COLL_MODEL_ALGOS] = 1e30;
  for (int r = 0; r <= GROUP_REPS; r++)
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < COLL_MODEL_ALGOS; i++) {
        size_t len = k ? bytes : GROUP_SMALL(bytes);
        coll_op a = {COLL_OP_ALLREDUCE, group_algos[i], buf, len / sizeof(float), FL_COLL_F32, 0,
                     ++*seq};
        double t0 = now_s();
        FL_TRY(coll_sched_run(s, x, &a));
        double dt = now_s() - t0;
        if (r > 0 && dt < best[k][i]) best[k][i] = dt;
      }
  return FL_OK;
}

static double clampf(double v) {
  return !(v >= EFF_MIN) ? EFF_MIN : v > EFF_MAX ? EFF_MAX : v;
}

/* Member 0: each algorithm's factors from its two measured times (the
 * latency factor solved with the bandwidth one; when that latency factor
 * had to be clamped, the bandwidth factor that errs by the same relative
 * amount, in opposite directions, at both sizes: fitting the large size
 * alone made the tree, fastest at 64 KiB on 16 namespaces, look slow
 * there), then the table.  At the two measured sizes the measured fastest
 * algorithm stands, whatever the model says; above the large size the
 * table keeps the algorithm chosen there (factors measured on a few
 * pieces did not carry to buckets of many: the tree, cheap at 1 MiB, lost
 * to the ring at 16 MiB on the namespaces), save the tree: it moves no
 * fewer bytes than the ring and pays a step per piece, so there the faster
 * of ring and halving_doubling at the large size takes over (on 8 shaped
 * namespaces the tree took 1.3 to 3.9 times the ring's time at 64 MiB in
 * each of four runs, and auto carried a tree won at 1 MiB up to it). */
static void fit_factors(const coll_xport *x, coll_tuning *t, size_t bytes,
                        const double best[2][COLL_MODEL_ALGOS], double probe_s) {
  char desc[512];
  double chunk = (double)GROUP_CHUNK(bytes);
  int fast[2] = {0, 0}; /* the measured fastest at the small and the large size */
  for (int i = 0; i < COLL_MODEL_ALGOS; i++) {
    double ls, ws, lb, wb;
    coll_model_terms(&t->m, group_algos[i], x->n, (double)GROUP_SMALL(bytes), chunk, &ls, &ws);
    coll_model_terms(&t->m, group_algos[i], x->n, (double)bytes, chunk, &lb, &wb);
    double det = ls * wb - lb * ws;
    double l = det != 0 ? (best[0][i] * wb - best[1][i] * ws) / det : 1.0;
    t->m.lat[i] = clampf(l);
    if (wb > 0 && ws > 0 && l < EFF_MIN)
      t->m.eff[i] = clampf((2.0 - t->m.lat[i] * (ls / best[0][i] + lb / best[1][i])) /
                           (ws / best[0][i] + wb / best[1][i]));
    else
      t->m.eff[i] = wb > 0 ? clampf((best[1][i] - t->m.lat[i] * lb) / wb) : 1.0;
    if (best[0][i] < best[0][fast[0]]) fast[0] = i;
    if (best[1][i] < best[1][fast[1]]) fast[1] = i;
  }
  coll_model_table(&t->m, x->n, (double)x->chunk, t->table);
  t->table[coll_table_bin(GROUP_SMALL(bytes))] = (uint8_t)group_algos[fast[0]];
  t->table[coll_table_bin(bytes)] = (uint8_t)group_algos[fast[1]];
  int above = fast[1];
  if (group_algos[above] == COLL_ALGO_TREE) /* group_algos: ring, halving_doubling, tree */
    above = best[1][1] < best[1][0] ? 1 : 0;
  for (int b = coll_table_bin(bytes) + 1; b < COLL_TABLE_BINS; b++)
    t->table[b] = (uint8_t)group_algos[above];
  describe(t, desc, sizeof desc);
  FL_LOGI("collective: network probe (%.0f ms): alpha %.1f us, beta %.3f ns/B (%.2f GB/s), "
          "reduce %.3f ns/B; allreduce of %zu / %zu KiB on %d ranks: ring %.2f / %.2f ms, "
          "halving_doubling %.2f / %.2f ms, tree %.2f / %.2f ms (latency x%.2f, x%.2f, x%.2f, "
          "bandwidth x%.2f, x%.2f, x%.2f); allreduce algorithm by bucket size: %s",
          probe_s * 1e3, t->m.alpha * 1e6, t->m.beta * 1e9, 1e-9 / t->m.beta, t->m.gamma * 1e9,
          GROUP_SMALL(bytes) >> 10, bytes >> 10, x->n, best[0][0] * 1e3, best[1][0] * 1e3,
          best[0][1] * 1e3, best[1][1] * 1e3, best[0][2] * 1e3, best[1][2] * 1e3, t->m.lat[0],
          t->m.lat[1], t->m.lat[2], t->m.eff[0], t->m.eff[1], t->m.eff[2], desc);
}

/* Member 0: restored tuning (*group = 0), or the ping-pong's fit and the
 * size of the group probe to run (*group); says member 1 whether a
 * ping-pong follows. */
static fl_status decide(const coll_xport *x, coll_tuning *t, uint8_t *buf, size_t *group) {
  fl_coll *c = x->c;
  coll_tuning old;
  int reuse = c->tuning_in_len &&
              coll_tuning_decode(c->tuning_in, c->tuning_in_len, &old) == FL_OK && old.n == x->n;
  uint8_t flag = (uint8_t)!reuse;
  FL_TRY(xfer(x, 1, 1, &flag, 1));
  *group = 0;
  if (reuse) {
    char desc[512];
    *t = old;
    describe(t, desc, sizeof desc);
    FL_LOGI("collective: allreduce algorithms from the checkpoint (%d ranks, alpha %.1f us, "
            "beta %.3f ns/B, latency x%.2f, x%.2f, x%.2f, bandwidth x%.2f, x%.2f, x%.2f): %s",
            t->n, t->m.alpha * 1e6, t->m.beta * 1e9, t->m.lat[0], t->m.lat[1], t->m.lat[2],
            t->m.eff[0], t->m.eff[1], t->m.eff[2], desc);
    return FL_OK;
  }
  if (c->tuning_in_len)
    FL_LOGI("collective: the checkpoint's allreduce tuning is for another world size (or "
            "unreadable); probing the network again");
  double oneway[PROBE_SIZES];
  FL_TRY(ping_pong(x, buf, oneway));
  t->n = x->n;
  fit(oneway, &t->m);
  *group = group_bytes(&t->m, x->n, (double)x->chunk);
  return FL_OK;
}

/* Every member: the probe (members 0 and 1 ping-pong, then all run the
 * group probe whose size member 0 broadcasts, 0 for none), member 0
 * fitting the tuning. */
static fl_status probe(const coll_xport *x, coll_sched *s, uint64_t *seq, coll_tuning *t,
                       uint8_t *buf) {
  double t0 = now_s(), best[2][COLL_MODEL_ALGOS];
  size_t group = 0;
  if (x->me == 0) {
    FL_TRY(decide(x, t, buf, &group));
  } else if (x->me == 1) {
    uint8_t flag = 0;
    FL_TRY(xfer(x, 0, 0, &flag, 1));
    double unused[PROBE_SIZES];
    if (flag) FL_TRY(ping_pong(x, buf, unused));
  }
  uint8_t gb[4];
  coll_put_u32(gb, (uint32_t)group);
  coll_op a = {COLL_OP_BROADCAST, COLL_ALGO_RING, gb, sizeof gb, FL_COLL_F32, 0, ++*seq};
  FL_TRY(coll_sched_run(s, x, &a));
  group = coll_get_u32(gb);
  if (group > GROUP_MAX)
    return FL_ERR(FL_EPROTO, "collective: rank 0 asked for a %zu-byte network probe", group);
  if (group == 0) return FL_OK;
  FL_TRY(group_probe(x, s, seq, buf, group, best));
  if (x->me == 0) fit_factors(x, t, group, best, now_s() - t0);
  return FL_OK;
}

fl_status coll_tune(const coll_xport *x, coll_sched *s, uint64_t *seq, int *algo, coll_tuning *t) {
  memset(t, 0, sizeof(*t));
  *algo = x->c->algo_req == COLL_ALGO_HIER ? COLL_ALGO_AUTO : x->c->algo_req;
  if (*algo != COLL_ALGO_AUTO) {
    t->n = x->n;
    memset(t->table, *algo, COLL_TABLE_BINS);
    return FL_OK;
  }
  size_t cap = probe_sizes[PROBE_SIZES - 1] > GROUP_MAX ? probe_sizes[PROBE_SIZES - 1] : GROUP_MAX;
  uint8_t *buf = calloc(cap, 1);
  if (!buf) return FL_ERR(FL_ENOMEM, "collective: out of memory for the network probe");
  fl_status st = probe(x, s, seq, t, buf);
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
