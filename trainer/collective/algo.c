/* algo.c - the collective algorithms, written once over a point-to-point
 * transport (coll_xport: tcp.c, shm.c), and the executor that runs them.
 *
 * An algorithm does not move bytes itself: it builds a schedule, a list of
 * sends and receives per link (a peer and a channel), each optionally
 * waiting for another operation of the schedule (a send that forwards what
 * a receive brought, a reduction that must come after another one so that
 * the order of the sum is fixed).  Both ends of a link enumerate their
 * operations in the same order (the algorithm's loops are the same on
 * every rank), so a link carries one byte stream per direction with no
 * framing beyond a header per op and direction (as the ring always sent
 * it: to where data goes, and to a broadcast's root from its predecessor)
 * that catches ranks running different collectives.  The executor (coll_sched_run) pumps every link without
 * blocking and lets the transport wait when nothing moves.
 *
 * Reduction orders (fixed per algorithm, world size and element count;
 * "a + b" is one coll_reduce_into with a the received operand):
 *   ring: segment j is summed x_j, then x_{j+1} + that, ... around the ring;
 *   halving_doubling: the first 2*rem ranks (rem = n - 2^k) fold pairwise,
 *     odd + even partner; then recursive halving: at each step the received
 *     half is added to the kept half, partners from distance 2^(k-1) down
 *     to 1 (in the folded numbering); the ranks' final blocks are copied;
 *     or (small buckets, coll_algo_doubling) recursive doubling: the same
 *     fold, then k exchanges of the whole part with the same partners in
 *     the same order, each pair adding "lower + upper" (the partial of the
 *     partner whose folded index has the step's bit clear first), so both
 *     compute the same bits; the sum tree is halving's, and IEEE addition
 *     commutes, so both variants give the same bits (NaN payloads aside);
 *   tree: two complementary binary trees (heap layout over the ranks, the
 *     second mirrored), each summing half of the data: a node adds its left
 *     child's subtree sum to its own data, then its right child's to that;
 *     the root's bytes are broadcast down the same tree.
 * Every rank ends with the bytes the final adder produced, so results agree
 * on all ranks and across runs.  Each part of a buffer split over nch
 * channels runs the algorithm independently on its own channel. */
#include <config.h>

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"
#include "fl_names.h"

#define OPHDR 32
#define OP_MAGIC 0x4448504fu /* "OPHD" */

typedef struct sop {
  uint8_t *ptr;
  size_t len;
  int link;
  int dep; /* op index that must be done first, or -1 */
  uint8_t send, reduce, done; /* reduce: RED_RECV_FIRST or RED_MINE_FIRST */
} sop;

enum { RED_RECV_FIRST = 1, RED_MINE_FIRST = 2 }; /* received + mine, mine + received */

typedef struct slink {
  int peer, ch;
  int *sq, *rq; /* op indices in stream order */
  size_t ns, nr, cap_s, cap_r;
  size_t si, ri, soff, roff;
  size_t hs, hr; /* header bytes sent, received */
  int hdr_tx, hdr_rx; /* the op's header goes out, comes in on this link */
  uint8_t hdr_in[OPHDR];
  uint8_t *scratch;
  size_t cap_scratch, need_scratch;
} slink;

struct coll_sched {
  sop *ops;
  size_t nops, cap_ops;
  slink *links;
  int nlinks, cap_links;
  int *link_of; /* n * nch entries, -1 = unused this op */
  int n, nch;
  coll_want *want;
  int oom;
  /* the op */
  int kind, algo, doubling;
  size_t unit, chunk;
  fl_coll_dtype dt;
  uint8_t hdr_out[OPHDR];
};

const char *const coll_algo_names[COLL_ALGO_N + 1] = {"auto", "ring", "halving_doubling", "tree",
                                                      "hierarchical", NULL};

int coll_algo_find(const char *name) { return fl_names_find(coll_algo_names, name); }

static const char *kind_name(int kind) {
  return kind == COLL_OP_ALLREDUCE ? "allreduce"
         : kind == COLL_OP_BROADCAST ? "broadcast"
         : kind == COLL_OP_ALLGATHER ? "allgather"
                                     : "garbage";
}

/* ------------------------------------------------------------ building */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * elem);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

static int link_for(coll_sched *s, int peer, int ch) {
  int *slot = &s->link_of[peer * s->nch + ch];
  if (*slot >= 0) return *slot;
  if (s->nlinks == s->cap_links) {
    size_t cap = (size_t)s->cap_links;
    if (grow((void **)&s->links, &cap, cap + 1, sizeof(slink))) return -1;
    memset(s->links + s->cap_links, 0, (cap - (size_t)s->cap_links) * sizeof(slink));
    s->cap_links = (int)cap;
  }
  slink *l = &s->links[s->nlinks];
  l->peer = peer;
  l->ch = ch;
  l->ns = l->nr = l->si = l->ri = l->soff = l->roff = l->hs = l->hr = 0;
  l->need_scratch = 0;
  l->hdr_tx = l->hdr_rx = 0;
  *slot = s->nlinks;
  return s->nlinks++;
}

/* Append one op (one piece of at most `chunk` bytes); its index, or -1. */
static int add_op(coll_sched *s, int send, int peer, int ch, uint8_t *ptr, size_t len, int reduce,
                  int dep) {
  int li = link_for(s, peer, ch);
  if (li < 0 || grow((void **)&s->ops, &s->cap_ops, s->nops + 1, sizeof(sop))) {
    s->oom = 1;
    return -1;
  }
  slink *l = &s->links[li];
  int idx = (int)s->nops;
  int e = send ? grow((void **)&l->sq, &l->cap_s, l->ns + 1, sizeof(int))
               : grow((void **)&l->rq, &l->cap_r, l->nr + 1, sizeof(int));
  if (e) {
    s->oom = 1;
    return -1;
  }
  if (send)
    l->sq[l->ns++] = idx;
  else
    l->rq[l->nr++] = idx;
  if (send)
    l->hdr_tx = 1;
  else
    l->hdr_rx = 1;
  if (reduce && len > l->need_scratch) l->need_scratch = len;
  s->ops[s->nops++] = (sop){ptr, len, li, dep, (uint8_t)send, (uint8_t)reduce, 0};
  return idx;
}

/* Cut [ptr, ptr+len) into chunk-sized ops, each after dep; the index of
 * the last, or dep when len is 0 (so that chains of steps skip empty
 * ones). */
static int add_run(coll_sched *s, int send, int peer, int ch, uint8_t *ptr, size_t len, int reduce,
                   int dep) {
  int last = dep;
  for (size_t o = 0; o < len; o += s->chunk) {
    size_t m = len - o < s->chunk ? len - o : s->chunk;
    last = add_op(s, send, peer, ch, ptr + o, m, reduce, dep);
  }
  return last;
}

static int mod(int a, int n) {
  return ((a % n) + n) % n;
}

/* Byte range of segments [lo, hi) of a part of `count` units cut in k. */
static void seg_range(size_t count, int k, int lo, int hi, size_t unit, size_t *off, size_t *len) {
  size_t o1, l1, o2, l2;
  coll_segment(count, k, lo, &o1, &l1);
  coll_segment(count, k, hi - 1, &o2, &l2);
  *off = o1 * unit;
  *len = (o2 + l2 - o1) * unit;
}

/* Ring allreduce over one part (as the ring always ran: reduce-scatter
 * then allgather, every received piece forwarded once it is added). */
static void ring_allreduce(coll_sched *s, int me, int n, int ch, uint8_t *base, size_t count) {
  size_t u = s->unit, off, len;
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  coll_segment(count, n, me, &off, &len);
  add_run(s, 1, next, ch, base + off * u, len * u, 0, -1);
  for (int st = 0; st <= n - 2; st++) {
    coll_segment(count, n, mod(me - st - 1, n), &off, &len);
    for (size_t o = 0; o < len * u; o += s->chunk) {
      size_t m = len * u - o < s->chunk ? len * u - o : s->chunk;
      int r = add_op(s, 0, prev, ch, base + off * u + o, m, RED_RECV_FIRST, -1);
      add_op(s, 1, next, ch, base + off * u + o, m, 0, r);
    }
  }
  for (int st = 0; st <= n - 2; st++) {
    coll_segment(count, n, mod(me - st, n), &off, &len);
    for (size_t o = 0; o < len * u; o += s->chunk) {
      size_t m = len * u - o < s->chunk ? len * u - o : s->chunk;
      int r = add_op(s, 0, prev, ch, base + off * u + o, m, 0, -1);
      if (st < n - 2) add_op(s, 1, next, ch, base + off * u + o, m, 0, r);
    }
  }
}

/* Ring allgather of blocks of `bsz` bytes (this part: [pb, pb+pl) of each). */
static void ring_allgather(coll_sched *s, int me, int n, int ch, uint8_t *buf, size_t bsz,
                           size_t pb, size_t pl) {
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  add_run(s, 1, next, ch, buf + (size_t)me * bsz + pb, pl, 0, -1);
  for (int st = 0; st <= n - 2; st++) {
    uint8_t *p = buf + (size_t)mod(me - st - 1, n) * bsz + pb;
    for (size_t o = 0; o < pl; o += s->chunk) {
      size_t m = pl - o < s->chunk ? pl - o : s->chunk;
      int r = add_op(s, 0, prev, ch, p + o, m, 0, -1);
      if (st < n - 2) add_op(s, 1, next, ch, p + o, m, 0, r);
    }
  }
}

/* Ring broadcast from `root`, pipelined in chunks. */
static void ring_broadcast(coll_sched *s, int me, int n, int ch, uint8_t *p, size_t len, int root) {
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  /* The root receives nothing but still checks its predecessor's header. */
  int li = me == root ? link_for(s, prev, ch) : next == root ? link_for(s, next, ch) : 0;
  if (li < 0) {
    s->oom = 1;
    return;
  }
  if (me == root) s->links[li].hdr_rx = 1;
  if (next == root) s->links[li].hdr_tx = 1;
  if (me == root) {
    add_run(s, 1, next, ch, p, len, 0, -1);
    return;
  }
  for (size_t o = 0; o < len; o += s->chunk) {
    size_t m = len - o < s->chunk ? len - o : s->chunk;
    int r = add_op(s, 0, prev, ch, p + o, m, 0, -1);
    if (next != root) add_op(s, 1, next, ch, p + o, m, 0, r);
  }
}

static int pow2_floor(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/* Group index of folded rank nr (halving-doubling with rem extra ranks). */
static int hd_rank(int nr, int rem) {
  return nr < rem ? 2 * nr + 1 : nr + rem;
}

/* Recursive halving (reduce-scatter) then doubling (allgather) among the
 * folded ranks; the index of the last op (for the unfold). */
static int hd_core(coll_sched *s, int nr, int p2, int rem, int ch, uint8_t *base, size_t count,
                   int dep) {
  size_t u = s->unit, so, sl, ro, rl;
  int lo = 0, hi = p2, last = dep;
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    int peer = hd_rank(nr ^ mask, rem), mid = (lo + hi) / 2;
    int klo = (nr & mask) ? mid : lo, khi = (nr & mask) ? hi : mid;
    seg_range(count, p2, (nr & mask) ? lo : mid, (nr & mask) ? mid : hi, u, &so, &sl);
    seg_range(count, p2, klo, khi, u, &ro, &rl);
    add_run(s, 1, peer, ch, base + so, sl, 0, last);
    last = add_run(s, 0, peer, ch, base + ro, rl, RED_RECV_FIRST, last);
    lo = klo;
    hi = khi;
  }
  for (int mask = 1; mask < p2; mask *= 2) {
    int peer = hd_rank(nr ^ mask, rem), plo = lo ^ mask;
    seg_range(count, p2, lo, hi, u, &so, &sl);
    seg_range(count, p2, plo, plo + mask, u, &ro, &rl);
    add_run(s, 1, peer, ch, base + so, sl, 0, last);
    last = add_run(s, 0, peer, ch, base + ro, rl, 0, last);
    if (plo < lo) lo = plo;
    hi = lo + 2 * mask;
  }
  return last;
}

/* Recursive doubling among the folded ranks, piece by piece (a piece
 * goes to the next partner once it holds the last exchange's sum; it is
 * added after it went out, as the sum overwrites it); the index of the
 * last op. */
static int rd_core(coll_sched *s, int nr, int p2, int rem, int ch, uint8_t *base, size_t count,
                   int dep) {
  size_t bytes = count * s->unit;
  int last = dep;
  for (size_t o = 0; o < bytes; o += s->chunk) {
    size_t m = bytes - o < s->chunk ? bytes - o : s->chunk;
    last = dep;
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
      int peer = hd_rank(nr ^ mask, rem);
      int sent = add_op(s, 1, peer, ch, base + o, m, 0, last);
      last = add_op(s, 0, peer, ch, base + o, m, nr & mask ? RED_RECV_FIRST : RED_MINE_FIRST, sent);
    }
  }
  return last;
}

static void hd_allreduce(coll_sched *s, int me, int n, int ch, uint8_t *base, size_t count) {
  int p2 = pow2_floor(n), rem = n - p2;
  size_t bytes = count * s->unit;
  if (me < 2 * rem && me % 2 == 0) { /* folds into me+1, gets the result back */
    add_run(s, 1, me + 1, ch, base, bytes, 0, -1);
    add_run(s, 0, me + 1, ch, base, bytes, 0, -1);
    return;
  }
  int dep = -1, nr = me < 2 * rem ? me / 2 : me - rem;
  if (me < 2 * rem) dep = add_run(s, 0, me - 1, ch, base, bytes, RED_RECV_FIRST, -1);
  int last = s->doubling ? rd_core(s, nr, p2, rem, ch, base, count, dep)
                         : hd_core(s, nr, p2, rem, ch, base, count, dep);
  if (me < 2 * rem) add_run(s, 1, me - 1, ch, base, bytes, 0, last);
}

/* Tree t's view of group index i: its position, and back. */
static int tree_pos(int t, int i, int n) {
  return t == 0 ? i : n - 1 - i;
}

/* Double binary tree over one part: two trees, each reducing then
 * broadcasting half of the part, chunk by chunk; ops are enumerated
 * phase, chunk, tree, so that both ends of every link agree. */
static void tree_allreduce(coll_sched *s, int me, int n, int ch, uint8_t *base, size_t count) {
  size_t u = s->unit, hoff[2], hlen[2];
  size_t cu = s->chunk / u;
  for (int t = 0; t < 2; t++) coll_segment(count, 2, t, &hoff[t], &hlen[t]);
  size_t nchunks = (hlen[0] + cu - 1) / cu;
  int *up = malloc(2 * (nchunks ? nchunks : 1) * sizeof(int));
  if (!up) {
    s->oom = 1;
    return;
  }
  for (int phase = 0; phase < 2; phase++)
    for (size_t k = 0; k < nchunks; k++)
      for (int t = 0; t < 2; t++) {
        if (k * cu >= hlen[t]) continue;
        size_t m = hlen[t] - k * cu < cu ? hlen[t] - k * cu : cu;
        uint8_t *p = base + (hoff[t] + k * cu) * u;
        int pos = tree_pos(t, me, n), kids[2] = {2 * pos + 1, 2 * pos + 2};
        int parent = pos ? tree_pos(t, (pos - 1) / 2, n) : -1;
        if (phase == 0) {
          int last = -1;
          for (int c = 0; c < 2; c++)
            if (kids[c] < n)
              last = add_op(s, 0, tree_pos(t, kids[c], n), ch, p, m * u, RED_RECV_FIRST, last);
          up[k * 2 + (size_t)t] = parent >= 0 ? add_op(s, 1, parent, ch, p, m * u, 0, last) : last;
        } else {
          int got = up[k * 2 + (size_t)t];
          if (parent >= 0) got = add_op(s, 0, parent, ch, p, m * u, 0, got);
          for (int c = 0; c < 2; c++)
            if (kids[c] < n) add_op(s, 1, tree_pos(t, kids[c], n), ch, p, m * u, 0, got);
        }
      }
  free(up);
}

static void sched_reset(coll_sched *s, int n, int nch) {
  for (int i = 0; i < s->nlinks; i++) s->link_of[s->links[i].peer * s->nch + s->links[i].ch] = -1;
  s->nlinks = 0;
  s->nops = 0;
  s->oom = 0;
  s->n = n;
  s->nch = nch;
}

fl_status coll_sched_new(int n, int nch, coll_sched **out) {
  coll_sched *s = calloc(1, sizeof(*s));
  if (s) {
    s->link_of = malloc((size_t)n * (size_t)nch * sizeof(int));
    s->want = malloc((size_t)n * (size_t)nch * sizeof(coll_want));
  }
  if (!s || !s->link_of || !s->want) {
    coll_sched_free(s);
    *out = NULL;
    return FL_ERR(FL_ENOMEM, "collective: out of memory for a schedule");
  }
  for (int i = 0; i < n * nch; i++) s->link_of[i] = -1;
  s->n = n;
  s->nch = nch;
  *out = s;
  return FL_OK;
}

void coll_sched_free(coll_sched *s) {
  if (!s) return;
  for (int i = 0; i < s->cap_links; i++) {
    free(s->links[i].sq);
    free(s->links[i].rq);
    free(s->links[i].scratch);
  }
  free(s->links);
  free(s->ops);
  free(s->link_of);
  free(s->want);
  free(s);
}

/* Build the schedule of op `a` over x.  FL_OK or FL_ENOMEM (logged). */
static fl_status build(coll_sched *s, const coll_xport *x, const coll_op *a) {
  int n = x->n, me = x->me;
  sched_reset(s, n, x->nch);
  s->kind = a->kind;
  s->algo = a->kind == COLL_OP_ALLREDUCE ? a->algo : COLL_ALGO_RING;
  s->doubling = s->algo == COLL_ALGO_HD && a->doubling;
  s->dt = a->dt;
  s->unit = a->kind == COLL_OP_ALLREDUCE ? fl_coll_dtype_size(a->dt) : 1;
  s->chunk = (a->kind == COLL_OP_ALLREDUCE && a->seg ? a->seg : x->chunk) / s->unit;
  s->chunk = (s->chunk ? s->chunk : 1) * s->unit;
  uint8_t *buf = a->buf;
  for (int ch = 0; ch < x->nch; ch++) {
    size_t pb, pl;
    coll_segment(a->count, x->nch, ch, &pb, &pl);
    if (pl == 0) continue;
    uint8_t *base = buf + pb * s->unit;
    if (a->kind == COLL_OP_BROADCAST)
      ring_broadcast(s, me, n, ch, base, pl, a->root);
    else if (a->kind == COLL_OP_ALLGATHER)
      ring_allgather(s, me, n, ch, buf, a->count, pb, pl);
    else if (s->algo == COLL_ALGO_HD)
      hd_allreduce(s, me, n, ch, base, pl);
    else if (s->algo == COLL_ALGO_TREE)
      tree_allreduce(s, me, n, ch, base, pl);
    else
      ring_allreduce(s, me, n, ch, base, pl);
  }
  for (int i = 0; i < s->nlinks && !s->oom; i++) {
    slink *l = &s->links[i];
    if (grow((void **)&l->scratch, &l->cap_scratch, l->need_scratch, 1)) s->oom = 1;
  }
  if (s->oom)
    return FL_ERR(FL_ENOMEM, "collective: out of memory for a %s schedule", kind_name(a->kind));
  uint8_t *h = s->hdr_out;
  coll_put_u32(h, OP_MAGIC);
  coll_put_u32(h + 4, (uint32_t)a->kind | (uint32_t)s->algo << 8 | (uint32_t)s->doubling << 16);
  coll_put_u64(h + 8, a->seq);
  coll_put_u64(h + 16, a->count);
  coll_put_u32(h + 24, a->kind == COLL_OP_ALLREDUCE ? (uint32_t)a->dt : 0);
  coll_put_u32(h + 28, a->kind == COLL_OP_BROADCAST ? (uint32_t)a->root : 0);
  return FL_OK;
}

/* ------------------------------------------------------------ running */

static int header_ok(coll_sched *s, const coll_xport *x, slink *l) {
  if (memcmp(l->hdr_in, s->hdr_out, OPHDR) == 0) return 1;
  const uint8_t *h = l->hdr_in;
  uint32_t ka = coll_get_u32(h + 4), kind = ka & 0xff, algo = ka >> 8 & 0xff;
  int peer = x->ranks[l->peer];
  char nm[FL_HOST_MAX + 32];
  coll_fail(x->c, peer, FL_EPROTO, 0,
            "collective mismatch: %s sent %s #%llu of %llu (dtype %u, root %u, algorithm %s); "
            "this rank runs %s #%llu of %llu (algorithm %s): every rank must call the same "
            "collectives in the same order with the same allreduce_algorithm",
            coll_peer_name(x->c, peer, nm, sizeof(nm)),
            coll_get_u32(h) == OP_MAGIC ? kind_name((int)kind) : "garbage",
            (unsigned long long)coll_get_u64(h + 8), (unsigned long long)coll_get_u64(h + 16),
            coll_get_u32(h + 24), coll_get_u32(h + 28),
            algo < COLL_ALGO_N ? coll_algo_names[algo] : "?", kind_name(s->kind),
            (unsigned long long)coll_get_u64(s->hdr_out + 8),
            (unsigned long long)coll_get_u64(s->hdr_out + 16), coll_algo_names[s->algo]);
  return 0;
}

static int dep_done(const coll_sched *s, int dep) {
  return dep < 0 || s->ops[dep].done;
}

/* Add the piece received in scratch to op o's bytes, in o's order. */
static void reduce_op(const coll_sched *s, const sop *o, uint8_t *scratch) {
  if (o->reduce == RED_RECV_FIRST) {
    coll_reduce_into(s->dt, o->ptr, scratch, o->len / s->unit);
    return;
  }
  coll_reduce_into(s->dt, scratch, o->ptr, o->len / s->unit);
  memcpy(o->ptr, scratch, o->len);
}

/* Receive on link l what arrives without blocking, adding pieces as they
 * complete (in stream order, each after its dependency). */
static fl_status pump_recv(coll_sched *s, const coll_xport *x, slink *l, int *moved) {
  while (l->hr < OPHDR || l->ri < l->nr) {
    uint8_t *dst;
    size_t left, got = 0;
    sop *o = NULL;
    if (l->hr < OPHDR) {
      dst = l->hdr_in + l->hr;
      left = OPHDR - l->hr;
    } else {
      o = &s->ops[l->rq[l->ri]];
      if (!o->reduce && !dep_done(s, o->dep)) return FL_OK;
      dst = (o->reduce ? l->scratch : o->ptr) + l->roff;
      left = o->len - l->roff;
    }
    if (left) {
      FL_TRY(x->recv(x->st, l->peer, l->ch, dst, left, &got));
      if (got == 0) return FL_OK;
      *moved = 1;
    }
    if (!o) {
      l->hr += got;
      if (l->hr == OPHDR && !header_ok(s, x, l)) return FL_EPROTO;
      continue;
    }
    l->roff += got;
    if (l->roff < o->len) continue;
    if (o->reduce) {
      if (!dep_done(s, o->dep)) return FL_OK;
      reduce_op(s, o, l->scratch);
    }
    o->done = 1;
    *moved = 1; /* ops waiting on it may go on: no sleep before they had their turn */
    l->roff = 0;
    l->ri++;
  }
  return FL_OK;
}

/* The header (from byte l->hs) and the link's first piece in one write,
 * once that piece may go; the header waits for it (a link with nothing to
 * send sends its header alone).  *held: the header waits. */
static fl_status send_joined(coll_sched *s, const coll_xport *x, slink *l, int *moved,
                             int *held) {
  const sop *o = &s->ops[l->sq[0]];
  *held = !dep_done(s, o->dep);
  if (*held) return FL_OK;
  size_t put = 0;
  FL_TRY(x->send2(x->st, l->peer, l->ch, s->hdr_out + l->hs, OPHDR - l->hs, o->ptr, o->len, &put));
  if (put == 0) return FL_OK;
  *moved = 1;
  size_t h = put < OPHDR - l->hs ? put : OPHDR - l->hs;
  l->hs += h;
  l->soff = put - h;
  return FL_OK;
}

static fl_status pump_send(coll_sched *s, const coll_xport *x, slink *l, int *moved) {
  if (l->hs < OPHDR && l->si == 0 && l->soff == 0 && l->ns && x->send2) {
    int held;
    FL_TRY(send_joined(s, x, l, moved, &held));
    if (held || l->hs < OPHDR) return FL_OK;
  }
  while (l->hs < OPHDR || l->si < l->ns) {
    const uint8_t *src;
    size_t left, put = 0;
    sop *o = NULL;
    if (l->hs < OPHDR) {
      src = s->hdr_out + l->hs;
      left = OPHDR - l->hs;
    } else {
      o = &s->ops[l->sq[l->si]];
      if (!dep_done(s, o->dep)) return FL_OK;
      src = o->ptr + l->soff;
      left = o->len - l->soff;
    }
    if (left) {
      FL_TRY(x->send(x->st, l->peer, l->ch, src, left, &put));
      if (put == 0) return FL_OK;
      *moved = 1;
    }
    if (!o) {
      l->hs += put;
      continue;
    }
    l->soff += put;
    if (l->soff < o->len) continue;
    o->done = 1;
    *moved = 1;
    l->soff = 0;
    l->si++;
  }
  return FL_OK;
}

/* The bytes link l must receive before the executor can go on with them:
 * the rest of the header and of the op at the head of its stream, unless
 * that op cannot take bytes yet (its dependency is not done, or it waits
 * with its piece in scratch to be added); 0: nothing to wait for here, so
 * that a link whose bytes are already there but not yet wanted does not
 * wake the wait at once, again and again. */
static size_t recv_need(const coll_sched *s, const slink *l) {
  size_t need = l->hr < OPHDR ? OPHDR - l->hr : 0;
  if (l->ri < l->nr) {
    const sop *o = &s->ops[l->rq[l->ri]];
    if (o->reduce ? l->roff < o->len : dep_done(s, o->dep)) need += o->len - l->roff;
  }
  return need;
}

/* Whether link l has bytes that may go now (a header held for its piece
 * has not). */
static int send_can(const coll_sched *s, const coll_xport *x, const slink *l) {
  int next = l->si < l->ns && dep_done(s, s->ops[l->sq[l->si]].dep);
  if (l->hs < OPHDR) return next || !x->send2 || l->ns == 0;
  return next;
}

fl_status coll_sched_run(coll_sched *s, const coll_xport *x, const coll_op *a) {
  FL_TRY(build(s, x, a));
  for (int i = 0; i < s->nlinks; i++) {
    s->links[i].hs = s->links[i].hdr_tx ? 0 : OPHDR;
    s->links[i].hr = s->links[i].hdr_rx ? 0 : OPHDR;
  }
  coll_idle idle = {0, 0};
  for (;;) {
    int moved = 0, nw = 0;
    for (int i = 0; i < s->nlinks; i++) {
      slink *l = &s->links[i];
      FL_TRY(pump_recv(s, x, l, &moved));
      FL_TRY(pump_send(s, x, l, &moved));
      size_t need = recv_need(s, l);
      int send_ready = send_can(s, x, l);
      if (need || send_ready)
        s->want[nw++] = (coll_want){l->peer, l->ch, need > 0, send_ready, need};
    }
    if (nw == 0) {
      int busy = 0;
      for (int i = 0; i < s->nlinks && !busy; i++)
        busy = s->links[i].si < s->links[i].ns || s->links[i].ri < s->links[i].nr;
      if (!busy) return FL_OK;
    }
    if (moved) {
      idle.since_ns = 0;
      continue;
    }
    FL_TRY(x->wait(x->st, s->want, nw, &idle, kind_name(a->kind)));
  }
}

/* ------------------------------------------------------------- waits */

#define SPIN_NS 50000u /* a stalled op yields the core this long before it sleeps */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void coll_idle_mark(coll_idle *idle) {
  if (idle->since_ns) return;
  idle->since_ns = mono_ns();
  idle->last_ms = coll_mono_ms();
}

int coll_idle_spin(coll_idle *idle) {
  coll_idle_mark(idle);
  if (mono_ns() - idle->since_ns >= SPIN_NS) return 0;
  sched_yield();
  return 1;
}

fl_status coll_idle_expired(const coll_xport *x, const coll_want *w, int nw,
                            const coll_idle *idle, const char *op, const char *where) {
  fl_coll *c = x->c;
  FL_TRY(coll_failed(c));
  uint64_t grace_ms = (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 1000;
  if (coll_mono_ms() - idle->last_ms < grace_ms) return FL_OK;
  int peer = nw ? x->ranks[w[0].peer] : -1;
  for (int i = 0; i < nw; i++)
    if (w[i].recv) {
      peer = x->ranks[w[i].peer];
      break;
    }
  char nm[FL_HOST_MAX + 32];
  coll_fail(c, peer, FL_ETIMEDOUT, 0, "%s did not respond within %.1f s (%s stalled%s)",
            coll_peer_name(c, peer, nm, sizeof(nm)), c->timeout_s, op, where);
  return FL_ETIMEDOUT;
}

/* ------------------------------------------------------------- peers */

/* Every group index that some algorithm of a group of n exchanges with
 * from index me, written to out (at most n); the count. */
int coll_algo_peers(int n, int me, int *out) {
  int k = 0;
  char *seen = calloc((size_t)n, 1);
  if (!seen) return -1;
#define ADD(q)                                                                                     \
  do {                                                                                             \
    int q_ = (q);                                                                                  \
    if (q_ >= 0 && q_ < n && q_ != me && !seen[q_]) seen[q_] = 1, out[k++] = q_;                   \
  } while (0)
  ADD((me + 1) % n);
  ADD((me + n - 1) % n);
  int p2 = pow2_floor(n), rem = n - p2;
  if (me < 2 * rem) ADD(me % 2 ? me - 1 : me + 1);
  if (!(me < 2 * rem && me % 2 == 0)) {
    int nr = me < 2 * rem ? me / 2 : me - rem;
    for (int mask = 1; mask < p2; mask *= 2) ADD(hd_rank(nr ^ mask, rem));
  }
  for (int t = 0; t < 2; t++) {
    int pos = tree_pos(t, me, n);
    if (pos) ADD(tree_pos(t, (pos - 1) / 2, n));
    ADD(2 * pos + 1 < n ? tree_pos(t, 2 * pos + 1, n) : -1);
    ADD(2 * pos + 2 < n ? tree_pos(t, 2 * pos + 2, n) : -1);
  }
#undef ADD
  free(seen);
  return k;
}

/* ------------------------------------------------------------- model */

/* halving_doubling's terms on n ranks (n > 1): by recursive halving, or
 * by recursive doubling (log2 of the folded group's size exchanges of the
 * whole bucket, each sent once and added once); the fold of a group that
 * is not a power of two costs both the same. */
static void hd_terms(const coll_model *m, int n, double bytes, int rd, double *lat, double *bw) {
  double a = m->alpha, perb = 2.0 * m->beta + m->gamma, p2 = pow2_floor(n), steps = log2(p2);
  double fold = p2 == (double)n ? 0.0 : 1.0;
  *lat = (rd ? steps : 2.0 * steps) * a + fold * 2.0 * a;
  *bw = (rd ? steps * bytes * (m->beta + m->gamma) : (p2 - 1.0) / p2 * bytes * perb) +
        fold * bytes * perb;
}

static double factor(const double *f, int algo) {
  int i = algo - COLL_ALGO_RING;
  return i >= 0 && i < COLL_MODEL_ALGOS && f[i] > 0 ? f[i] : 1.0; /* 0: not measured */
}

/* Whether recursive doubling beats recursive halving by the model with
 * halving_doubling's factors (measured in the variant that the plain
 * alpha, beta and gamma pick, the probe's model); never for a model that
 * was not probed, so a named halving_doubling halves (the ping-pong's
 * alpha is no step's cost: on loopback 2 ranks, where it picked doubling
 * up to 256 KiB, doubling was 20% to 3 times slower from 64 KiB, and 16
 * loaded, shaped namespaces ran 64 KiB 25% slower by doubling). */
static int doubling(const coll_model *m, int n, double bytes) {
  if (n <= 1 || !(m->alpha > 0) || !(m->beta > 0)) return 0;
  double lr, wr, lh, wh, fl = factor(m->lat, COLL_ALGO_HD), fe = factor(m->eff, COLL_ALGO_HD);
  hd_terms(m, n, bytes, 1, &lr, &wr);
  hd_terms(m, n, bytes, 0, &lh, &wh);
  return fl * lr + fe * wr < fl * lh + fe * wh;
}

int coll_algo_doubling(const coll_model *m, int algo, int n, size_t bytes) {
  return algo == COLL_ALGO_HD && doubling(m, n, (double)bytes);
}

void coll_model_terms(const coll_model *m, int algo, int n, double bytes, double seg, double *lat,
                      double *bw) {
  double a = m->alpha, perb = 2.0 * m->beta + m->gamma, nn = n, l, w;
  if (n <= 1) {
    l = w = 0.0;
  } else if (algo == COLL_ALGO_HD) {
    hd_terms(m, n, bytes, doubling(m, n, bytes), &l, &w);
  } else if (algo == COLL_ALGO_TREE) {
    double half = bytes / 2.0, c = seg > 0 && seg < half ? seg : half;
    double k = ceil(half / (c > 0 ? c : 1.0)), steps = 2.0 * (floor(log2(nn)) + k - 1.0);
    l = steps * a;
    w = steps * c * perb;
  } else {
    l = 2.0 * (nn - 1.0) * a;
    w = (nn - 1.0) / nn * bytes * perb;
  }
  if (lat) *lat = l;
  if (bw) *bw = w;
}

/* The tree's piece: the largest power of two from COLL_SEG_MIN to
 * COLL_SEG_MAX whose tree the model's alpha, beta and gamma alone (the
 * factors are measured with these pieces, so they cannot choose them)
 * predict within SEG_MARGIN of the fastest piece's; none past the first
 * that holds a tree's half whole (all larger ones cut the bucket the same
 * way).  The margin: every piece is a step, and a step costs more than
 * the ping-pong's alpha when every rank sends at once (the ring's latency
 * factor came out 3 to 7 on 16 shaped namespaces of a loaded machine):
 * at 64 KiB there the tree in 16 KiB pieces, the model's fastest, took
 * 1.2 times the tree in one piece per half. */
#define SEG_MARGIN 1.25
size_t coll_algo_seg(const coll_model *m, int algo, int n, size_t bytes) {
  if (algo != COLL_ALGO_TREE || !(m->alpha > 0) || !(m->beta > 0)) return 0;
  coll_model raw = {m->alpha, m->beta, m->gamma, {1, 1, 1}, {1, 1, 1}};
  double t[32], best = 0;
  int k = 0;
  for (size_t c = COLL_SEG_MIN; c <= COLL_SEG_MAX; c *= 2) {
    t[k] = coll_model_time(&raw, COLL_ALGO_TREE, n, (double)bytes, (double)c);
    if (k == 0 || t[k] < best) best = t[k];
    k++;
    if (2 * c >= bytes) break;
  }
  while (k > 1 && t[k - 1] > best * SEG_MARGIN) k--;
  return COLL_SEG_MIN << (k - 1);
}

double coll_model_time(const coll_model *m, int algo, int n, double bytes, double seg) {
  double lat, bw;
  coll_model_terms(m, algo, n, bytes, seg, &lat, &bw);
  return factor(m->lat, algo) * lat + factor(m->eff, algo) * bw;
}

double coll_model_predict(const coll_model *m, int algo, int n, size_t bytes) {
  return coll_model_time(m, algo, n, (double)bytes, (double)coll_algo_seg(m, algo, n, bytes));
}

void coll_model_table(const coll_model *m, int n, uint8_t table[COLL_TABLE_BINS]) {
  static const int cand[] = {COLL_ALGO_RING, COLL_ALGO_HD, COLL_ALGO_TREE};
  for (int bin = 0; bin < COLL_TABLE_BINS; bin++) {
    double best = 0;
    int pick = COLL_ALGO_RING;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
      double t = coll_model_predict(m, cand[i], n, (size_t)1 << bin);
      if (i == 0 || t < best) {
        best = t;
        pick = cand[i];
      }
    }
    table[bin] = (uint8_t)pick;
  }
}

int coll_table_bin(size_t bytes) {
  int bin = 0;
  while (bin < COLL_TABLE_BINS - 1 && ((size_t)1 << bin) < bytes) bin++;
  return bin;
}

/* ------------------------------------------------------------ tuning */

/* Layout (little-endian): u32 magic "FLTU", u32 version, u32 n, u32 0,
 * f64 alpha, beta, gamma, lat[COLL_MODEL_ALGOS], eff[COLL_MODEL_ALGOS]
 * (as their bits),
 * u8 table[COLL_TABLE_BINS]. */
#define TUNING_MAGIC 0x55544c46u

void coll_tuning_encode(const coll_tuning *t, uint8_t out[COLL_TUNING_BYTES]) {
  coll_put_u32(out, TUNING_MAGIC);
  coll_put_u32(out + 4, COLL_TUNING_VERSION);
  coll_put_u32(out + 8, (uint32_t)t->n);
  coll_put_u32(out + 12, 0);
  coll_put_f64(out + 16, t->m.alpha);
  coll_put_f64(out + 24, t->m.beta);
  coll_put_f64(out + 32, t->m.gamma);
  for (int i = 0; i < COLL_MODEL_ALGOS; i++) {
    coll_put_f64(out + 40 + 8 * i, t->m.lat[i]);
    coll_put_f64(out + 40 + 8 * (COLL_MODEL_ALGOS + i), t->m.eff[i]);
  }
  memcpy(out + 40 + 16 * COLL_MODEL_ALGOS, t->table, COLL_TABLE_BINS);
}

fl_status coll_tuning_decode(const uint8_t *p, size_t len, coll_tuning *t) {
  if (len != COLL_TUNING_BYTES || coll_get_u32(p) != TUNING_MAGIC ||
      coll_get_u32(p + 4) != COLL_TUNING_VERSION)
    return FL_EPROTO;
  t->n = (int)coll_get_u32(p + 8);
  t->m.alpha = coll_get_f64(p + 16);
  t->m.beta = coll_get_f64(p + 24);
  t->m.gamma = coll_get_f64(p + 32);
  for (int i = 0; i < COLL_MODEL_ALGOS; i++) {
    t->m.lat[i] = coll_get_f64(p + 40 + 8 * i);
    t->m.eff[i] = coll_get_f64(p + 40 + 8 * (COLL_MODEL_ALGOS + i));
  }
  memcpy(t->table, p + 40 + 16 * COLL_MODEL_ALGOS, COLL_TABLE_BINS);
  for (int b = 0; b < COLL_TABLE_BINS; b++)
    if (t->table[b] < COLL_ALGO_RING || t->table[b] > COLL_ALGO_TREE) return FL_EPROTO;
  return t->n >= 1 ? FL_OK : FL_EPROTO;
}
