/* graph_bind.c - binding a compiled graph to a batch size: every tensor's
 * shape (integer shape subgraphs evaluated on the spot), then one plan of
 * all activation, gradient and forward-to-backward buffers in one arena.
 *
 * Planning works on the step's timeline of events: each node's forward,
 * the loss, then the backwards in reverse topological order.  With
 * recompute, the values inside a segment (between two checkpoints) are
 * not kept: a node is re-run just before the first backward that reads
 * one of its values (its inputs first, recursively, down to kept tensors),
 * so a recomputed value lives only as long as backward needs it.  Every
 * buffer gets the interval of events from its first write to its last
 * read (both ends included, so a node's input and output buffers never
 * alias), and buffers whose intervals overlap get disjoint places
 * (largest first, lowest free offset).  A recomputed tensor has two
 * buffers: one for the forward, dead after its last forward reader, and
 * one from its recomputation to its last backward reader.
 *
 * The gradient flow (which tensors get a gradient, the accum bits of each
 * backward, which nodes recompute) is decided once, at the first bind. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_engine.h"

static size_t round_up(size_t n) {
  if (n == 0) n = 1;
  return (n + FL_G_ALIGN - 1) / FL_G_ALIGN * FL_G_ALIGN;
}

/* A float VALUE some node writes (a rewrite may leave one without). */
static int is_f32_value(const fl_gtensor *t) {
  return t->kind == FL_GT_VALUE && t->dtype == FL_G_F32 && t->producer >= 0;
}

/* ------------------------------------------------------------ shapes */

/* Whether node n's outputs can be computed at bind: all are int64, every
 * int64 input is known, and other inputs only feed shape reads (the shape
 * of an int64 data input is known at bind, its values are not). */
static int shape_domain(const fl_gnode *n, const fl_gtensor *t) {
  const int shape_op = (n->op->traits & FL_GOP_SHAPE_ONLY) != 0;
  for (int o = 0; o < n->n_out; o++)
    if (t[n->out[o]].dtype != FL_G_I64) return 0;
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0) continue;
    const fl_gtensor *x = &t[n->in[i]];
    if (!shape_op && (x->dtype != FL_G_I64 || !x->known)) return 0;
  }
  return 1;
}

static fl_status infer_all(fl_gmodel *m, size_t batch) {
  fl_graph *g = m->g;
  fl_gctx *c = &m->ctx;
  c->batch = batch;
  c->training = 0;
  c->recomputing = 0;
  for (int i = 0; i < g->nt; i++) {
    fl_gtensor *t = &g->t[i];
    if (t->kind == FL_GT_VALUE) {
      t->known = 0;
      continue;
    }
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
      t->shape[d] = (t->kind == FL_GT_INPUT && d == 0) ? (int64_t)batch : t->dims[d];
      n *= (size_t)t->shape[d];
    }
    t->n = n;
  }
  for (int i = 0; i < g->nn; i++) {
    fl_gnode *n = &g->nodes[i];
    size_t ws = 0, saved = 0;
    c->node_index = (size_t)i;
    for (int o = 0; o < n->n_out; o++) g->t[n->out[o]].dtype = FL_G_F32;
    FL_TRY(n->op->infer(n, c, &ws, &saved));
    n->ws_floats = ws;
    n->saved_floats = saved;
    for (int o = 0; o < n->n_out; o++) {
      fl_gtensor *t = &g->t[n->out[o]];
      if (t->ndim < 0 || t->ndim > FL_G_MAX_DIMS)
        return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): output %s has rank %d", g->name,
                      n->name, n->op->type, t->name, t->ndim);
      size_t cnt = 1;
      for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
          return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): output %s has dimension %d of "
                        "size %lld", g->name, n->name, n->op->type, t->name, d,
                        (long long)t->shape[d]);
        if (t->shape[d] > 0 && cnt > ((size_t)1 << 40) / (size_t)t->shape[d])
          return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): output %s of %s elements is too "
                        "large", g->name, n->name, n->op->type, t->name, "over 2^40");
        cnt *= (size_t)t->shape[d];
      }
      t->n = cnt;
      if (t->dtype == FL_G_I64) {
        int64_t *p = realloc(t->idata, (cnt ? cnt : 1) * sizeof *p);
        if (!p) return FL_ERR(FL_ENOMEM, "graph %s: out of memory for %s", g->name, t->name);
        t->idata = p;
      }
    }
    m->fwd_skip[i] = (unsigned char)shape_domain(n, g->t);
    if (m->fwd_skip[i]) {
      FL_TRY(n->op->forward(n, c));
      for (int o = 0; o < n->n_out; o++) g->t[n->out[o]].known = 1;
    }
  }
  const fl_gtensor *out = &g->t[g->output];
  if (out->dtype != FL_G_F32 || out->ndim < 1 || out->shape[0] != (int64_t)batch)
    return FL_ERR(FL_EINVAL, "graph %s: output %s must be float with the batch (%zu) as its "
                  "first dimension", g->name, out->name, batch);
  return FL_OK;
}

/* ------------------------------------------------------ gradient flow */

static int input_nodiff(const fl_gnode *n, int i) { return i < 32 && (n->op->nodiff_in >> i) & 1u; }

/* Make variant v (fl_gvariant) the one the plan and the steps use. */
static void use_variant(fl_gmodel *m, int v) {
  m->kept = m->var[v].kept;
  m->recomp = m->var[v].recomp;
  m->ev_kind = m->var[v].ev_kind;
  m->ev_node = m->var[v].ev_node;
  m->n_ev = m->var[v].n_ev;
}

/* Schedule node j's recomputation (after its non-kept inputs') unless it
 * is already scheduled; done[] marks scheduled nodes. */
static void ensure(fl_gmodel *m, int j, unsigned char *done) {
  if (done[j]) return;
  done[j] = 1;
  const fl_gnode *n = &m->g->nodes[j];
  for (int k = 0; k < n->n_in; k++) {
    const int t = n->in[k];
    if (t >= 0 && !m->kept[t]) ensure(m, m->g->t[t].producer, done);
  }
  m->ev_kind[m->n_ev] = FL_GEV_RECOMP;
  m->ev_node[m->n_ev++] = j;
}

/* Which tensors get gradients, which backward runs, accum bits, param
 * contributions, the recompute segments and the backward events. */
static fl_status plan_static(fl_gmodel *m) {
  fl_graph *g = m->g;
  const int nt = g->nt, nn = g->nn;
  unsigned char *req = calloc((size_t)nt, 1), *reach = calloc((size_t)nt, 1),
                *written = calloc((size_t)nt, 1), *sched = calloc((size_t)nn + 1, 1);
  fl_status st = FL_OK;
  if (!req || !reach || !written || !sched) {
    st = FL_ERR(FL_ENOMEM, "graph %s: out of memory planning", g->name);
    goto done;
  }
  for (int t = 0; t < nt; t++)
    req[t] = g->t[t].kind == FL_GT_PARAM || g->t[t].kind == FL_GT_ROWS;
  for (int i = 0; i < nn; i++) {
    const fl_gnode *n = &g->nodes[i];
    int r = 0;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && !input_nodiff(n, k) && req[n->in[k]] && g->t[n->in[k]].dtype == FL_G_F32)
        r = 1;
    for (int o = 0; o < n->n_out; o++) req[n->out[o]] = (unsigned char)(r && g->t[n->out[o]].dtype == FL_G_F32);
  }
  reach[g->output] = 1;
  for (int i = nn; i-- > 0;) {
    const fl_gnode *n = &g->nodes[i];
    int r = 0;
    for (int o = 0; o < n->n_out; o++) r |= reach[n->out[o]] && g->t[n->out[o]].dtype == FL_G_F32;
    if (!r) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && !input_nodiff(n, k)) reach[n->in[k]] = 1;
  }
  for (int t = 0; t < nt; t++) m->has_grad[t] = req[t] && reach[t] && g->t[t].dtype == FL_G_F32;
  written[g->output] = 1; /* the loss writes it first */
  for (int i = nn; i-- > 0;) {
    const fl_gnode *n = &g->nodes[i];
    int run = 0;
    for (int o = 0; o < n->n_out; o++) run |= m->has_grad[n->out[o]];
    m->run_bwd[i] = (unsigned char)(run && !m->fwd_skip[i]);
    m->accum[i] = 0;
    if (!m->run_bwd[i]) continue;
    if (!n->op->backward) {
      st = FL_ERR(FL_ENOTSUP, "graph %s: node %s: op %s has no gradient, but the loss depends "
                  "on its inputs through it", g->name, n->name, n->op->type);
      goto done;
    }
    for (int o = 0; o < n->n_out; o++) {
      const int t = n->out[o];
      m->zero_grad[t] = !m->has_grad[t] && g->t[t].dtype == FL_G_F32;
    }
    for (int k = 0; k < n->n_in; k++) {
      const int t = n->in[k];
      if (t < 0 || input_nodiff(n, k) || !m->has_grad[t]) continue;
      if (k >= 32) {
        st = FL_ERR(FL_ENOTSUP, "graph %s: node %s: a gradient into input %d (32 at most)",
                    g->name, n->name, k);
        goto done;
      }
      if (written[t]) m->accum[i] |= 1u << k;
      written[t] = 1;
      if (m->param_of[t] >= 0) m->contrib[m->param_of[t]]++;
    }
  }
  m->n_zero_params = 0;
  for (size_t p = 0; p < m->np; p++)
    if (m->params[p].grad && m->contrib[p] == 0) m->zero_params[m->n_zero_params++] = p;

  /* Recompute segments: a segment ends at each node that produces a
   * checkpoint; the last segment is never recomputed (its values are
   * still there when backward starts). */
  int s = 0;
  for (int i = 0; i < nn; i++) {
    m->seg[i] = s;
    for (int o = 0; o < g->nodes[i].n_out; o++)
      if (m->ckpt[g->nodes[i].out[o]]) {
        s++;
        break;
      }
  }
  m->n_seg = nn ? m->seg[nn - 1] + 1 : 0;
  for (int v = 0; v < 2; v++) {
    use_variant(m, v);
    for (int t = 0; t < nt; t++) m->kept[t] = 1;
    if (v == 1)
      for (int i = 0; i < nn; i++) {
        const fl_gnode *n = &g->nodes[i];
        if (m->seg[i] == m->n_seg - 1 || m->fwd_skip[i]) continue;
        for (int o = 0; o < n->n_out; o++) {
          const int t = n->out[o];
          if (!is_f32_value(&g->t[t]) || m->ckpt[t] || t == g->output) continue;
          int cross = 0;
          for (int j = i + 1; j < nn && !cross; j++)
            for (int k = 0; k < g->nodes[j].n_in; k++)
              if (g->nodes[j].in[k] == t && m->seg[j] != m->seg[i]) cross = 1;
          if (!cross) {
            m->kept[t] = 0;
            m->recomp[i] = 1;
          }
        }
      }
    /* the backward events, with each recomputation just in time */
    for (int i = 0; i < nn; i++) sched[i] = 0;
    m->n_ev = 0;
    for (int i = nn; i-- > 0;) {
      if (!m->run_bwd[i]) continue;
      const fl_gnode *n = &g->nodes[i];
      if (m->recomp[i]) ensure(m, i, sched);
      for (int k = 0; k < n->n_in && k < 32; k++) {
        const int t = n->in[k];
        if (t >= 0 && !m->kept[t] && ((n->op->save_in >> k) & 1u))
          ensure(m, g->t[t].producer, sched);
      }
      m->ev_kind[m->n_ev] = FL_GEV_BWD;
      m->ev_node[m->n_ev++] = i;
    }
    m->var[v].n_ev = m->n_ev;
  }
  use_variant(m, 0);
done:
  free(req);
  free(reach);
  free(written);
  free(sched);
  return st;
}

/* ------------------------------------------------------------ planning */

typedef struct planner {
  fl_gbuf *b;
  size_t nb, cap;
} planner;

static int add_buf(planner *p, size_t floats, int start, int end) {
  if (p->nb == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    fl_gbuf *b = realloc(p->b, cap * sizeof *b);
    if (!b) return -1;
    p->b = b;
    p->cap = cap;
  }
  p->b[p->nb] = (fl_gbuf){.size = round_up(floats), .start = start, .end = end};
  return (int)p->nb++;
}

static int cmp_size_desc(const void *a, const void *b) {
  const fl_gbuf *x = *(fl_gbuf *const *)a, *y = *(fl_gbuf *const *)b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return x->start - y->start;
}

static int cmp_off(const void *a, const void *b) {
  const fl_gbuf *x = *(fl_gbuf *const *)a, *y = *(fl_gbuf *const *)b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* Place every buffer; returns the arena floats needed, or (size_t)-1 when
 * out of memory. */
static size_t pack(planner *p) {
  fl_gbuf **order = malloc((p->nb + 1) * sizeof *order);
  fl_gbuf **live = malloc((p->nb + 1) * sizeof *live);
  size_t total = 0;
  if (!order || !live) {
    free(order);
    free(live);
    return (size_t)-1;
  }
  for (size_t i = 0; i < p->nb; i++) order[i] = &p->b[i];
  qsort(order, p->nb, sizeof *order, cmp_size_desc);
  for (size_t i = 0; i < p->nb; i++) {
    fl_gbuf *b = order[i];
    size_t nl = 0;
    for (size_t j = 0; j < i; j++)
      if (order[j]->start <= b->end && b->start <= order[j]->end) live[nl++] = order[j];
    qsort(live, nl, sizeof *live, cmp_off);
    size_t off = 0;
    for (size_t j = 0; j < nl; j++) {
      if (live[j]->off >= off + b->size) break;
      if (live[j]->off + live[j]->size > off) off = live[j]->off + live[j]->size;
    }
    b->off = off;
    if (off + b->size > total) total = off + b->size;
  }
  free(order);
  free(live);
  return total;
}

/* Extend buffer b's interval to cover event e. */
static void touch(planner *p, int b, int e) {
  if (b < 0) return;
  fl_gbuf *x = &p->b[b];
  if (x->start < 0 || e < x->start) x->start = e;
  if (e > x->end) x->end = e;
}

/* A view node's output (FL_GOP_VIEW) shares its input's forward buffer
 * when both are float values computed once (neither recomputed): values
 * are never written after their producer, so the shared bytes are both
 * tensors' values; the output's own buffer is left empty.  The gradients
 * keep their buffers. */
static void share_views(const fl_gmodel *m, planner *p, int *bfwd, const int *bbwd) {
  const fl_graph *g = m->g;
  for (int i = 0; i < g->nn; i++) {
    const fl_gnode *n = &g->nodes[i];
    if (!(n->op->traits & FL_GOP_VIEW) || m->fwd_skip[i] || m->recomp[i] || n->n_in < 1 ||
        n->in[0] < 0)
      continue;
    const int x = n->in[0], y = n->out[0];
    if (bfwd[x] < 0 || bfwd[y] < 0 || bbwd[x] >= 0 || bbwd[y] >= 0 || g->t[x].n != g->t[y].n)
      continue;
    p->b[bfwd[y]].size = 0;
    bfwd[y] = bfwd[x];
  }
}

/* A view node's input gradient shares its output gradient's buffer when
 * the view is the input's only reader: the output's gradient is complete
 * (written by its readers' backwards) before the view's backward, which
 * would copy it over the input's, written by no other. */
static fl_status share_view_grads(const fl_gmodel *m, planner *p, int *bgrad) {
  const fl_graph *g = m->g;
  int *readers = calloc((size_t)g->nt, sizeof *readers);
  if (!readers) return FL_ERR(FL_ENOMEM, "graph %s: out of memory planning buffers", g->name);
  for (int i = 0; i < g->nn; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) readers[g->nodes[i].in[k]]++;
  for (int i = g->nn - 1; i >= 0; i--) { /* backward order: a chain's last view first */
    const fl_gnode *n = &g->nodes[i];
    if (!(n->op->traits & FL_GOP_VIEW) || n->n_in < 1 || n->in[0] < 0) continue;
    const int x = n->in[0], y = n->out[0];
    if (readers[x] != 1 || bgrad[x] < 0 || bgrad[y] < 0 || m->zero_grad[x] || m->zero_grad[y] ||
        x == g->output || y == g->output || g->t[x].n != g->t[y].n)
      continue;
    p->b[bgrad[x]].size = 0;
    bgrad[x] = bgrad[y];
  }
  free(readers);
  return FL_OK;
}

/* Plan the buffers of the variant in use: *need receives the arena floats;
 * unless dry, pl receives the plan (offsets, scratch). */
static fl_status plan_buffers(fl_gmodel *m, int dry, size_t *need, fl_gplan *pl) {
  fl_graph *g = m->g;
  const int nt = g->nt, nn = g->nn;
  int *bfwd = malloc((size_t)nt * sizeof *bfwd), *bbwd = malloc((size_t)nt * sizeof *bbwd),
      *bgrad = malloc((size_t)nt * sizeof *bgrad);
  int *sfwd = malloc((size_t)nn * sizeof *sfwd), *sbwd = malloc((size_t)nn * sizeof *sbwd);
  planner p = {0};
  fl_status st = FL_OK;
  if (!bfwd || !bbwd || !bgrad || !sfwd || !sbwd) goto nomem;
  /* the buffers, intervals empty for now */
  for (int t = 0; t < nt; t++) {
    const fl_gtensor *x = &g->t[t];
    bfwd[t] = bbwd[t] = bgrad[t] = -1;
    if (is_f32_value(x) && !m->fwd_skip[x->producer]) {
      if ((bfwd[t] = add_buf(&p, x->n, -1, -1)) < 0) goto nomem;
      if (!m->kept[t] && (bbwd[t] = add_buf(&p, x->n, -1, -1)) < 0) goto nomem;
    }
    if (x->kind == FL_GT_VALUE && (m->has_grad[t] || m->zero_grad[t]) &&
        (bgrad[t] = add_buf(&p, x->n, -1, -1)) < 0)
      goto nomem;
  }
  share_views(m, &p, bfwd, bbwd);
  if ((st = share_view_grads(m, &p, bgrad)) != FL_OK) goto done;
  size_t ws = 0;
  for (int i = 0; i < nn; i++) {
    const fl_gnode *n = &g->nodes[i];
    sfwd[i] = sbwd[i] = -1;
    if (n->ws_floats > ws) ws = n->ws_floats;
    if (!n->saved_floats || m->fwd_skip[i]) continue;
    if ((sfwd[i] = add_buf(&p, n->saved_floats, -1, -1)) < 0) goto nomem;
    if (m->recomp[i] && (sbwd[i] = add_buf(&p, n->saved_floats, -1, -1)) < 0) goto nomem;
  }
  /* the timeline: forwards, the loss, then the backward events */
  int e = 0;
  for (int i = 0; i < nn; i++, e++) {
    const fl_gnode *n = &g->nodes[i];
    if (m->fwd_skip[i]) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) touch(&p, bfwd[n->in[k]], e);
    for (int o = 0; o < n->n_out; o++) touch(&p, bfwd[n->out[o]], e);
    touch(&p, sfwd[i], e);
  }
  touch(&p, bfwd[g->output], e);
  touch(&p, bgrad[g->output], e);
  e++;
  for (int v = 0; v < m->n_ev; v++, e++) {
    const int i = m->ev_node[v];
    const fl_gnode *n = &g->nodes[i];
    /* a tensor's buffer as backward sees it: the recomputed copy if any */
#define BWD_BUF(t) (bbwd[t] >= 0 ? bbwd[t] : bfwd[t])
    if (m->ev_kind[v] == FL_GEV_RECOMP) {
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0) touch(&p, BWD_BUF(n->in[k]), e);
      for (int o = 0; o < n->n_out; o++) touch(&p, BWD_BUF(n->out[o]), e);
      touch(&p, sbwd[i] >= 0 ? sbwd[i] : sfwd[i], e);
      continue;
    }
    for (int k = 0; k < n->n_in; k++) {
      const int t = n->in[k];
      if (t < 0) continue;
      if (k < 32 && ((n->op->save_in >> k) & 1u)) touch(&p, BWD_BUF(t), e);
      if (!input_nodiff(n, k)) touch(&p, bgrad[t], e);
    }
    for (int o = 0; o < n->n_out; o++) {
      const int t = n->out[o];
      if (o < 32 && ((n->op->save_out >> o) & 1u)) touch(&p, BWD_BUF(t), e);
      touch(&p, bgrad[t], e);
    }
    touch(&p, sbwd[i] >= 0 ? sbwd[i] : sfwd[i], e);
#undef BWD_BUF
  }
  /* a buffer nothing touches (the output of a node whose forward never
   * runs in a step) still needs a place: give it the first event */
  for (size_t b = 0; b < p.nb; b++)
    if (p.b[b].start < 0) p.b[b].start = p.b[b].end = 0;
  const size_t total = pack(&p);
  if (total == (size_t)-1) goto nomem;
  *need = total;
  if (dry) goto done;
  /* the plan: offsets into the arena, FL_G_NONE where there is no buffer */
  pl->floats = total;
  pl->ws = round_up(ws);
#define OFF(k) ((k) >= 0 ? p.b[k].off : FL_G_NONE)
  for (int t = 0; t < nt; t++) {
    pl->off[3 * t] = OFF(bfwd[t]);
    pl->off[3 * t + 1] = OFF(bbwd[t]);
    pl->off[3 * t + 2] = OFF(bgrad[t]);
  }
  for (int i = 0; i < nn; i++) {
    pl->off[3 * nt + 2 * i] = OFF(sfwd[i]);
    pl->off[3 * nt + 2 * i + 1] = OFF(sbwd[i]);
  }
#undef OFF
  goto done;
nomem:
  st = FL_ERR(FL_ENOMEM, "graph %s: out of memory planning buffers", g->name);
done:
  free(bfwd);
  free(bbwd);
  free(bgrad);
  free(sfwd);
  free(sbwd);
  free(p.b);
  return st;
}

/* Make plan pl current: arena and scratch large enough (they only grow),
 * every tensor's and node's pointers set. */
static fl_status apply_plan(fl_gmodel *m, const fl_gplan *pl) {
  fl_graph *g = m->g;
  const int nt = g->nt, nn = g->nn;
  fl_status st;
  if (pl->floats > m->arena_floats) {
    fl_gdev_free(m, m->arena);
    m->arena = NULL;
    m->arena_floats = 0;
    if ((st = fl_gdev_alloc(m, pl->floats, &m->arena)) != FL_OK) return st;
    m->arena_floats = pl->floats;
  }
  if (pl->ws > m->ws_floats) {
    fl_gdev_free(m, m->ws);
    m->ws = NULL;
    m->ws_floats = 0;
    if ((st = fl_gdev_alloc(m, pl->ws, &m->ws)) != FL_OK) return st;
    m->ws_floats = pl->ws;
  }
  m->plan_floats = pl->floats;
#define PTR(o) ((o) == FL_G_NONE ? NULL : m->arena + (o))
  for (int t = 0; t < nt; t++) {
    fl_gtensor *x = &g->t[t];
    m->data_fwd[t] = PTR(pl->off[3 * t]);
    m->data_bwd[t] = pl->off[3 * t + 1] != FL_G_NONE ? PTR(pl->off[3 * t + 1]) : m->data_fwd[t];
    m->grad_buf[t] = PTR(pl->off[3 * t + 2]);
    if (x->kind == FL_GT_VALUE) {
      if (x->dtype == FL_G_F32) x->data = m->data_fwd[t];
      x->grad = m->grad_buf[t];
    } else if (x->kind == FL_GT_PARAM) {
      x->grad = m->has_grad[t] ? m->params[m->param_of[t]].grad : NULL;
    } else if (x->kind == FL_GT_ROWS) {
      x->grad = m->has_grad[t] ? m->rows_grad[t] : NULL;
    } else {
      x->grad = NULL;
    }
  }
  for (int i = 0; i < nn; i++) {
    fl_gnode *n = &g->nodes[i];
    const size_t *o = &pl->off[3 * nt + 2 * i];
    m->saved_fwd[i] = PTR(o[0]);
    m->saved_bwd[i] = o[1] != FL_G_NONE ? PTR(o[1]) : m->saved_fwd[i];
    n->saved = m->saved_fwd[i];
    n->ws = n->ws_floats ? m->ws : NULL;
  }
#undef PTR
  return FL_OK;
}

fl_status fl_gbind(fl_gmodel *m, size_t batch) {
  if (m->bound == batch) return FL_OK;
  m->bound = 0;
  FL_TRY(infer_all(m, batch));
  if (!m->static_done) {
    FL_TRY(plan_static(m));
    m->static_done = 1;
  }
  /* the plan of max_batch, or of the last other batch, when cached */
  fl_gplan *pl = &m->plans[batch == m->max_batch ? 0 : 1];
  if (pl->batch != batch) {
    size_t need[2] = {0, 0};
    int v = 0;
    pl->batch = 0;
    if (m->recompute) {
      for (int k = 0; k < 2; k++) {
        use_variant(m, k);
        FL_TRY(plan_buffers(m, 1, &need[k], NULL));
      }
      v = need[1] < need[0];
      if (!v)
        FL_LOGD("graph %s: recompute would not lower the peak at batch %zu (%zu floats): "
                "values kept", m->g->name, batch, need[0]);
    }
    use_variant(m, v);
    FL_TRY(plan_buffers(m, 0, &need[v], pl));
    pl->variant = v;
    pl->batch = batch;
  }
  use_variant(m, pl->variant);
  FL_TRY(apply_plan(m, pl));
  m->bound = batch;
  return FL_OK;
}
