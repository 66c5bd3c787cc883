/* tune.c - the choice of allreduce algorithm per bucket size: a short
 * probe of the job's own network between group members 0 and 1, an
 * alpha-beta-gamma fit, the per-size table, and its broadcast from rank 0
 * so that every rank runs the same algorithm on the same bucket.
 *
 * The probe is a ping-pong of PROBE_SIZES messages (the fastest of
 * PROBE_REPS round trips each, after one warm-up), alpha from the smallest
 * one-way time, beta from the slope to the largest, and the local cost of
 * adding a byte (gamma: fp32 reduce of 256 KiB).  Then the whole group
 * runs allreduces of each algorithm at two sizes (1 MiB, less where the
 * model says that takes over GROUP_BUDGET_S, and 1/16 of it; a warm-up
 * round, then the median of as many rounds as fit GROUP_ROUNDS_S, between
 * GROUP_REPS_MIN and GROUP_REPS_MAX, the algorithms taking turns in each
 * round so that a busy spell of a loaded machine falls on all of them
 * alike: the best of two rounds, before, gave a different table in each
 * of three jobs on 8 shaped namespaces; where member 0 finds the two
 * fastest medians of a size within GROUP_CLOSE, those two run as many
 * rounds again if that fits GROUP_TIE_S, and take the medians of all; the
 * pick between them is then the faster by the median of their paired
 * rounds' ratios, and where that lies within GROUP_EVEN of 1, a fixed
 * preference, so that noise cannot flip it from job to job); then the
 * ring and halving-doubling at HUGE_FACTOR times the large size, from
 * which every larger bucket's pick between the two is extrapolated (their
 * modelled latency taken off, their bandwidth terms scaled: above_pick;
 * the pick at 1 MiB, where latency still counts, ran halving-doubling at
 * 16 and 64 MiB on 16 shaped namespaces: 0.85 of the ring there, and so
 * did the pick at 4 MiB carried up unchanged, in 2 of 3 jobs, where the
 * ring took 0.87 of halving-doubling's time); and each algorithm's
 * latency and bandwidth terms get the factors (coll_model.lat, eff) that make the
 * model give what they really took: two algorithms that move the same
 * bytes need not move them equally fast (halving-doubling's few large
 * exchanges, one after the other, ran 1.6 times slower than the ring's
 * pipelined steps on 8 shaped namespaces, where the plain model called
 * them equal), and a step costs more than one link's alpha when every
 * rank sends at once.  The probe logs its cost and its number of rounds.
 * A tuning restored from a checkpoint for the same group size is used as
 * is, so a resumed run keeps its algorithms, hence its bits. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"

#define PROBE_REPS 5
static const size_t probe_sizes[] = {8, 4096, 65536, 262144, 1048576};
#define PROBE_SIZES (sizeof probe_sizes / sizeof probe_sizes[0])
#define GAMMA_FLOATS 65536
#define GROUP_REPS_MIN 5
#define GROUP_REPS_MAX 9
#define GROUP_CLOSE 1.15 /* two fastest medians this near: they run again */
#define GROUP_TIE_S 0.5   /* at most this long */
#define GROUP_EVEN 1.05   /* paired ratio this near 1: the fixed preference picks */
#define GROUP_REPS_ALL (2 * GROUP_REPS_MAX)
#define PLAN_ALL 0x77u /* every algorithm at both sizes (group_round) */
#define GROUP_ROUNDS_S 0.25
#define GROUP_MAX ((size_t)1 << 20)
#define GROUP_MIN ((size_t)1 << 16)
#define GROUP_BUDGET_S 0.05
#define HUGE_FACTOR 4 /* the third size: this many times the large one */
#define HUGE_REPS 3
#define GROUP_SMALL(bytes) ((bytes) / 16)
#define EFF_MIN 0.1
#define EFF_MAX 100.0
static const int group_algos[COLL_MODEL_ALGOS] = {COLL_ALGO_RING, COLL_ALGO_HD, COLL_ALGO_TREE};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The median of v[0..n) (0 < n <= GROUP_REPS_ALL); v is left as it was. */
static double median(const double *v, int n) {
  double s[GROUP_REPS_ALL];
  for (int i = 0; i < n; i++) {
    int j = i;
    for (; j > 0 && s[j - 1] > v[i]; j--) s[j] = s[j - 1];
    s[j] = v[i];
  }
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
}

/* The least of v[0..n) (n > 0): a busy machine only adds to a round
 * trip, so the fastest of a few is the link's own (on loaded shaped
 * namespaces the median gave alpha 0.23 to 0.5 ms in most jobs and 1.3 ms
 * in one, whose model then sent 64 KiB buckets by recursive doubling: 4
 * times a named halving_doubling's time in that busy run). */
static double fastest(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    if (v[i] < m) m = v[i];
  return m;
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
    coll_want w = {peer, 0, !send, send, send ? 0 : len};
    FL_TRY(x->wait(x->st, &w, 1, &idle, "network probe"));
  }
  return FL_OK;
}

/* Member 0 pings, member 1 pongs; member 0 gets the one-way times. */
static fl_status ping_pong(const coll_xport *x, uint8_t *buf, double *oneway) {
  int peer = x->me == 0 ? 1 : 0;
  for (size_t i = 0; i < PROBE_SIZES; i++) {
    double dt[PROBE_REPS + 1];
    for (int r = 0; r <= PROBE_REPS; r++) {
      double t0 = now_s();
      if (x->me == 0) {
        FL_TRY(xfer(x, peer, 1, buf, probe_sizes[i]));
        FL_TRY(xfer(x, peer, 0, buf, probe_sizes[i]));
      } else {
        FL_TRY(xfer(x, peer, 0, buf, probe_sizes[i]));
        FL_TRY(xfer(x, peer, 1, buf, probe_sizes[i]));
      }
      dt[r] = (now_s() - t0) / 2.0;
    }
    oneway[i] = fastest(dt + 1, PROBE_REPS);
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

/* Bin b's algorithm, halving_doubling's variant told apart (one string
 * per label, so that equal labels are equal pointers). */
static const char *bin_label(const coll_tuning *t, int b) {
  int a = t->table[b];
  return coll_algo_doubling(&t->m, a, t->n, (size_t)1 << b) ? "halving_doubling by doubling"
                                                             : coll_algo_names[a];
}

/* "<=4 KiB halving_doubling by doubling, <=64 KiB tree, <=1 MiB
 * halving_doubling, above ring" */
static void describe(const coll_tuning *t, char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (int b = 0; b < COLL_TABLE_BINS && o < cap; b++) {
    const char *name = bin_label(t, b);
    if (b + 1 < COLL_TABLE_BINS && bin_label(t, b + 1) == name) continue;
    if (b + 1 == COLL_TABLE_BINS)
      o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "above " : "all ", name);
    else if (b >= 20)
      o += (size_t)snprintf(out + o, cap - o, "<=%d MiB %s, ", 1 << (b - 20), name);
    else if (b >= 10)
      o += (size_t)snprintf(out + o, cap - o, "<=%d KiB %s, ", 1 << (b - 10), name);
    else
      o += (size_t)snprintf(out + o, cap - o, "<=%d B %s, ", 1 << b, name);
  }
}

/* The group probe's size: GROUP_MAX, halved while the model gives the
 * ring more than GROUP_BUDGET_S for it. */
static size_t group_bytes(const coll_model *m, int n) {
  size_t b = GROUP_MAX;
  while (b > GROUP_MIN && coll_model_predict(m, COLL_ALGO_RING, n, b) > GROUP_BUDGET_S)
    b /= 2;
  return b;
}

/* One round of the group probe: at the small, then the large size k, the
 * algorithms i whose bit i is set in plan's nibble k (PLAN_ALL: all);
 * t[k][i][r]: algorithm i's time at size k; *total: the round's time. */
static fl_status group_round(const coll_probe_clock *c, size_t bytes, int r, uint32_t plan,
                             double t[2][COLL_MODEL_ALGOS][GROUP_REPS_ALL], double *total) {
  *total = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < COLL_MODEL_ALGOS; i++) {
      if (!(plan >> (4 * k + i) & 1)) continue;
      double dt = 0;
      FL_TRY(c->run(c->arg, group_algos[i], k ? bytes : GROUP_SMALL(bytes), &dt));
      t[k][i][r] = dt;
      *total += dt;
    }
  return FL_OK;
}

/* Whether the two fastest medians of med (one size) lie within
 * GROUP_CLOSE of each other; *a the fastest, *b the second. */
static int close_pair(const double med[COLL_MODEL_ALGOS], int *a, int *b) {
  *a = 0;
  *b = -1;
  for (int i = 1; i < COLL_MODEL_ALGOS; i++) {
    if (med[i] < med[*a]) {
      *b = *a;
      *a = i;
    } else if (*b < 0 || med[i] < med[*b]) {
      *b = i;
    }
  }
  return med[*b] <= med[*a] * GROUP_CLOSE;
}

/* Member 0: the plan of the rounds to run again: at each size whose two
 * fastest medians of med lie within GROUP_CLOSE of each other, those two,
 * if n more rounds of them take no more than GROUP_TIE_S. */
static uint32_t tie_plan(const double med[2][COLL_MODEL_ALGOS], uint32_t n) {
  uint32_t plan = 0;
  for (int k = 0; k < 2; k++) {
    int a, b;
    if (close_pair(med[k], &a, &b) && (med[k][a] + med[k][b]) * n <= GROUP_TIE_S)
      plan |= (1u << a | 1u << b) << (4 * k);
  }
  return plan;
}

/* The two algorithms member 0 found close at a size run n rounds more
 * (in turns, as before), their medians taken over the 2 n rounds: a pick
 * between two algorithms within the noise of one set of rounds flipped
 * from job to job (64 KiB on 16 shaped namespaces, halving_doubling and
 * the tree). */
static fl_status tie_break(const coll_probe_clock *c, size_t bytes, uint32_t n,
                           double t[2][COLL_MODEL_ALGOS][GROUP_REPS_ALL],
                           double med[2][COLL_MODEL_ALGOS], uint32_t *plan) {
  *plan = tie_plan(med, n);
  FL_TRY(c->share(c->arg, plan));
  if (*plan & ~(uint32_t)PLAN_ALL)
    return FL_ERR(FL_EPROTO, "collective: member 0 sent network probe plan %#x", *plan);
  double unused;
  for (uint32_t r = n; r < 2 * n && *plan; r++)
    FL_TRY(group_round(c, bytes, (int)r, *plan, t, &unused));
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < COLL_MODEL_ALGOS; i++)
      if (*plan >> (4 * k + i) & 1) med[k][i] = median(t[k][i], 2 * (int)n);
  return FL_OK;
}

/* The order in which close algorithms are preferred (index: ring,
 * halving-doubling, tree; lower first): fewer latency steps first
 * (halving-doubling's 2 log2 n, the tree's 2 (log2 n + pieces - 1), the
 * ring's 2 (n - 1)); at the large size too (larger buckets have their
 * own pick, huge_pick). */
static const int prefer[COLL_MODEL_ALGOS] = {2, 0, 1};

/* The pick at size k: the fastest median, save where the two fastest
 * medians are close: then the paired rounds decide (in each of the `runs`
 * rounds both ran in turn, so that a busy spell slows both; the median of
 * their ratios), and where that ratio is within GROUP_EVEN of 1, the fixed
 * preference: two medians within the noise of the rounds ranked the two
 * differently from job to job, and auto ran the slower (0.8 of the best at
 * 64 KiB and 1 MiB on 16 shaped namespaces). */
static void pick_size(const double t[2][COLL_MODEL_ALGOS][GROUP_REPS_ALL],
                      const double med[2][COLL_MODEL_ALGOS], int k, uint32_t plan, int n,
                      coll_probe_pick *p) {
  int a, b;
  p->close[k][0] = p->close[k][1] = -1;
  p->paired[k] = 0;
  p->by_rule[k] = 0;
  int close = close_pair(med[k], &a, &b);
  p->fast[k] = a;
  if (!close) return;
  int runs = (plan >> (4 * k + a) & 1) && (plan >> (4 * k + b) & 1) ? 2 * n : n;
  double q[GROUP_REPS_ALL];
  for (int r = 0; r < runs; r++) q[r] = t[k][b][r] > 0 ? t[k][a][r] / t[k][b][r] : 1.0;
  double ratio = median(q, runs);
  p->close[k][0] = a;
  p->close[k][1] = b;
  p->paired[k] = ratio;
  if (ratio > GROUP_EVEN) p->fast[k] = b;
  if (ratio * GROUP_EVEN >= 1.0 && ratio <= GROUP_EVEN) {
    p->by_rule[k] = 1;
    p->fast[k] = prefer[a] < prefer[b] ? a : b;
  }
}

/* The times above the large size: HUGE_REPS rounds of the ring and
 * halving-doubling at HUGE_FACTOR times it, the two taking turns (the
 * first in one round last in the next); their medians, and the median of
 * the ring's time over halving-doubling's in the same round, from which
 * coll_tune_fit picks (above_pick).  With the same bytes on the wire the
 * ring's pipelined steps were as fast or faster at 4 to 64 MiB on 8 and
 * 16 shaped namespaces (1.05 to 1.3 times halving-doubling's bus
 * bandwidth), and the order at the large size, where latency still
 * counts, did not carry over.  Every member runs the same rounds; member
 * 0's times decide. */
static fl_status huge_pick(const coll_probe_clock *c, size_t bytes, coll_probe_pick *p) {
  double t[2][GROUP_REPS_ALL], q[GROUP_REPS_ALL];
  for (int r = 0; r < HUGE_REPS; r++) {
    for (int j = 0; j < 2; j++) {
      int i = (r + j) % 2; /* group_algos: ring, halving-doubling */
      FL_TRY(c->run(c->arg, group_algos[i], HUGE_FACTOR * bytes, &t[i][r]));
    }
    q[r] = t[1][r] > 0 ? t[0][r] / t[1][r] : 1.0;
  }
  for (int i = 0; i < 2; i++) p->huge[i] = median(t[i], HUGE_REPS);
  p->huge_paired = median(q, HUGE_REPS);
  return FL_OK;
}

/* Member 0 sizes the rounds from the warm-up round's time; all learn it. */
fl_status coll_group_probe(const coll_probe_clock *c, size_t bytes,
                           double med[2][COLL_MODEL_ALGOS], int *rounds, coll_probe_pick *pick) {
  double t[2][COLL_MODEL_ALGOS][GROUP_REPS_ALL], warm = 0;
  FL_TRY(group_round(c, bytes, 0, PLAN_ALL, t, &warm));
  double fit = warm > 0 ? GROUP_ROUNDS_S / warm : GROUP_REPS_MAX;
  uint32_t n = fit >= GROUP_REPS_MAX   ? GROUP_REPS_MAX
               : fit <= GROUP_REPS_MIN ? GROUP_REPS_MIN
                                       : (uint32_t)fit;
  FL_TRY(c->share(c->arg, &n));
  if (n < GROUP_REPS_MIN || n > GROUP_REPS_MAX)
    return FL_ERR(FL_EPROTO, "collective: member 0 asked for %u network probe rounds (%d..%d)",
                  n, GROUP_REPS_MIN, GROUP_REPS_MAX);
  for (uint32_t r = 0; r < n; r++) FL_TRY(group_round(c, bytes, (int)r, PLAN_ALL, t, &warm));
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < COLL_MODEL_ALGOS; i++) med[k][i] = median(t[k][i], (int)n);
  *rounds = (int)n;
  uint32_t plan = 0;
  FL_TRY(tie_break(c, bytes, n, t, med, &plan));
  for (int k = 0; k < 2; k++) pick_size(t, med, k, plan, (int)n, pick);
  return huge_pick(c, bytes, pick);
}

/* The group probe's clock on the real network: allreduces of buf in the
 * pieces a bucket of that size runs in (coll_algo_seg of member 0's
 * alpha, beta and gamma, which every member learns first), so that the
 * times measured are those of the buckets. */
typedef struct net_clock {
  coll_xport x;
  coll_sched *s;
  uint64_t *seq;
  uint8_t *buf;
  coll_model m;
} net_clock;

static fl_status net_run(void *arg, int algo, size_t len, double *secs) {
  net_clock *nc = arg;
  coll_op a = {COLL_OP_ALLREDUCE, algo, nc->buf, len / sizeof(float), FL_COLL_F32, 0, ++*nc->seq,
               coll_algo_seg(&nc->m, algo, nc->x.n, len),
               coll_algo_doubling(&nc->m, algo, nc->x.n, len)};
  double t0 = now_s();
  FL_TRY(coll_sched_run(nc->s, &nc->x, &a));
  *secs = now_s() - t0;
  return FL_OK;
}

static fl_status net_share(void *arg, uint32_t *v) {
  net_clock *nc = arg;
  uint8_t b[4];
  coll_put_u32(b, *v);
  coll_op a = {COLL_OP_BROADCAST, COLL_ALGO_RING, b, sizeof b, FL_COLL_F32, 0, ++*nc->seq, 0, 0};
  FL_TRY(coll_sched_run(nc->s, &nc->x, &a));
  *v = coll_get_u32(b);
  return FL_OK;
}

static double clampf(double v) {
  return !(v >= EFF_MIN) ? EFF_MIN : v > EFF_MAX ? EFF_MAX : v;
}

/* Member 0: the algorithm (index: 0 the ring, 1 halving-doubling) for a
 * bucket of `bytes` above the large size, from their times at `huge`
 * (p->huge: halving-doubling's median, the ring's that times the paired
 * ratio): each time less the algorithm's modelled latency (m's factors,
 * fitted at the two smaller sizes) is its bandwidth term there, scaled to
 * `bytes`, the latency added back; halving-doubling where the ring's
 * comes out over GROUP_EVEN times its own.  At `huge` itself that is the
 * paired ratio's verdict; above, the ring's 2 (n - 1) steps weigh less
 * and less: at 4 MiB on 16 shaped namespaces they made halving-doubling
 * 6 to 13% faster, and a pick made there ran halving-doubling at 64 MiB,
 * where the ring took 0.87 of its time. */
static int above_pick(const coll_model *m, int n, size_t huge, const coll_probe_pick *p,
                      size_t bytes) {
  double measured[2] = {p->huge_paired * p->huge[1], p->huge[1]}, pred[2];
  for (int i = 0; i < 2; i++) {
    double lh, wh, lb, wb;
    coll_model_terms(m, group_algos[i], n, (double)huge, 0, &lh, &wh);
    coll_model_terms(m, group_algos[i], n, (double)bytes, 0, &lb, &wb);
    double eff = wh > 0 ? clampf((measured[i] - m->lat[i] * lh) / wh) : 1.0;
    pred[i] = m->lat[i] * lb + eff * wb;
  }
  return pred[0] > GROUP_EVEN * pred[1] ? 1 : 0;
}

/* Member 0: each algorithm's factors from its two measured times (the
 * latency factor solved with the bandwidth one; when that latency factor
 * had to be clamped, the bandwidth factor that errs by the same relative
 * amount, in opposite directions, at both sizes: fitting the large size
 * alone made the tree, fastest at 64 KiB on 16 namespaces, look slow
 * there), then the table.  At the two measured sizes the probe's pick
 * stands (fast: the fastest, or of two close ones the faster in paired
 * rounds, or the preferred), whatever the model says; above the large
 * size, the ring or halving_doubling by above_pick (factors measured on a
 * few pieces did not carry to buckets of many, and the tree, which moves
 * no fewer bytes than the ring and pays a step per piece, took 1.3 to 3.9
 * times the ring's time at 64 MiB on 8 shaped namespaces). */
void coll_tune_fit(coll_tuning *t, int n, size_t bytes, const double best[2][COLL_MODEL_ALGOS],
                   const coll_probe_pick *p) {
  for (int i = 0; i < COLL_MODEL_ALGOS; i++) {
    double ls, ws, lb, wb;
    size_t small = GROUP_SMALL(bytes);
    coll_model_terms(&t->m, group_algos[i], n, (double)small,
                     (double)coll_algo_seg(&t->m, group_algos[i], n, small), &ls, &ws);
    coll_model_terms(&t->m, group_algos[i], n, (double)bytes,
                     (double)coll_algo_seg(&t->m, group_algos[i], n, bytes), &lb, &wb);
    double det = ls * wb - lb * ws;
    double l = det != 0 ? (best[0][i] * wb - best[1][i] * ws) / det : 1.0;
    t->m.lat[i] = clampf(l);
    if (wb > 0 && ws > 0 && l < EFF_MIN)
      t->m.eff[i] = clampf((2.0 - t->m.lat[i] * (ls / best[0][i] + lb / best[1][i])) /
                           (ws / best[0][i] + wb / best[1][i]));
    else
      t->m.eff[i] = wb > 0 ? clampf((best[1][i] - t->m.lat[i] * lb) / wb) : 1.0;
  }
  coll_model_table(&t->m, n, t->table);
  t->table[coll_table_bin(GROUP_SMALL(bytes))] = (uint8_t)group_algos[p->fast[0]];
  t->table[coll_table_bin(bytes)] = (uint8_t)group_algos[p->fast[1]];
  for (int b = coll_table_bin(bytes) + 1; b < COLL_TABLE_BINS; b++) {
    int i = above_pick(&t->m, n, HUGE_FACTOR * bytes, p, (size_t)1 << b);
    t->table[b] = (uint8_t)group_algos[i];
  }
}

/* " (close at 64 KiB: tree / halving_doubling paired x0.97, picked
 * halving_doubling by preference)" for each close size of p, else "". */
static void describe_close(const coll_probe_pick *p, size_t bytes, char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (int k = 0; k < 2 && o < cap; k++) {
    if (p->close[k][0] < 0) continue;
    size_t kib = (k ? bytes : GROUP_SMALL(bytes)) >> 10;
    o += (size_t)snprintf(out + o, cap - o, "%s at %zu KiB: %s / %s paired x%.3f, picked %s%s",
                          o ? ";" : " (close", kib, coll_algo_names[group_algos[p->close[k][0]]],
                          coll_algo_names[group_algos[p->close[k][1]]], p->paired[k],
                          coll_algo_names[group_algos[p->fast[k]]],
                          p->by_rule[k] ? " by preference" : "");
  }
  if (o && o < cap) snprintf(out + o, cap - o, ")");
}

/* Member 0: the probe's outcome, once. */
static void log_tuning(const coll_xport *x, const coll_tuning *t, size_t bytes,
                       const double best[2][COLL_MODEL_ALGOS], int rounds,
                       const coll_probe_pick *pick, double probe_s) {
  char desc[512], close[256];
  describe(t, desc, sizeof desc);
  describe_close(pick, bytes, close, sizeof close);
  size_t small = GROUP_SMALL(bytes);
  FL_LOGI("collective: network probe (%.0f ms, medians of %d rounds): alpha %.1f us, "
          "beta %.3f ns/B (%.2f GB/s), reduce %.3f ns/B; allreduce of %zu / %zu KiB on %d "
          "ranks: ring %.2f / %.2f ms, halving_doubling %.2f / %.2f ms, tree %.2f / %.2f ms "
          "in %zu / %zu KiB pieces (latency x%.2f, x%.2f, x%.2f, bandwidth x%.2f, x%.2f, "
          "x%.2f)%s; at %zu KiB ring %.2f ms, halving_doubling %.2f ms (paired x%.3f); "
          "allreduce algorithm by bucket size: %s",
          probe_s * 1e3, rounds, t->m.alpha * 1e6, t->m.beta * 1e9, 1e-9 / t->m.beta,
          t->m.gamma * 1e9, small >> 10, bytes >> 10, x->n, best[0][0] * 1e3, best[1][0] * 1e3,
          best[0][1] * 1e3, best[1][1] * 1e3, best[0][2] * 1e3, best[1][2] * 1e3,
          coll_algo_seg(&t->m, COLL_ALGO_TREE, x->n, small) >> 10,
          coll_algo_seg(&t->m, COLL_ALGO_TREE, x->n, bytes) >> 10, t->m.lat[0], t->m.lat[1],
          t->m.lat[2], t->m.eff[0], t->m.eff[1], t->m.eff[2], close, HUGE_FACTOR * bytes >> 10,
          pick->huge[0] * 1e3, pick->huge[1] * 1e3, pick->huge_paired, desc);
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
  *group = group_bytes(&t->m, x->n);
  return FL_OK;
}

/* Every member: member 0's group probe size (0: none) in *group and the
 * alpha, beta and gamma that fix the tree's pieces in *m. */
static fl_status share_plan(const coll_xport *x, coll_sched *s, uint64_t *seq, size_t *group,
                            coll_model *m) {
  uint8_t b[28];
  coll_put_u32(b, (uint32_t)*group);
  coll_put_f64(b + 4, m->alpha);
  coll_put_f64(b + 12, m->beta);
  coll_put_f64(b + 20, m->gamma);
  coll_op a = {COLL_OP_BROADCAST, COLL_ALGO_RING, b, sizeof b, FL_COLL_F32, 0, ++*seq, 0, 0};
  FL_TRY(coll_sched_run(s, x, &a));
  *group = coll_get_u32(b);
  *m = (coll_model){coll_get_f64(b + 4), coll_get_f64(b + 12), coll_get_f64(b + 20), {1, 1, 1},
                    {1, 1, 1}};
  if (*group > GROUP_MAX)
    return FL_ERR(FL_EPROTO, "collective: rank 0 asked for a %zu-byte network probe", *group);
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
  net_clock nc = {*x, s, seq, buf, t->m};
  FL_TRY(share_plan(x, s, seq, &group, &nc.m));
  if (group == 0) return FL_OK;
  coll_probe_clock clock = {net_run, net_share, &nc};
  int rounds = 0;
  coll_probe_pick pick;
  FL_TRY(coll_group_probe(&clock, group, best, &rounds, &pick));
  if (x->me == 0) {
    coll_tune_fit(t, x->n, group, best, &pick);
    log_tuning(x, t, group, best, rounds, &pick, now_s() - t0);
  }
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
  size_t cap = probe_sizes[PROBE_SIZES - 1] > HUGE_FACTOR * GROUP_MAX ? probe_sizes[PROBE_SIZES - 1]
                                                                     : HUGE_FACTOR * GROUP_MAX;
  uint8_t *buf = calloc(cap, 1);
  if (!buf) return FL_ERR(FL_ENOMEM, "collective: out of memory for the network probe");
  fl_status st = probe(x, s, seq, t, buf);
  free(buf);
  FL_TRY(st);
  uint8_t blob[COLL_TUNING_BYTES];
  if (x->me == 0) coll_tuning_encode(t, blob);
  coll_op a = {COLL_OP_BROADCAST, COLL_ALGO_RING, blob, sizeof blob, FL_COLL_F32, 0, ++*seq, 0, 0};
  FL_TRY(coll_sched_run(s, x, &a));
  if (coll_tuning_decode(blob, sizeof blob, t) != FL_OK)
    return FL_ERR(FL_EPROTO, "collective: rank 0 sent an unreadable allreduce tuning");
  return FL_OK;
}
