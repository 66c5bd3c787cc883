/* graph_dev.c - the gpu path of a compiled graph (train.device: gpu).
 *
 * A gpu graph runs every node through its op's CUDA twin on one stream;
 * a graph holding an op without twins is refused at create, naming the
 * node and the op.  The host parameter arena stays the model's state, as
 * on the old engine: every step uploads all parameter values (the loop, a
 * checkpoint or a peer may have changed them) and the micro-batch, each
 * parameter's gradient is downloaded right before on_ready names it, and
 * the buffers (batch-norm running statistics) come back after forward.
 * In a build without CUDA every entry refuses with FL_ENOTSUP. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_engine.h"

#ifndef FL_HAVE_CUDA

fl_status fl_gdev_check(fl_gmodel *m) {
  return FL_ERR(FL_ENOTSUP, "graph %s: device gpu: built without CUDA (configure --with-cuda)",
                m->g->name);
}
fl_status fl_gdev_attach(fl_gmodel *m, const fl_graph_options *opt) {
  (void)opt;
  return fl_gdev_check(m);
}
void fl_gdev_release(fl_gmodel *m) { (void)m; }
fl_status fl_gdev_begin(fl_gmodel *m, const float *x, const int32_t *y, size_t batch,
                        const float **dx) {
  (void)x, (void)y, (void)batch, (void)dx;
  return fl_gdev_check(m);
}
void fl_gdev_grad_ready(fl_gmodel *m, size_t p) { (void)m, (void)p; }
fl_status fl_gdev_memset0(fl_gmodel *m, float *p, size_t n) {
  (void)p, (void)n;
  return fl_gdev_check(m);
}
fl_status fl_gdev_softmax_xent(fl_gmodel *m, const float *logits, const int32_t *y, size_t batch,
                               size_t classes, float scale, float *dlogits, double *loss_sum,
                               size_t *c1, size_t *c5) {
  (void)logits, (void)y, (void)batch, (void)classes, (void)scale, (void)dlogits;
  (void)loss_sum, (void)c1, (void)c5;
  return fl_gdev_check(m);
}
fl_status fl_gdev_download_output(fl_gmodel *m, size_t batch) {
  (void)batch;
  return fl_gdev_check(m);
}
fl_status fl_gdev_upload_dout(fl_gmodel *m, size_t batch) {
  (void)batch;
  return fl_gdev_check(m);
}
fl_status fl_gdev_sync_host(fl_gmodel *m) { return m->dev ? fl_gdev_check(m) : FL_OK; }

#endif
