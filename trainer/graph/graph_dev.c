/* graph_dev.c - where a compiled graph's buffers live, and its gpu path
 * (train.device: gpu).
 *
 * A gpu graph runs every node of a step through its op's CUDA twin on one
 * stream; a graph holding a node without twins is refused at create,
 * naming the node and the op (in any build: the check needs no GPU).  The
 * activation arena and the scratch are device memory.  The host parameter
 * arena stays the model's state, as on the sequential engine before it:
 * every step uploads all parameter values (the loop, a checkpoint or a
 * peer may have changed them) and the micro-batch, each parameter's
 * gradient is downloaded right before on_ready names it, and after a
 * training step the buffers (batch-norm running statistics) come back.
 * Between steps every PARAM, BUFFER and CONST tensor points at its host
 * memory, so export and fl_graph_value read host values.  Integer shape
 * values are computed at bind on the host; a graph computing int64 values
 * from data at run time is refused on the gpu.
 *
 * The CUDA half is compiled only with --with-cuda. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_device.h"
#include "fl_log.h"
#include "graph_engine.h"

#define ROUND(n) ((((n) ? (n) : 1) + FL_G_ALIGN - 1) / FL_G_ALIGN * FL_G_ALIGN)

/* Every node a step runs has CUDA twins; FL_ENOTSUP naming the first that
 * has not.  Nodes evaluated at bind (shape domain) run on the host. */
static fl_status check_twins(const fl_gmodel *m) {
  const fl_graph *g = m->g;
  for (int i = 0; i < g->nn; i++) {
    const fl_gnode *n = &g->nodes[i];
    if (m->fwd_skip[i]) continue;
    if (!n->op->forward_cuda || (m->run_bwd[i] && !n->op->backward_cuda))
      return FL_ERR(FL_ENOTSUP, "graph %s: device gpu: node %s (op %s) has no CUDA kernel; "
                    "train this model with train.device: cpu", g->name, n->name, n->op->type);
    for (int o = 0; o < n->n_out; o++)
      if (g->t[n->out[o]].dtype == FL_G_I64)
        return FL_ERR(FL_ENOTSUP, "graph %s: device gpu: node %s (op %s) computes int64 values "
                      "from data at run time, which the gpu path does not hold", g->name,
                      n->name, n->op->type);
  }
  return FL_OK;
}

#ifndef FL_HAVE_CUDA

fl_status fl_gdev_alloc(fl_gmodel *m, size_t floats, float **out) {
  *out = aligned_alloc(64, ROUND(floats) * sizeof(float));
  if (!*out)
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory for %zu bytes of activations", m->g->name,
                  floats * sizeof(float));
  memset(*out, 0, ROUND(floats) * sizeof(float)); /* touch the pages now, not in a step */
  return FL_OK;
}

void fl_gdev_free(fl_gmodel *m, float *p) {
  (void)m;
  free(p);
}

fl_status fl_gdev_zero(fl_gmodel *m, float *p, size_t n) {
  (void)m;
  memset(p, 0, n * sizeof(float));
  return FL_OK;
}

fl_status fl_gdev_attach(fl_gmodel *m, int device) {
  (void)device;
  FL_TRY(check_twins(m));
  return FL_ERR(FL_ENOTSUP, "graph %s: device gpu: built without CUDA (configure --with-cuda)",
                m->g->name);
}

void fl_gdev_release(fl_gmodel *m) { (void)m; }

/* Never reached: without CUDA no graph has m->dev set. */
fl_status fl_gdev_begin(fl_gmodel *m, const float *x, const int32_t *y, size_t batch,
                        const float **dx) {
  (void)x, (void)y, (void)batch, (void)dx;
  return FL_ERR(FL_ENOTSUP, "graph %s: no CUDA in this build", m->g->name);
}
void fl_gdev_grad_ready(fl_gmodel *m, size_t p) { (void)m, (void)p; }
fl_status fl_gdev_softmax_xent(fl_gmodel *m, const float *logits, const int32_t *y, size_t batch,
                               size_t classes, float scale, float *dlogits, double *loss_sum,
                               size_t *c1, size_t *c5) {
  (void)logits, (void)y, (void)batch, (void)classes, (void)scale, (void)dlogits;
  (void)loss_sum, (void)c1, (void)c5;
  return FL_ERR(FL_ENOTSUP, "graph %s: no CUDA in this build", m->g->name);
}
fl_status fl_gdev_download_output(fl_gmodel *m, size_t batch) {
  (void)batch;
  return FL_ERR(FL_ENOTSUP, "graph %s: no CUDA in this build", m->g->name);
}
fl_status fl_gdev_upload_dout(fl_gmodel *m, size_t batch) {
  (void)batch;
  return FL_ERR(FL_ENOTSUP, "graph %s: no CUDA in this build", m->g->name);
}
fl_status fl_gdev_end(fl_gmodel *m, int training) {
  (void)training;
  return FL_ERR(FL_ENOTSUP, "graph %s: no CUDA in this build", m->g->name);
}

#else /* FL_HAVE_CUDA */

#include "fl_layers.h"

typedef struct fl_gdev {
  int device;
  void *stream;
  float *values, *grads; /* mirrors of m->values / m->grads, float for float */
  float *x;              /* the micro-batch: max_batch * input size */
  int32_t *y;            /* its labels */
  float **cdev;          /* per tensor: device copy of an F32 CONST, else NULL */
  float **host;          /* per tensor: its host data pointer (PARAM/BUFFER/CONST) */
  float **hgrad;         /* per tensor: its host grad pointer (PARAM) */
  size_t in_size;
} fl_gdev;

fl_status fl_gdev_alloc(fl_gmodel *m, size_t floats, float **out) {
  *out = NULL;
  if (!m->dev) {
    *out = aligned_alloc(64, ROUND(floats) * sizeof(float));
    if (!*out)
      return FL_ERR(FL_ENOMEM, "graph %s: out of memory for %zu bytes of activations",
                    m->g->name, floats * sizeof(float));
    memset(*out, 0, ROUND(floats) * sizeof(float));
    return FL_OK;
  }
  void *p = NULL;
  fl_status st = fl_cuda_malloc(&p, ROUND(floats) * sizeof(float));
  if (st != FL_OK)
    return FL_ERR(st, "graph %s: cannot allocate %zu bytes of activations on CUDA device %d",
                  m->g->name, floats * sizeof(float), m->dev->device);
  *out = p;
  return FL_OK;
}

void fl_gdev_free(fl_gmodel *m, float *p) {
  if (!p) return;
  if (!m->dev) {
    free(p);
    return;
  }
  (void)fl_cuda_stream_synchronize(m->dev->stream); /* nothing queued may still use it */
  (void)fl_cuda_free(p);
}

fl_status fl_gdev_zero(fl_gmodel *m, float *p, size_t n) {
  if (!m->dev) {
    memset(p, 0, n * sizeof(float));
    return FL_OK;
  }
  return fl_cuda_memset(p, 0, n * sizeof(float), m->dev->stream);
}

/* Point the PARAM/BUFFER/CONST tensors at their device (dev 1) or host
 * (dev 0) memory. */
static void point(fl_gmodel *m, int dev) {
  fl_gdev *d = m->dev;
  for (int t = 0; t < m->g->nt; t++) {
    fl_gtensor *x = &m->g->t[t];
    if (x->kind == FL_GT_PARAM || x->kind == FL_GT_BUFFER) {
      const size_t off = (size_t)(d->host[t] - m->values);
      x->data = dev ? d->values + off : d->host[t];
      if (x->kind == FL_GT_PARAM && d->hgrad[t])
        x->grad = dev ? d->grads + (size_t)(d->hgrad[t] - m->grads) : d->hgrad[t];
    } else if (x->kind == FL_GT_CONST && x->dtype == FL_G_F32) {
      x->data = dev ? d->cdev[t] : d->host[t];
    }
  }
}

void fl_gdev_release(fl_gmodel *m) {
  fl_gdev *d = m->dev;
  if (!d) return;
  (void)fl_cuda_set_device(d->device);
  if (d->stream) (void)fl_cuda_stream_synchronize(d->stream);
  point(m, 0);
  (void)fl_cuda_free(m->arena);
  (void)fl_cuda_free(m->ws);
  m->arena = m->ws = NULL;
  m->arena_floats = m->ws_floats = 0;
  (void)fl_cuda_free(d->values);
  (void)fl_cuda_free(d->grads);
  (void)fl_cuda_free(d->x);
  (void)fl_cuda_free(d->y);
  for (int t = 0; d->cdev && t < m->g->nt; t++) (void)fl_cuda_free(d->cdev[t]);
  free(d->cdev);
  free(d->host);
  free(d->hgrad);
  (void)fl_cuda_stream_destroy(d->stream);
  free(d);
  m->dev = NULL;
}

static fl_status dev_malloc(fl_gmodel *m, void **p, size_t bytes, const char *what) {
  const fl_status st = fl_cuda_malloc(p, bytes ? bytes : sizeof(float));
  if (st != FL_OK)
    return FL_ERR(st, "graph %s: cannot allocate %zu bytes (%s) on CUDA device %d", m->g->name,
                  bytes, what, m->dev->device);
  return FL_OK;
}

fl_status fl_gdev_attach(fl_gmodel *m, int device) {
  FL_TRY(check_twins(m));
  if (device >= fl_cuda_device_count())
    return FL_ERR(FL_ENOTSUP, "graph %s: device gpu: no CUDA device %d", m->g->name, device);
  const size_t nt = (size_t)m->g->nt;
  fl_gdev *d = calloc(1, sizeof *d);
  if (!d) return FL_ERR(FL_ENOMEM, "graph %s: out of memory", m->g->name);
  d->cdev = calloc(nt, sizeof *d->cdev);
  d->host = calloc(nt, sizeof *d->host);
  d->hgrad = calloc(nt, sizeof *d->hgrad);
  d->device = device;
  /* the host arenas go: re-bind below makes device ones */
  free(m->arena);
  free(m->ws);
  m->arena = m->ws = NULL;
  m->arena_floats = m->ws_floats = 0;
  m->bound = 0;
  m->plans[0].batch = m->plans[1].batch = 0; /* a gpu bind sizes scratch anew */
  m->dev = d; /* from here on, fl_gdev_release frees what was made */
  if (!d->cdev || !d->host || !d->hgrad)
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory", m->g->name);
  FL_TRY(fl_cuda_set_device(device));
  FL_TRY(fl_cuda_stream_create(&d->stream));
  m->ctx.stream = d->stream;
  const fl_gtensor *in = &m->g->t[m->g->input];
  d->in_size = 1;
  for (int k = 1; k < in->ndim; k++) d->in_size *= (size_t)in->dims[k];
  FL_TRY(dev_malloc(m, (void **)&d->values, m->n_values * sizeof(float), "parameters"));
  FL_TRY(dev_malloc(m, (void **)&d->grads, m->n_grads * sizeof(float), "gradients"));
  FL_TRY(dev_malloc(m, (void **)&d->x, m->max_batch * d->in_size * sizeof(float), "input"));
  FL_TRY(dev_malloc(m, (void **)&d->y, m->max_batch * sizeof(int32_t), "labels"));
  for (size_t t = 0; t < nt; t++) {
    fl_gtensor *x = &m->g->t[t];
    if (x->kind == FL_GT_PARAM || x->kind == FL_GT_BUFFER || (x->kind == FL_GT_CONST && x->dtype == FL_G_F32))
      d->host[t] = x->data;
    if (x->kind == FL_GT_PARAM) d->hgrad[t] = x->grad ? x->grad : m->params[m->param_of[t]].grad;
    if (x->kind == FL_GT_CONST && x->dtype == FL_G_F32) {
      FL_TRY(dev_malloc(m, (void **)&d->cdev[t], x->n * sizeof(float), x->name));
      FL_TRY(fl_cuda_copy_to_device(d->cdev[t], x->data, x->n * sizeof(float), d->stream));
    }
  }
  /* loss buffers for bce / mse (computed on the host) */
  const size_t out_n = m->g->t[m->g->output].n; /* bound at max_batch */
  if (m->g->loss != FL_GLOSS_SOFTMAX_XENT) {
    m->dev_out = malloc(out_n * sizeof(float));
    m->dev_dout = malloc(out_n * sizeof(float));
    if (!m->dev_out || !m->dev_dout) return FL_ERR(FL_ENOMEM, "graph %s: out of memory", m->g->name);
  }
  return fl_gbind(m, m->max_batch);
}

fl_status fl_gdev_begin(fl_gmodel *m, const float *x, const int32_t *y, size_t batch,
                        const float **dx) {
  fl_gdev *d = m->dev;
  FL_TRY(fl_cuda_set_device(d->device));
  FL_TRY(fl_cuda_copy_to_device(d->values, m->values, m->n_values * sizeof(float), d->stream));
  FL_TRY(fl_cuda_copy_to_device(d->x, x, batch * d->in_size * sizeof(float), d->stream));
  if (y) FL_TRY(fl_cuda_copy_to_device(d->y, y, batch * sizeof(int32_t), d->stream));
  point(m, 1);
  *dx = d->x;
  return FL_OK;
}

void fl_gdev_grad_ready(fl_gmodel *m, size_t p) {
  fl_gdev *d = m->dev;
  fl_param *q = &m->params[p];
  const float *src = d->grads + (size_t)(q->grad - m->grads);
  /* a failed copy leaves the host gradient stale; the stream error comes
   * back from fl_gdev_end, which fails the step */
  (void)fl_cuda_copy_to_host(q->grad, src, q->n * sizeof(float), d->stream);
}

fl_status fl_gdev_softmax_xent(fl_gmodel *m, const float *logits, const int32_t *y, size_t batch,
                               size_t classes, float scale, float *dlogits, double *loss_sum,
                               size_t *c1, size_t *c5) {
  (void)y; /* uploaded by begin */
  return fl_softmax_xent_cuda(logits, m->dev->y, batch, classes, scale, dlogits, loss_sum, c1,
                              c5, m->dev->stream);
}

fl_status fl_gdev_download_output(fl_gmodel *m, size_t batch) {
  const fl_gtensor *o = &m->g->t[m->g->output];
  (void)batch;
  return fl_cuda_copy_to_host(m->dev_out, o->data, o->n * sizeof(float), m->dev->stream);
}

fl_status fl_gdev_upload_dout(fl_gmodel *m, size_t batch) {
  const fl_gtensor *o = &m->g->t[m->g->output];
  (void)batch;
  return fl_cuda_copy_to_device(o->grad, m->dev_dout, o->n * sizeof(float), m->dev->stream);
}

fl_status fl_gdev_end(fl_gmodel *m, int training) {
  fl_gdev *d = m->dev;
  fl_status st = FL_OK;
  if (training)
    for (size_t p = 0; p < m->np && st == FL_OK; p++) {
      const int t = m->param_tensor[p];
      if (m->g->t[t].kind != FL_GT_BUFFER) continue;
      const size_t off = (size_t)(m->params[p].value - m->values);
      st = fl_cuda_copy_to_host(m->params[p].value, d->values + off,
                                m->params[p].n * sizeof(float), d->stream);
    }
  const fl_status s2 = fl_cuda_stream_synchronize(d->stream);
  point(m, 0);
  return st != FL_OK ? st : s2;
}

#endif
