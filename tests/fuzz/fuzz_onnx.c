/* fuzz_onnx.c - the ONNX importer (fl_onnx_load_mem / fl_onnx_load) on
 * hostile model files.
 *
 * Input: one flag byte, then the .onnx file image.  Flags:
 *   bit 0     load through a file (a memfd under /proc/self/fd) instead of
 *             from memory;
 *   bits 1-2  the loss (0 softmax_cross_entropy, 1 bce_with_logits, 2 mse;
 *             3 is taken as 0);
 *   bit 3     ask for the output called "output" (else the graph's only
 *             output).
 * Invariants: a refused file gives FL_EPROTO, FL_EINVAL or FL_ENOTSUP (or
 * FL_EIO through the file) and no graph; an accepted one gives a graph
 * whose data input is a float or int64 tensor with the batch as dim 0 and fixed
 * dims after it, whose output is set with the loss asked for, whose tensor
 * names are unique and found by name, and whose nodes refer only to
 * declared tensors.  The graph is not compiled: shapes and the engine's
 * bind are the graph tests' business.
 * Seeds (corpus/onnx/): made by tests/fuzz/make_onnx_corpus.py. */
#include <config.h>

#include <string.h>
#include <unistd.h>

#include "fl_graph_inspect.h"
#include "fl_onnx.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (1 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

static fl_status load_file(const uint8_t *buf, size_t len, const char *output, fl_gloss loss,
                           fl_graph **out) {
  char path[64];
  int fd = fuzz_memfile(buf, len, path, sizeof path);
  fl_status st = fl_onnx_load(path, output, loss, out);
  close(fd);
  return st;
}

static void check_graph(const fl_graph *g, fl_gloss want) {
  const int nt = fl_graph_num_tensors(g), nn = fl_graph_num_nodes(g);
  fl_gtensor_info ti;
  const int in = fl_graph_input_id(g);
  FUZZ_CHECK(fl_graph_tensor_info(g, in, &ti) == FL_OK, "input id %d of %d", in, nt);
  FUZZ_CHECK(ti.kind == FL_GT_INPUT && (ti.dtype == FL_G_F32 || ti.dtype == FL_G_I64),
             "input %s kind %d dtype %d", ti.name, ti.kind, (int)ti.dtype);
  FUZZ_CHECK(ti.ndim >= 1 && ti.ndim <= FL_G_MAX_DIMS && ti.dims[0] == FL_G_BATCH,
             "input %s: ndim %d", ti.name, ti.ndim);
  for (int d = 1; d < ti.ndim; d++) FUZZ_CHECK(ti.dims[d] >= 1, "input dim %d", d);
  fl_gloss loss;
  const int out = fl_graph_output_id(g, &loss);
  FUZZ_CHECK(out >= 0 && out < nt && loss == want, "output %d, loss %d", out, (int)loss);
  for (int id = 0; id < nt; id++) {
    FUZZ_CHECK(fl_graph_tensor_info(g, id, &ti) == FL_OK, "tensor %d", id);
    FUZZ_CHECK(ti.name && fl_graph_find(g, ti.name) == id, "tensor %d ('%s') not found by name",
               id, ti.name ? ti.name : "");
    FUZZ_CHECK(ti.kind != FL_GT_CONST || ti.data || ti.idata, "constant %s without data", ti.name);
  }
  for (int i = 0; i < nn; i++) {
    fl_gnode_info ni;
    FUZZ_CHECK(fl_graph_node_info(g, i, &ni) == FL_OK, "node %d", i);
    for (int k = 0; k < ni.n_in; k++)
      FUZZ_CHECK(ni.in[k] >= -1 && ni.in[k] < nt, "node %s input %d = %d", ni.name, k, ni.in[k]);
    for (int k = 0; k < ni.n_out; k++)
      FUZZ_CHECK(ni.out[k] >= 0 && ni.out[k] < nt, "node %s output %d", ni.name, k);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  const uint8_t flags = data[0];
  int l = (flags >> 1) & 3;
  const fl_gloss loss = (fl_gloss)(l == 3 ? 0 : l);
  const char *output = (flags & 8) ? "output" : NULL;
  fl_graph *g = NULL;
  fl_status st = (flags & 1) ? load_file(data + 1, size - 1, output, loss, &g)
                             : fl_onnx_load_mem(data + 1, size - 1, "fuzz.onnx", output, loss, &g);
  if (st == FL_OK) {
    FUZZ_CHECK(g != NULL, "FL_OK without a graph");
    check_graph(g, loss);
    fl_graph_free(g);
  } else {
    FUZZ_CHECK(g == NULL, "status %d with a graph", (int)st);
    FUZZ_CHECK(st == FL_EPROTO || st == FL_EINVAL || st == FL_ENOTSUP ||
                   ((flags & 1) && st == FL_EIO),
               "status %d", (int)st);
  }
  return 0;
}
