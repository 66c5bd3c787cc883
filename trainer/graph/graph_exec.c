/* graph_exec.c - running a bound graph: forward in topological order, and
 * reverse-mode backward, each node's vector-Jacobian product in reverse
 * topological order with the accum bits fixed at plan time, recomputing
 * values that were not kept just before the first backward that reads
 * them (the event list of graph_bind.c).
 *
 * Gradients of parameters are reported to on_ready in decreasing index
 * order, each as soon as it is final and every higher index has been
 * reported: parameters are numbered by first use, so in a chain this is
 * right after the backward of the node that uses them first, and the
 * loop's fusion buckets overlap the rest of backward. */
#include <config.h>

#include <string.h>

#include "fl_log.h"
#include "fl_timeline.h"
#include "graph_engine.h"

/* Forward of node i as the op's twin on the graph's device. */
static fl_status node_forward(fl_gmodel *m, int i) {
  fl_gnode *n = &m->g->nodes[i];
  m->ctx.node_index = (size_t)i;
  return m->dev ? n->op->forward_cuda(n, &m->ctx) : n->op->forward(n, &m->ctx);
}

static fl_status node_backward(fl_gmodel *m, int i) {
  fl_gnode *n = &m->g->nodes[i];
  m->ctx.node_index = (size_t)i;
  return m->dev ? n->op->backward_cuda(n, &m->ctx, m->accum[i])
                : n->op->backward(n, &m->ctx, m->accum[i]);
}

fl_status fl_gexec_forward(fl_gmodel *m, const float *x, int training) {
  fl_graph *g = m->g;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].kind == FL_GT_VALUE && g->t[t].dtype == FL_G_F32) g->t[t].data = m->data_fwd[t];
  for (int i = 0; i < g->nn; i++) g->nodes[i].saved = m->saved_fwd[i];
  if (g->input >= 0 && x) g->t[g->input].data = (float *)x; /* the device copy (gpu) */
  m->ctx.training = training;
  m->ctx.recomputing = 0;
  m->ctx.step = m->step;
  m->ctx.norm_sync = training ? m->norm_sync : NULL;
  m->ctx.norm_sync_ctx = training ? m->norm_sync_ctx : NULL;
  for (int i = 0; i < g->nn; i++)
    if (!m->fwd_skip[i]) FL_TRY(node_forward(m, i));
  return FL_OK;
}

/* Report, from the top, every parameter whose gradient is final. */
static void report(fl_gmodel *m, size_t *next, fl_grad_ready_fn on_ready, void *ctx) {
  while (*next > 0) {
    const size_t p = *next - 1;
    if (m->params[p].grad && !m->final[p]) return;
    if (m->params[p].grad) {
      if (m->dev) fl_gdev_grad_ready(m, p); /* the host grad is what on_ready names */
      if (on_ready) on_ready(ctx, p);
    }
    (*next)--;
  }
}

fl_status fl_gexec_backward(fl_gmodel *m, fl_grad_ready_fn on_ready, void *ctx) {
  fl_graph *g = m->g;
  /* backward reads the recomputed copies */
  for (int t = 0; t < g->nt; t++)
    if (!m->kept[t]) g->t[t].data = m->data_bwd[t];
  for (size_t p = 0; p < m->np; p++) {
    m->left[p] = m->contrib[p];
    m->final[p] = m->contrib[p] == 0;
  }
  for (size_t k = 0; k < m->n_zero_params; k++) {
    const fl_gtensor *t = &g->t[m->param_tensor[m->zero_params[k]]];
    FL_TRY(fl_gdev_zero(m, t->grad, t->n)); /* the device mirror on a gpu graph */
  }
  size_t next = m->np;
  report(m, &next, on_ready, ctx);
  for (int v = 0; v < m->n_ev; v++) {
    const int i = m->ev_node[v];
    fl_gnode *n = &g->nodes[i];
    n->saved = m->saved_bwd[i];
    if (m->ev_kind[v] == FL_GEV_RECOMP) {
      m->ctx.recomputing = 1;
      const fl_status st = node_forward(m, i);
      m->ctx.recomputing = 0;
      FL_TRY(st);
      continue;
    }
    for (int o = 0; o < n->n_out; o++) {
      const fl_gtensor *t = &g->t[n->out[o]];
      if (m->zero_grad[n->out[o]] && t->grad) FL_TRY(fl_gdev_zero(m, t->grad, t->n));
    }
    FL_TRY(node_backward(m, i));
    int any = 0;
    for (int k = 0; k < n->n_in; k++) {
      const int t = n->in[k];
      if (t < 0 || m->param_of[t] < 0 || !m->has_grad[t]) continue;
      if (k < 32 && ((n->op->nodiff_in >> k) & 1u)) continue;
      const size_t p = (size_t)m->param_of[t];
      if (--m->left[p] == 0) m->final[p] = 1, any = 1;
    }
    if (any) report(m, &next, on_ready, ctx);
  }
  report(m, &next, on_ready, ctx);
  if (next != 0)
    return FL_ERR(FL_ESTATE, "graph %s: backward ended with parameter %s not final",
                  g->name, m->params[next - 1].name);
  return FL_OK;
}
