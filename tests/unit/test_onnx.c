/* test_onnx.c - the ONNX importer (trainer/onnx/): what a valid model
 * becomes (parameters, buffers, constants, the batch input, pruned dead
 * nodes), and that hostile files (truncated, cyclic, missing inputs,
 * overflowing dims, initializers claiming more bytes than they hold,
 * unknown ops, subgraphs, deep nesting, ...) get one clear message naming
 * the file and the node, never a crash.  The models are built in C with
 * protobuf-c (onnx_testutil.h). */
#include <config.h>

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_graph.h"
#include "fl_graph_inspect.h"
#include "fl_log.h"
#include "fl_onnx.h"
#include "log_capture.h"
#include "onnx_testutil.h"

/* Load the model t describes; expect status want and every fragment in the
 * log (which must hold exactly one error line when want is not FL_OK). */
static void expect_load(const tm *t, const char *output, fl_status want, const char *const *frags) {
  size_t len;
  uint8_t *b = tm_pack(t, &len);
  fl_graph *g = (fl_graph *)1;
  capture_begin();
  fl_status st = fl_onnx_load_mem(b, len, "model.onnx", output, FL_GLOSS_SOFTMAX_XENT, &g);
  const char *log = capture_end();
  free(b);
  ck_assert_msg(st == want, "status %d, want %d; log:\n%s", st, want, log);
  for (int i = 0; frags[i]; i++)
    ck_assert_msg(strstr(log, frags[i]), "log lacks \"%s\":\n%s", frags[i], log);
  if (want != FL_OK) {
    ck_assert_ptr_null(g);
    const char *e = strstr(log, " E ");
    ck_assert_msg(e && !strstr(e + 3, " E "), "want one error line:\n%s", log);
  }
  fl_graph_free(g);
}
#define EXPECT(t, out, st, ...) expect_load((t), (out), (st), (const char *const[]){__VA_ARGS__, NULL})

/* ------------------------------------------------------------ valid models */

START_TEST(test_mlp_imports) {
  static tm t;
  tm_mlp(&t);
  size_t len;
  uint8_t *b = tm_pack(&t, &len);
  fl_graph *g = NULL;
  ck_assert_int_eq(fl_onnx_load_mem(b, len, "mlp.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g), FL_OK);
  ck_assert_ptr_nonnull(g);
  fl_gtensor_info ti;
  int in = fl_graph_input_id(g);
  ck_assert_int_eq(fl_graph_tensor_info(g, in, &ti), FL_OK);
  ck_assert_str_eq(ti.name, "x");
  ck_assert_int_eq(ti.kind, FL_GT_INPUT);
  ck_assert_int_eq(ti.ndim, 2);
  ck_assert_int_eq(ti.dims[0], FL_G_BATCH);
  ck_assert_int_eq(ti.dims[1], 4);
  const char *params[] = {"fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"};
  for (int i = 0; i < 4; i++) {
    int id = fl_graph_find(g, params[i]);
    ck_assert_int_ge(id, 0);
    ck_assert_int_eq(fl_graph_tensor_info(g, id, &ti), FL_OK);
    ck_assert_int_eq(ti.kind, FL_GT_PARAM);
    ck_assert_int_eq(ti.dtype, FL_G_F32);
  }
  ck_assert_int_eq(fl_graph_num_nodes(g), 3);
  fl_gnode_info ni;
  ck_assert_int_eq(fl_graph_node_info(g, 0, &ni), FL_OK);
  ck_assert_str_eq(ni.op_type, "Gemm");
  ck_assert_str_eq(ni.name, "fc0");
  ck_assert_int_eq(ni.n_attrs, 1);
  ck_assert_str_eq(ni.attrs[0].name, "transB");
  ck_assert_int_eq(ni.attrs[0].i, 1);
  fl_gloss loss = FL_GLOSS_MSE;
  int out = fl_graph_output_id(g, &loss);
  ck_assert_int_eq(out, fl_graph_find(g, "logits"));
  ck_assert_int_eq(loss, FL_GLOSS_SOFTMAX_XENT);
  fl_graph_free(g);

  /* the same through a file; a missing file names its path */
  char path[] = "/tmp/fl_test_onnx_model_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, b, len), (ssize_t)len);
  close(fd);
  ck_assert_int_eq(fl_onnx_load(path, "logits", FL_GLOSS_MSE, &g), FL_OK);
  fl_graph_output_id(g, &loss);
  ck_assert_int_eq(loss, FL_GLOSS_MSE);
  fl_graph_free(g);
  unlink(path);
  capture_begin();
  fl_status st = fl_onnx_load(path, NULL, FL_GLOSS_SOFTMAX_XENT, &g);
  const char *log = capture_end();
  ck_assert_int_eq(st, FL_EIO);
  ck_assert_ptr_nonnull(strstr(log, path));
  free(b);
  tm_free(&t);
}
END_TEST

/* BatchNormalization statistics are buffers, its scale and bias
 * parameters; int32 initializers become int64 constants, Constant nodes
 * constants; initializers listed as graph inputs are not data inputs;
 * nodes and initializers the output does not need are left out. */
START_TEST(test_kinds_and_pruning) {
  static tm t;
  static const float one[2] = {1, 1}, zero[2] = {0, 0};
  tm_init(&t, 17);
  tm_input(&t, "x", 4, (const int64_t[]){-1, 2, 3, 3});
  t.inputs[t.g.n_input++] = tm_vi(&t, "bn.weight", 1, 1, (const int64_t[]){2}, NULL);
  tm_init_f(&t, "bn.weight", 1, (const int64_t[]){2}, one);
  tm_init_f(&t, "bn.bias", 1, (const int64_t[]){2}, zero);
  tm_init_f(&t, "bn.running_mean", 1, (const int64_t[]){2}, zero);
  tm_init_f(&t, "bn.running_var", 1, (const int64_t[]){2}, one);
  tm_init_f(&t, "unused", 1, (const int64_t[]){2}, one);
  const int32_t shape32[2] = {0, -1};
  t.inits[t.g.n_initializer++] =
      tm_tensor(&t, "shape", 6, 1, (const int64_t[]){2}, shape32, sizeof shape32);
  Onnx__NodeProto *n =
      tm_node(&t, "BatchNormalization", "bn", "x,bn.weight,bn.bias,bn.running_mean,bn.running_var",
              "y");
  tm_attr_f(&t, n, "epsilon", 1e-5f);
  tm_node(&t, "Reshape", "flat", "y,shape", "logits");
  n = tm_node(&t, "Constant", "c", NULL, "axes");
  tm_attr_ints(&t, n, "value_ints", 1, (const int64_t[]){1});
  tm_node(&t, "ReduceSum", "dead", "y,axes", "side");
  tm_node(&t, "Relu", "dead2", "side", "side2");
  tm_output(&t, "logits");
  tm_output(&t, "side2");
  size_t len;
  uint8_t *b = tm_pack(&t, &len);
  fl_graph *g = NULL;
  ck_assert_int_eq(fl_onnx_load_mem(b, len, "bn.onnx", "logits", FL_GLOSS_SOFTMAX_XENT, &g), FL_OK);
  fl_gtensor_info ti;
  ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "bn.weight"), &ti), FL_OK);
  ck_assert_int_eq(ti.kind, FL_GT_PARAM);
  ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "bn.bias"), &ti), FL_OK);
  ck_assert_int_eq(ti.kind, FL_GT_PARAM);
  ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "bn.running_mean"), &ti), FL_OK);
  ck_assert_int_eq(ti.kind, FL_GT_BUFFER);
  ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "bn.running_var"), &ti), FL_OK);
  ck_assert_int_eq(ti.kind, FL_GT_BUFFER);
  ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "shape"), &ti), FL_OK);
  ck_assert_int_eq(ti.kind, FL_GT_CONST);
  ck_assert_int_eq(ti.dtype, FL_G_I64);
  ck_assert_ptr_nonnull(ti.idata);
  ck_assert_int_eq(ti.idata[0], 0);
  ck_assert_int_eq(ti.idata[1], -1);
  ck_assert_int_eq(fl_graph_find(g, "unused"), -1);
  ck_assert_int_eq(fl_graph_find(g, "axes"), -1); /* only the dead branch used it */
  ck_assert_int_eq(fl_graph_find(g, "side"), -1);
  ck_assert_int_eq(fl_graph_num_nodes(g), 2);
  fl_graph_free(g);
  free(b);

  /* the side output, named: the Constant is folded into a constant */
  b = tm_pack(&t, &len);
  ck_assert_int_eq(fl_onnx_load_mem(b, len, "bn.onnx", "side2", FL_GLOSS_MSE, &g), FL_OK);
  ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "axes"), &ti), FL_OK);
  ck_assert_int_eq(ti.kind, FL_GT_CONST);
  ck_assert_int_eq(ti.dtype, FL_G_I64);
  ck_assert_int_eq(ti.idata[0], 1);
  ck_assert_int_eq(fl_graph_find(g, "logits"), -1);
  ck_assert_int_eq(fl_graph_num_nodes(g), 3);
  fl_graph_free(g);
  free(b);
  tm_free(&t);
}
END_TEST

/* Bool tensors (PyTorch's training exports give Dropout a bool
 * training_mode) become int64 0 / 1 constants, from raw data and from
 * int32_data alike; Dropout's float ratio initializer, which no gradient
 * reaches, is a constant. */
START_TEST(test_bool_constants) {
  static tm t;
  for (int typed = 0; typed < 2; typed++) {
    tm_mlp(&t);
    t.nodes[2]->input[0] = tm_str(&t, "hd");
    const uint8_t on = 7;
    Onnx__TensorProto *b = tm_tensor(&t, "train_mode", 9, 0, NULL, &on, 1);
    if (typed) {
      static int32_t v = 5;
      b->has_raw_data = 0;
      b->n_int32_data = 1;
      b->int32_data = &v;
      t.inits[t.g.n_initializer++] = b;
    } else {
      Onnx__NodeProto *c = tm_node(&t, "Constant", "tm", NULL, "train_mode");
      Onnx__AttributeProto *a =
          tm_attr(&t, c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
      a->t = b;
    }
    static const float ratio = 0.25f;
    tm_init_f(&t, "ratio", 0, NULL, &ratio);
    tm_node(&t, "Dropout", "drop", "hr,ratio,train_mode", "hd");
    size_t len;
    uint8_t *buf = tm_pack(&t, &len);
    fl_graph *g = NULL;
    ck_assert_int_eq(fl_onnx_load_mem(buf, len, "bool.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g),
                     FL_OK);
    fl_gtensor_info ti;
    ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "train_mode"), &ti), FL_OK);
    ck_assert_int_eq(ti.kind, FL_GT_CONST);
    ck_assert_int_eq(ti.dtype, FL_G_I64);
    ck_assert_int_eq(ti.ndim, 0);
    ck_assert_int_eq(ti.idata[0], 1);
    /* a float initializer no op differentiates is a constant, not trained */
    ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "ratio"), &ti), FL_OK);
    ck_assert_int_eq(ti.kind, FL_GT_CONST);
    ck_assert_int_eq(ti.dtype, FL_G_F32);
    ck_assert(ti.data[0] == 0.25f);
    ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, "fc1.weight"), &ti), FL_OK);
    ck_assert_int_eq(ti.kind, FL_GT_PARAM);
    fl_graph_free(g);
    free(buf);
    tm_free(&t);
  }
}
END_TEST

/* ------------------------------------------------------------ hostile */

START_TEST(test_truncated) {
  static tm t;
  tm_mlp(&t);
  size_t len;
  uint8_t *b = tm_pack(&t, &len);
  fl_log_level old = fl_log_get_level();
  fl_log_set_level(FL_LOG_OFF);
  for (size_t cut = 0; cut < len; cut++) {
    uint8_t *p = malloc(cut ? cut : 1); /* exact size: ASan sees any overread */
    memcpy(p, b, cut);
    fl_graph *g = (fl_graph *)1;
    fl_status st = fl_onnx_load_mem(p, cut, "cut.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g);
    ck_assert_msg(st != FL_OK, "a model cut at byte %zu of %zu loaded", cut, len);
    ck_assert_ptr_null(g);
    free(p);
  }
  fl_log_set_level(old);
  /* one of them, with its message */
  capture_begin();
  fl_graph *g;
  fl_status st = fl_onnx_load_mem(b, len / 2, "cut.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g);
  const char *log = capture_end();
  ck_assert_int_eq(st, FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "cut.onnx: not an ONNX model"));
  free(b);
  tm_free(&t);
}
END_TEST

START_TEST(test_cycle_and_missing) {
  static tm t;
  tm_init(&t, 13);
  tm_input(&t, "x", 2, (const int64_t[]){-1, 4});
  tm_node(&t, "Add", "a", "x,b_out", "a_out");
  tm_node(&t, "Relu", "b", "a_out", "b_out");
  tm_output(&t, "b_out");
  EXPECT(&t, NULL, FL_EINVAL, "model.onnx: node '", "has a cycle");
  tm_free(&t);

  tm_init(&t, 13);
  tm_input(&t, "x", 2, (const int64_t[]){-1, 4});
  tm_node(&t, "Relu", "self", "r", "r");
  tm_output(&t, "r");
  EXPECT(&t, NULL, FL_EINVAL, "model.onnx: node 'self' (Relu): the graph has a cycle");
  tm_free(&t);

  tm_init(&t, 13);
  tm_input(&t, "x", 2, (const int64_t[]){-1, 4});
  tm_node(&t, "Add", "adder", "x,nowhere", "y");
  tm_output(&t, "y");
  EXPECT(&t, NULL, FL_EINVAL,
         "model.onnx: node 'adder' (Add): input 'nowhere' is not a graph input, an initializer "
         "or any node's output");
  tm_free(&t);

  tm_init(&t, 13);
  tm_input(&t, "x", 2, (const int64_t[]){-1, 4});
  tm_node(&t, "Relu", "r1", "x", "y");
  tm_node(&t, "Relu", "r2", "x", "y");
  tm_output(&t, "y");
  EXPECT(&t, NULL, FL_EINVAL, "node 'r2' (Relu): output 'y' is already defined (by another node)");
  tm_free(&t);
}
END_TEST

START_TEST(test_bad_tensors) {
  static tm t;
  /* dims whose product overflows */
  tm_mlp(&t);
  t.inits[0]->dims[0] = (int64_t)1 << 40;
  t.inits[0]->dims[1] = (int64_t)1 << 40;
  EXPECT(&t, NULL, FL_EINVAL, "model.onnx: initializer 'fc0.weight' has dims [1099511627776, "
         "1099511627776]: negative, or more elements than a model file can hold");
  tm_free(&t);
  tm_mlp(&t);
  t.inits[0]->dims[1] = -4;
  EXPECT(&t, NULL, FL_EINVAL, "initializer 'fc0.weight' has dims [3, -4]: negative");
  tm_free(&t);
  /* more bytes claimed than held */
  tm_mlp(&t);
  t.inits[0]->dims[0] = 1000;
  EXPECT(&t, NULL, FL_EINVAL, "initializer 'fc0.weight' holds 48 bytes of raw data; its dims "
         "[1000, 4] of float need 16000");
  tm_free(&t);
  /* typed data of the wrong count */
  tm_mlp(&t);
  static float vals[5];
  t.inits[1]->has_raw_data = 0;
  t.inits[1]->n_float_data = 5;
  t.inits[1]->float_data = vals;
  EXPECT(&t, NULL, FL_EINVAL, "initializer 'fc0.bias' holds 5 float values; its dims [3] need 3");
  tm_free(&t);
  /* other dtypes, external and sparse data */
  tm_mlp(&t);
  t.inits[1]->data_type = 10;
  t.inits[1]->raw_data.len = 6;
  t.inits[1]->raw_data.data = tm_alloc(&t, 6);
  EXPECT(&t, NULL, FL_ENOTSUP, "initializer 'fc0.bias' has dtype float16; supported: float, "
         "double (read as float), int64, int32");
  tm_free(&t);
  tm_mlp(&t);
  t.inits[0]->has_data_location = 1;
  t.inits[0]->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  EXPECT(&t, NULL, FL_ENOTSUP, "initializer 'fc0.weight' keeps its data in an external file");
  tm_free(&t);
  tm_mlp(&t);
  Onnx__SparseTensorProto sp = ONNX__SPARSE_TENSOR_PROTO__INIT;
  Onnx__SparseTensorProto *spv[1] = {&sp};
  t.g.n_sparse_initializer = 1;
  t.g.sparse_initializer = spv;
  EXPECT(&t, NULL, FL_ENOTSUP, "sparse initializers");
  tm_free(&t);
  /* duplicate initializers; parameter names too long for a checkpoint */
  tm_mlp(&t);
  t.inits[1]->name = t.inits[0]->name;
  EXPECT(&t, NULL, FL_EINVAL, "initializer 'fc0.weight' is defined twice");
  tm_free(&t);
  tm_mlp(&t);
  char longname[80];
  memset(longname, 'w', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  t.inits[3]->name = longname;
  t.nodes[2]->input[2] = longname;
  EXPECT(&t, NULL, FL_ENOTSUP, "the name is 79 bytes, parameter names may have at most 63");
  tm_free(&t);
}
END_TEST

START_TEST(test_unsupported) {
  static tm t;
  tm_mlp(&t);
  t.nodes[1]->op_type = tm_str(&t, "FancyActivation");
  EXPECT(&t, NULL, FL_ENOTSUP, "model.onnx: node 'relu0' (FancyActivation): op type "
         "'FancyActivation' is not supported; supported: ", "Gemm", "Relu");
  tm_free(&t);
  tm_mlp(&t);
  t.nodes[1]->domain = tm_str(&t, "com.microsoft");
  EXPECT(&t, NULL, FL_ENOTSUP, "node 'relu0' (Relu): domain 'com.microsoft' is not supported");
  tm_free(&t);
  for (int64_t v = 13; v <= 17; v++) { /* every supported opset imports */
    tm_mlp(&t);
    t.opset.version = v;
    EXPECT(&t, NULL, FL_OK, "");
    tm_free(&t);
  }
  for (int64_t v = 11; v <= 18; v += 7) {
    tm_mlp(&t);
    t.opset.version = v;
    char want[64];
    snprintf(want, sizeof want, "model.onnx: opset %lld of the default domain; supported: 13 to 17",
             (long long)v);
    EXPECT(&t, NULL, FL_ENOTSUP, want);
    tm_free(&t);
  }
  tm_mlp(&t);
  t.m.n_opset_import = 0;
  EXPECT(&t, NULL, FL_EINVAL, "imports no opset of the default domain");
  tm_free(&t);
  /* a subgraph attribute (If's branches) */
  tm_mlp(&t);
  Onnx__NodeProto *n = tm_node(&t, "If", "branch", "hr", "z");
  Onnx__AttributeProto *a = tm_attr(&t, n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
  a->g = tm_alloc(&t, sizeof *a->g);
  onnx__graph_proto__init(a->g);
  t.outputs[0]->name = tm_str(&t, "z");
  EXPECT(&t, NULL, FL_ENOTSUP, "node 'branch' (If): attribute 'then_branch' holds a subgraph");
  tm_free(&t);
  /* the engine's internal attribute is not ONNX */
  tm_mlp(&t);
  Onnx__AttributeProto *s = tm_attr(&t, t.nodes[0], "flotilla_act",
                                    ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  s->has_s = 1;
  s->s.data = (uint8_t *)tm_str(&t, "relu");
  s->s.len = 4;
  EXPECT(&t, NULL, FL_ENOTSUP, "node 'fc0' (Gemm): attribute 'flotilla_act' is not an ONNX");
  tm_free(&t);
  /* a Constant holding strings */
  tm_mlp(&t);
  n = tm_node(&t, "Constant", "names", NULL, "k");
  tm_attr(&t, n, "value_strings", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  t.nodes[2]->input[2] = tm_str(&t, "k");
  EXPECT(&t, NULL, FL_ENOTSUP, "node 'names' (Constant): attribute 'value_strings' is not "
         "supported");
  tm_free(&t);
}
END_TEST

/* The model t describes imports, and compiling it fails with every
 * fragment in the log: an attribute value, a dtype or a data-dependent
 * shape that only binding finds, named by node, op type, what is
 * supported, and the file. */
static void expect_compile_refused(const tm *t, const char *const *frags) {
  size_t len;
  uint8_t *b = tm_pack(t, &len);
  fl_graph *g = NULL;
  capture_begin();
  fl_status st = fl_onnx_load_mem(b, len, "model.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g);
  void *h = (void *)1;
  fl_status cst = FL_OK;
  if (st == FL_OK) {
    fl_graph_options o = {.max_batch = 8, .seed = 1, .device = -1};
    cst = fl_graph_model_create(g, &o, &h); /* takes g */
  }
  const char *log = capture_end();
  free(b);
  ck_assert_msg(st == FL_OK, "import failed (%d):\n%s", st, log);
  ck_assert_msg(cst != FL_OK, "compiled; log:\n%s", log);
  ck_assert_ptr_null(h);
  for (int i = 0; frags[i]; i++)
    ck_assert_msg(strstr(log, frags[i]), "log lacks \"%s\":\n%s", frags[i], log);
  ck_assert_msg(strstr(log, "graph model.onnx: not compiled"), "log does not name the file:\n%s",
                log);
}
#define EXPECT_COMPILE(t, ...) expect_compile_refused((t), (const char *const[]){__VA_ARGS__, NULL})

START_TEST(test_refused_at_compile) {
  static tm t;
  /* a dtype: Cast to double */
  tm_mlp(&t);
  Onnx__NodeProto *n = tm_node(&t, "Cast", "to_double", "x", "xd");
  tm_attr_i(&t, n, "to", 11);
  t.nodes[0]->input[0] = tm_str(&t, "xd");
  EXPECT_COMPILE(&t, "node to_double (Cast): cast to element type 11 is not supported (1 = float, "
                 "7 = int64, 9 = bool)");
  tm_free(&t);
  /* an attribute value: Gemm's transA must be 0 or 1 */
  tm_mlp(&t);
  tm_attr_i(&t, t.nodes[2], "transA", 2);
  EXPECT_COMPILE(&t, "node fc1 (Gemm)", "transA");
  tm_free(&t);
  /* a shape that depends on the data: Reshape(hr, [-1, int(sum(x))]) */
  tm_mlp(&t);
  static const int64_t m1[1] = {-1}, zero[1] = {0};
  t.inits[t.g.n_initializer++] = tm_tensor(&t, "m1", 7, 1, (const int64_t[]){1}, m1, 8);
  t.inits[t.g.n_initializer++] = tm_tensor(&t, "ax0", 7, 1, (const int64_t[]){1}, zero, 8);
  n = tm_node(&t, "ReduceSum", "total", "x", "s");
  tm_attr_i(&t, n, "keepdims", 0);
  n = tm_node(&t, "Cast", "to_int", "s", "si");
  tm_attr_i(&t, n, "to", 7);
  tm_node(&t, "Unsqueeze", "us", "si,ax0", "su");
  n = tm_node(&t, "Concat", "cc", "m1,su", "shp");
  tm_attr_i(&t, n, "axis", 0);
  tm_node(&t, "Reshape", "dyn_reshape", "hr,shp", "hr2");
  t.nodes[2]->input[0] = tm_str(&t, "hr2");
  EXPECT_COMPILE(&t, "node dyn_reshape (Reshape): input 1 (shape, shp) must be computable when "
                 "shapes are bound (a constant or a shape expression), not data-dependent");
  tm_free(&t);
  /* dims whose product overflows, computed at bind: Expand(x, [2^62, 2^62, 1, 1]) */
  tm_mlp(&t);
  static const int64_t huge[4] = {(int64_t)1 << 62, (int64_t)1 << 62, 1, 1};
  t.inits[t.g.n_initializer++] = tm_tensor(&t, "huge", 7, 1, (const int64_t[]){4}, huge, 32);
  tm_node(&t, "Expand", "blow_up", "x,huge", "e");
  tm_node(&t, "ReduceSum", "total", "e", "s");
  tm_node(&t, "Add", "plus", "hr,s", "hr2");
  t.nodes[2]->input[0] = tm_str(&t, "hr2");
  EXPECT_COMPILE(&t, "node blow_up (Expand): output e of over 2^40 elements is too large");
  tm_free(&t);
  /* an attribute no op takes is refused at import already */
  tm_mlp(&t);
  tm_attr_i(&t, t.nodes[1], "weird", 3);
  EXPECT(&t, NULL, FL_EINVAL, "graph model.onnx: node relu0 (Relu): attribute weird is not "
         "supported (it takes: none)");
  tm_free(&t);
}
END_TEST

START_TEST(test_inputs_outputs) {
  static tm t;
  /* more data inputs are declared beside the first, in file order, with
   * their element types: int64, int32 and bool as int64, float16 as float */
  tm_mlp(&t);
  static const int32_t elems[4] = {7, 6, 9, 10};
  for (int k = 0; k < 4; k++) {
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", k + 2);
    t.inputs[t.g.n_input++] = tm_vi(&t, nm, elems[k], 2, (const int64_t[]){-1, 3}, "N");
  }
  EXPECT(&t, NULL, FL_OK, "");
  {
    size_t len;
    uint8_t *b = tm_pack(&t, &len);
    fl_graph *g;
    ck_assert_int_eq(fl_onnx_load_mem(b, len, "m.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g), FL_OK);
    free(b);
    static const char *const names[] = {"x", "x2", "x3", "x4", "x5"};
    static const fl_gdtype want[] = {FL_G_F32, FL_G_I64, FL_G_I64, FL_G_I64, FL_G_F32};
    for (int k = 0; k < 5; k++) {
      fl_gtensor_info ti;
      ck_assert_int_eq(fl_graph_tensor_info(g, fl_graph_find(g, names[k]), &ti), FL_OK);
      ck_assert_int_eq(ti.kind, FL_GT_INPUT);
      ck_assert_int_eq(ti.dtype, want[k]);
    }
    fl_graph_free(g);
  }
  tm_free(&t);
  /* no data input */
  tm_mlp(&t);
  t.inputs[0]->name = tm_str(&t, "fc0.bias");
  EXPECT(&t, NULL, FL_EINVAL, "the graph has no data input");
  tm_free(&t);
  /* a symbolic dim other than the batch */
  tm_mlp(&t);
  t.inputs[0] = tm_vi(&t, "x", 1, 2, (const int64_t[]){-1, -1}, "features");
  EXPECT(&t, NULL, FL_ENOTSUP, "graph input 'x': dim 1 is symbolic ('features'); only the "
         "batch dim (0) may be symbolic");
  tm_free(&t);
  /* an integer input; a sequence input; no shape */
  tm_mlp(&t);
  t.inputs[0] = tm_vi(&t, "x", 11, 2, (const int64_t[]){-1, 4}, "N");
  EXPECT(&t, NULL, FL_ENOTSUP, "graph input 'x' has dtype double; a data input must be float, "
         "float16, int64, int32 or bool");
  tm_free(&t);
  tm_mlp(&t);
  t.inputs[0]->type->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  t.inputs[0]->type->sequence_type = tm_alloc(&t, sizeof(Onnx__TypeProto__Sequence));
  onnx__type_proto__sequence__init(t.inputs[0]->type->sequence_type);
  EXPECT(&t, NULL, FL_ENOTSUP, "graph input 'x' is a sequence, map, optional or sparse value");
  tm_free(&t);
  tm_mlp(&t);
  t.inputs[0]->type->tensor_type->shape = NULL;
  EXPECT(&t, NULL, FL_ENOTSUP, "graph input 'x' has no shape");
  tm_free(&t);
  /* per-sample dims whose product overflows */
  tm_mlp(&t);
  t.inputs[0] = tm_vi(&t, "x", 1, 3, (const int64_t[]){-1, (int64_t)1 << 20, (int64_t)1 << 20}, "N");
  EXPECT(&t, NULL, FL_EINVAL, "graph input 'x': dim 2 is 1048576: a sample must hold between 1 "
         "and 2^30 elements");
  tm_free(&t);
  /* two outputs: one must be named, and must exist */
  tm_mlp(&t);
  tm_output(&t, "hr");
  EXPECT(&t, NULL, FL_EINVAL, "the graph has 2 outputs ('logits', 'hr'); name the one the loss "
         "reads with model.output");
  EXPECT(&t, "hr", FL_OK, "");
  EXPECT(&t, "nope", FL_EINVAL, "output 'nope' is not computed by any node");
  EXPECT(&t, "fc0.bias", FL_EINVAL, "output 'fc0.bias' is not computed by any node");
  tm_free(&t);
  /* an output of another dtype */
  tm_mlp(&t);
  t.outputs[0]->type->tensor_type->elem_type = 7;
  EXPECT(&t, NULL, FL_ENOTSUP, "output 'logits' has dtype int64; the loss needs float");
  tm_free(&t);
}
END_TEST

/* Deep nesting: a TypeProto in a TypeProto (sequence of sequence ...), a
 * few bytes per level, would recurse protobuf-c's unpack off the stack. */
START_TEST(test_deep_nesting) {
  const size_t levels = 200000;
  const size_t cap = 2 * levels * 6 + 64;
  uint8_t *a = malloc(cap);
  uint8_t *end = a + cap, *p = end;
  /* written back to front: each level prefixes its tag and the length of
   * everything after it.  Innermost an empty TypeProto; then alternately
   * Sequence.elem_type (1) and TypeProto.sequence_type (4); then
   * ValueInfo.type (2), GraphProto.input (11), ModelProto.graph (7). */
  for (size_t i = 0; i < 2 * levels + 3; i++) {
    uint8_t tag;
    if (i < 2 * levels) tag = (i % 2 == 0) ? (1 << 3 | 2) : (4 << 3 | 2);
    else tag = (const uint8_t[]){2 << 3 | 2, 11 << 3 | 2, 7 << 3 | 2}[i - 2 * levels];
    uint8_t var[10];
    size_t nv = 0, v = (size_t)(end - p);
    do {
      var[nv++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
      v >>= 7;
    } while (v);
    p -= nv;
    memcpy(p, var, nv);
    *--p = tag;
  }
  const size_t len = (size_t)(end - p);
  memmove(a, p, len);
  fl_graph *g;
  capture_begin();
  fl_status st = fl_onnx_load_mem(a, len, "deep.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g);
  const char *log = capture_end();
  ck_assert_int_eq(st, FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "deep.onnx: not an ONNX model: messages nest deeper than 64"));
  free(a);
}
END_TEST

/* Bytes that are no protobuf at all, and a protobuf that is no model. */
START_TEST(test_garbage) {
  static const char text[] = "ir_version: 8\ngraph { node { op_type: \"Relu\" } }\n";
  fl_graph *g;
  capture_begin();
  fl_status st = fl_onnx_load_mem(text, sizeof text - 1, "text.onnx", NULL,
                                  FL_GLOSS_SOFTMAX_XENT, &g);
  const char *log = capture_end();
  ck_assert_int_eq(st, FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "text.onnx: not an ONNX model"));
  uint64_t x = 88172645463325252ull;
  uint8_t buf[512];
  fl_log_level old = fl_log_get_level();
  fl_log_set_level(FL_LOG_OFF);
  for (int r = 0; r < 2000; r++) {
    size_t n = 1 + (size_t)(r % (int)sizeof buf);
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[i] = (uint8_t)x;
    }
    g = (fl_graph *)1;
    ck_assert_int_ne(fl_onnx_load_mem(buf, n, "rnd.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g), FL_OK);
    ck_assert_ptr_null(g);
  }
  fl_log_set_level(old);
  capture_begin();
  st = fl_onnx_load_mem("", 0, "empty.onnx", NULL, FL_GLOSS_SOFTMAX_XENT, &g);
  log = capture_end();
  ck_assert_int_eq(st, FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "empty.onnx: the model imports no opset"));
}
END_TEST

START_TEST(test_loss_names) {
  ck_assert_str_eq(fl_onnx_loss_name(FL_GLOSS_SOFTMAX_XENT), "softmax_cross_entropy");
  ck_assert_str_eq(fl_onnx_loss_name(FL_GLOSS_MSE), "mse");
  ck_assert_str_eq(fl_onnx_loss_name(FL_GLOSS_BCE_LOGITS), "bce_with_logits");
  ck_assert_str_eq(fl_onnx_loss_name((fl_gloss)9), "?");
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("import");
  tcase_add_test(tc, test_mlp_imports);
  tcase_add_test(tc, test_kinds_and_pruning);
  tcase_add_test(tc, test_bool_constants);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_cycle_and_missing);
  tcase_add_test(tc, test_bad_tensors);
  tcase_add_test(tc, test_unsupported);
  tcase_add_test(tc, test_refused_at_compile);
  tcase_add_test(tc, test_inputs_outputs);
  tcase_add_test(tc, test_deep_nesting);
  tcase_add_test(tc, test_garbage);
  tcase_add_test(tc, test_loss_names);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
