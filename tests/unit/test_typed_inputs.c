/* test_typed_inputs.c - typed, named inputs and labels of any shape:
 * the engine with an int64 input set per step (Gather of token ids, a
 * 0/1 mask cast to float) and per-token labels with ignore_index (loss
 * against a reference computed here, parameter gradients against finite
 * differences, refusals of a wrong feed); the data layer (several .npy
 * inputs loaded, converted per dtype and shuffled together, mismatched
 * counts, the uint8-into-Cast refusal); the job keys data.inputs,
 * data.test_inputs and model.ignore_index. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_config.h"
#include "fl_data.h"
#include "fl_graph.h"
#include "fl_log.h"
#include "gradcheck.h"

#define NB 3 /* samples */
#define L 4  /* tokens per sample */
#define V 7  /* vocabulary */
#define D 3  /* embedding width */
#define C 6  /* classes */
#define IGN (-100)

/* out[b, l, :] = (emb[ids[b, l]] * float(mask[b, l])) W + bias: a token
 * classifier over an int64 id input and an int64 0/1 mask input. */
static void *build_token_model(uint64_t seed) {
  fl_graph *g;
  uint64_t s = seed;
  float emb[V * D], w[D * C], b[C];
  gc_fill(emb, V * D, &s, -1.0, 1.0);
  gc_fill(w, D * C, &s, -1.0, 1.0);
  gc_fill(b, C, &s, -0.3, 0.3);
  ck_assert_int_eq(fl_graph_new("tokens", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, L}, ed[2] = {V, D}, wd[2] = {D, C}, bd[1] = {C}, ad[1] = {1};
  const int64_t axes[1] = {2};
  int ids, mask, E, W, Bi, ax, e, mf, mu, em, mm, out;
  ck_assert_int_eq(fl_graph_input_typed(g, "ids", FL_G_I64, 2, xd, &ids), FL_OK);
  ck_assert_int_eq(fl_graph_input_typed(g, "mask", FL_G_I64, 2, xd, &mask), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "emb.weight", 2, ed, emb, 1, &E), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "fc.weight", 2, wd, w, 1, &W), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "fc.bias", 1, bd, b, 1, &Bi), FL_OK);
  ck_assert_int_eq(fl_graph_const(g, "axes", FL_G_I64, 1, ad, axes, &ax), FL_OK);
  const fl_gattr to_float = {.name = "to", .kind = FL_GA_INT, .i = FL_G_F32};
  ck_assert_int_eq(fl_graph_node(g, "gather", "Gather", (int[]){E, ids}, 2,
                                 (const char *[]){"e"}, 1, NULL, 0, &e), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "cast", "Cast", (int[]){mask}, 1, (const char *[]){"mf"}, 1,
                                 &to_float, 1, &mf), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "unsq", "Unsqueeze", (int[]){mf, ax}, 2,
                                 (const char *[]){"mu"}, 1, NULL, 0, &mu), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "mul", "Mul", (int[]){e, mu}, 2, (const char *[]){"em"}, 1,
                                 NULL, 0, &em), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "mm", "MatMul", (int[]){em, W}, 2, (const char *[]){"mm"}, 1,
                                 NULL, 0, &mm), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "add", "Add", (int[]){mm, Bi}, 2, (const char *[]){"out"}, 1,
                                 NULL, 0, &out), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, out, FL_GLOSS_SOFTMAX_XENT), FL_OK);
  fl_graph_options opt = {.max_batch = NB, .seed = 1, .device = -1};
  void *h;
  ck_assert_int_eq(fl_graph_model_create(g, &opt, &h), FL_OK);
  return h;
}

static fl_param *param(void *h, const char *name) {
  for (size_t i = 0; i < fl_graph_model_ops.num_params(h); i++) {
    fl_param *p = fl_graph_model_ops.param(h, i);
    if (!strcmp(p->name, name)) return p;
  }
  ck_abort_msg("no parameter %s", name);
  return NULL;
}

/* The reference: mean over non-ignored tokens of the cross-entropy. */
static double ref_loss(void *h, const int64_t *ids, const int64_t *mask, const int32_t *y,
                       size_t *count) {
  const float *E = param(h, "emb.weight")->value, *W = param(h, "fc.weight")->value,
              *b = param(h, "fc.bias")->value;
  double sum = 0.0;
  *count = 0;
  for (int r = 0; r < NB * L; r++) {
    if (y[r] == IGN) continue;
    double z[C], mx = -1e300, se = 0.0;
    for (int c = 0; c < C; c++) {
      z[c] = b[c];
      for (int d = 0; d < D; d++)
        z[c] += (double)E[ids[r] * D + d] * (double)mask[r] * W[d * C + c];
      if (z[c] > mx) mx = z[c];
    }
    for (int c = 0; c < C; c++) se += exp(z[c] - mx);
    sum += mx + log(se) - z[y[r]];
    (*count)++;
  }
  return sum / (double)*count;
}

typedef struct fd_ctx {
  void *h;
  fl_model_feed f;
} fd_ctx;

static double eval_loss(void *p) {
  fd_ctx *c = p;
  fl_model_result r;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(c->h, &c->f, NB, &r), FL_OK);
  return r.loss_sum / (double)r.count;
}

START_TEST(int64_input_per_step_and_token_loss) {
  void *h = build_token_model(11);
  int64_t ids[NB * L] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 1, 2, 6};
  int64_t mask[NB * L] = {1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1};
  int32_t y[NB * L] = {0, 5, IGN, 1, 2, 3, IGN, IGN, 4, 0, 1, 2};
  fl_model_input in[2] = {{.name = "mask", .dtype = FL_MODEL_I64, .data = mask},
                          {.name = "ids", .dtype = FL_MODEL_I64, .data = ids}};
  fd_ctx c = {.h = h, .f = {.inputs = in, .n_inputs = 2, .y = y, .ylen = L,
                            .ignore_index = IGN}};
  size_t count;
  fl_model_result r;
  for (int pass = 0; pass < 2; pass++) { /* new ids each step: never known at bind */
    ck_assert_int_eq(fl_graph_model_ops.train_feed(h, &c.f, NB, 1.0f, NULL, NULL, &r), FL_OK);
    const double ref = ref_loss(h, ids, mask, y, &count);
    ck_assert_uint_eq(r.count, count);
    ck_assert_msg(fabs(r.loss_sum / (double)r.count - ref) < 1e-5, "loss %g, reference %g",
                  r.loss_sum / (double)r.count, ref);
    for (int i = 0; i < NB * L; i++) ids[i] = (ids[i] * 3 + 2) % V;
  }
  /* gradients of every parameter against finite differences of eval */
  static const char *const names[] = {"emb.weight", "fc.weight", "fc.bias"};
  ck_assert_int_eq(fl_graph_model_ops.train_feed(h, &c.f, NB, 1.0f, NULL, NULL, &r), FL_OK);
  for (int k = 0; k < 3; k++) {
    fl_param *p = param(h, names[k]);
    float *an = malloc(p->n * sizeof *an);
    memcpy(an, p->grad, p->n * sizeof *an);
    const gc_result g = gc_check(p->value, p->n, an, eval_loss, &c, 1e-3, 1e-4, 2e-2);
    ck_assert_msg(g.worst <= 1.0 && g.num_norm > 0, "%s: element %zu analytic %g numeric %g",
                  names[k], g.worst_i, g.worst_a, g.worst_n);
    free(an);
  }
  fl_graph_model_ops.destroy(h);
}
END_TEST

START_TEST(feed_refusals) {
  void *h = build_token_model(3);
  int64_t ids[NB * L] = {0}, mask[NB * L] = {0};
  float fmask[NB * L] = {0};
  int32_t y[NB * L] = {0};
  fl_model_result r;
  fl_model_input in[3] = {{.name = "ids", .dtype = FL_MODEL_I64, .data = ids},
                          {.name = "mask", .dtype = FL_MODEL_I64, .data = mask},
                          {.name = "extra", .dtype = FL_MODEL_I64, .data = mask}};
  fl_model_feed f = {.inputs = in, .n_inputs = 1, .y = y, .ylen = L, .ignore_index = IGN};
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL); /* mask missing */
  f.n_inputs = 3;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL); /* extra unknown */
  f.n_inputs = 2;
  in[1] = (fl_model_input){.name = "mask", .dtype = FL_MODEL_F32, .data = fmask};
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL); /* wrong dtype */
  in[1] = (fl_model_input){.name = "mask", .dtype = FL_MODEL_I64, .data = mask};
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_OK);
  y[5] = C; /* out of range and not ignore_index */
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL);
  y[5] = 0;
  f.ylen = 1; /* [N] labels against an [N, L, C] output */
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_OK); /* the whole output */
  y[0] = IGN;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL);
  ids[0] = V; /* an id past the table */
  f.ylen = L;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL);
  /* the one-float-input calls name the inputs to feed */
  float x[NB * L] = {0};
  ck_assert_int_eq(fl_graph_model_ops.eval(h, x, y, NB, &r), FL_EINVAL);
  fl_graph_model_ops.destroy(h);
}
END_TEST


/* ------------------------------------------------------------ data layer */

#define N 10
#define TL 3

static char g_dir[256];

static const char *path_of(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

/* Sample i of every file encodes i: ids i*10+l (int32), mask (i+l)%2
 * (bool), half i+0.5 (float16), bytes i (uint8), labels l or ignored. */
static void write_files(size_t n_mask) {
  int32_t ids[N * TL];
  uint8_t mask[N * TL], u8[N];
  uint16_t half[N];
  int64_t y[N * TL];
  for (int i = 0; i < N; i++) {
    for (int l = 0; l < TL; l++) {
      ids[i * TL + l] = i * 10 + l;
      mask[i * TL + l] = (uint8_t)((i + l) % 2);
      y[i * TL + l] = (i + l) % 4 == 3 ? IGN : l;
    }
    u8[i] = (uint8_t)i;
    const float v = (float)i + 0.5f; /* exact in float16: 1.m x 2^e */
    int e = 0;
    const float m = frexpf(v, &e); /* v = m 2^e, m in [0.5, 1) */
    half[i] = (uint16_t)(((e - 1 + 15) << 10) | ((uint16_t)((m * 2.0f - 1.0f) * 1024.0f)));
  }
  const int64_t s2[2] = {N, TL}, sm[2] = {(int64_t)n_mask, TL}, s1[1] = {N};
  ck_assert_int_eq(fl_npy_save(path_of("ids.npy"), FL_NPY_I32, 2, s2, ids), FL_OK);
  ck_assert_int_eq(fl_npy_save(path_of("mask.npy"), FL_NPY_BOOL, 2, sm, mask), FL_OK);
  ck_assert_int_eq(fl_npy_save(path_of("half.npy"), FL_NPY_F16, 1, s1, half), FL_OK);
  ck_assert_int_eq(fl_npy_save(path_of("u8.npy"), FL_NPY_U8, 1, s1, u8), FL_OK);
  ck_assert_int_eq(fl_npy_save(path_of("y.npy"), FL_NPY_I64, 2, s2, y), FL_OK);
}

static fl_status load(fl_dataset *d) {
  fl_npy_inputs in = {.n = 4, .names = {"ids", "mask", "half", "u8"},
                      .paths = {path_of("ids.npy"), path_of("mask.npy"), path_of("half.npy"),
                                path_of("u8.npy")},
                      .y_path = path_of("y.npy"), .num_classes = TL, .ignore_index = IGN,
                      .scale = 0.25f};
  return fl_npy_load_inputs(&in, d);
}

static void setup_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_typed_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void remove_dir(void) {
  static const char *const f[] = {"ids.npy", "mask.npy", "half.npy", "u8.npy", "y.npy", "f.npy"};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) unlink(path_of(f[i]));
  rmdir(g_dir);
}

START_TEST(inputs_shuffled_together_every_dtype) {
  setup_dir();
  write_files(N);
  fl_dataset d;
  ck_assert_int_eq(load(&d), FL_OK);
  ck_assert_uint_eq(d.n, N);
  ck_assert_uint_eq(d.ylen, TL);
  ck_assert_int_eq(fl_dataset_bind_input(&d, 0, FL_DATA_I64, 0), FL_OK);
  ck_assert_int_eq(fl_dataset_bind_input(&d, 1, FL_DATA_I64, 0), FL_OK);
  ck_assert_int_eq(fl_dataset_bind_input(&d, 2, FL_DATA_F32, 0), FL_OK);
  ck_assert_int_eq(fl_dataset_bind_input(&d, 3, FL_DATA_F32, 0), FL_OK);
  fl_shard_spec spec = {.n = N, .batch_size = 4, .rank = 0, .world_size = 1, .seed = 5,
                        .shuffle = 1};
  fl_loader *l;
  ck_assert_int_eq(fl_loader_create(&d, NULL, &spec, 2, &l), FL_OK);
  ck_assert_int_eq(fl_loader_start(l, 0, 0), FL_OK);
  int moved = 0;
  for (size_t b = 0; b < fl_loader_batches(l); b++) {
    fl_batch bt;
    ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
    ck_assert_uint_eq(bt.n_inputs, 4);
    ck_assert_uint_eq(bt.ylen, TL);
    const int64_t *ids = bt.inputs[0], *mask = bt.inputs[1];
    const float *half = bt.inputs[2], *u8 = bt.inputs[3];
    for (size_t i = 0; i < bt.size; i++) {
      const int64_t s = ids[i * TL] / 10;
      moved |= s != (int64_t)(b * 4 + i);
      for (int k = 0; k < TL; k++) {
        ck_assert_int_eq(ids[i * TL + k], s * 10 + k);
        ck_assert_int_eq(mask[i * TL + k], (s + k) % 2);
        ck_assert_int_eq(bt.y[i * TL + k], (s + k) % 4 == 3 ? IGN : k);
      }
      ck_assert_float_eq(half[i], (float)s + 0.5f);
      ck_assert_float_eq(u8[i], (float)s * 0.25f);
    }
  }
  ck_assert_msg(moved, "the shuffle kept the order");
  fl_loader_destroy(l);
  /* the conversions refused */
  ck_assert_int_eq(fl_dataset_bind_input(&d, 2, FL_DATA_I64, 0), FL_EINVAL); /* float16 ids */
  ck_assert_int_eq(fl_dataset_bind_input(&d, 0, FL_DATA_F32, 0), FL_EINVAL); /* int into float */
  ck_assert_int_eq(fl_dataset_bind_input(&d, 1, FL_DATA_F32, 0), FL_EINVAL); /* bool into float */
  ck_assert_int_eq(fl_dataset_bind_input(&d, 3, FL_DATA_F32, 1), FL_EINVAL); /* uint8 into Cast */
  ck_assert_int_eq(fl_dataset_bind_input(&d, 3, FL_DATA_I64, 0), FL_OK);     /* uint8 ids */
  int64_t row[1];
  fl_dataset_input_rows(&d, 3, 7, 1, row);
  ck_assert_int_eq(row[0], 7); /* unscaled */
  fl_dataset_free(&d);
  remove_dir();
}
END_TEST

START_TEST(inputs_refused) {
  setup_dir();
  fl_dataset d;
  write_files(N - 1); /* mask has one sample less */
  ck_assert_int_eq(load(&d), FL_EINVAL);
  write_files(N);
  const float f[N] = {0};
  ck_assert_int_eq(fl_npy_save(path_of("f.npy"), FL_NPY_F32, 1, (const int64_t[]){N}, f), FL_OK);
  fl_npy_inputs in = {.n = 2, .names = {"ids", "ids"},
                      .paths = {path_of("ids.npy"), path_of("ids.npy")},
                      .y_path = path_of("y.npy"), .ignore_index = IGN, .scale = 1.0f};
  ck_assert_int_eq(fl_npy_load_inputs(&in, &d), FL_EINVAL); /* a name twice */
  in.names[1] = "missing";
  in.paths[1] = path_of("nonexistent.npy");
  ck_assert_int_eq(fl_npy_load_inputs(&in, &d), FL_ENOTFOUND);
  in.n = 1;
  in.num_classes = 2; /* label 2 at position 2 */
  ck_assert_int_eq(fl_npy_load_inputs(&in, &d), FL_EINVAL);
  in.num_classes = 3;
  in.y_path = path_of("f.npy"); /* float targets of one value per sample */
  ck_assert_int_eq(fl_npy_load_inputs(&in, &d), FL_OK);
  ck_assert_ptr_nonnull(d.t);
  ck_assert_uint_eq(d.tdim, 1);
  fl_dataset_free(&d);
  remove_dir();
}
END_TEST

/* ---------------------------------------------------------------- config */

#define JOB_HEAD "model: {kind: onnx, path: m.onnx, ignore_index: -1}\ntrain: {eval: true}\n"

START_TEST(config_inputs) {
  static fl_job j, k;
  const char *text = JOB_HEAD "data:\n  format: npy\n  inputs: {ids: a.npy, mask: b.npy}\n"
                     "  train_y: y.npy\n  test_inputs: {mask: tb.npy, ids: ta.npy}\n"
                     "  test_y: ty.npy\n";
  ck_assert_int_eq(fl_job_load_string(text, "j.yaml", &j), FL_OK);
  ck_assert_uint_eq(j.data.n_inputs, 2);
  ck_assert_str_eq(j.data.inputs[0].name, "ids");
  ck_assert_str_eq(j.data.inputs[1].path, "b.npy");
  ck_assert_str_eq(j.data.test_inputs[1].path, "ta.npy");
  ck_assert_int_eq(j.model.ignore_index, -1);
  /* the dump reads back the same */
  char *dump = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&dump, &len);
  ck_assert_int_eq(fl_job_write_yaml(&j, f), FL_OK);
  fclose(f);
  ck_assert_int_eq(fl_job_load_string(dump, "dump.yaml", &k), FL_OK);
  free(dump);
  ck_assert_uint_eq(k.data.n_test_inputs, 2);
  ck_assert_str_eq(k.data.test_inputs[0].name, "mask");
  ck_assert_int_eq(k.model.ignore_index, -1);
  ck_assert_int_eq(fl_job_load_string("model: {kind: onnx, path: m.onnx}\n", "d.yaml", &k), FL_OK);
  ck_assert_int_eq(k.model.ignore_index, -100);
  /* refusals, each naming the key */
  static const struct {
    const char *text, *msg;
  } bad[] = {
      {JOB_HEAD "data: {format: npy, inputs: {ids: a.npy}, train_x: x.npy, train_y: y.npy}\n",
       "data.train_x"},
      {JOB_HEAD "data: {format: npy, inputs: {ids: a.npy, ids: b.npy}, train_y: y.npy}\n",
       "duplicate key"},
      {JOB_HEAD "data: {format: npy, inputs: {ids: a.npy}, train_y: y.npy, test_y: t.npy,\n"
                "       test_inputs: {idz: t.npy}}\n", "data.test_inputs"},
      {JOB_HEAD "data: {format: npy, inputs: {ids: a.npy}, train_y: y.npy, test_y: t.npy}\n",
       "data.test_inputs"},
      {JOB_HEAD "data: {format: npy, inputs: [a.npy], train_y: y.npy}\n", "expected a mapping"},
      {"model: {kind: mlp}\ndata: {format: npy, inputs: {x: a.npy}, train_y: y.npy}\n",
       "onnx"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(fl_job_load_string(bad[i].text, "bad.yaml", &k), FL_EINVAL);
    ck_assert_msg(strstr(fl_job_last_error(), bad[i].msg), "case %zu: %s", i,
                  fl_job_last_error());
  }
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF);
  Suite *s = suite_create("typed_inputs");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, int64_input_per_step_and_token_loss);
  tcase_add_test(tc, feed_refusals);
  suite_add_tcase(s, tc);
  TCase *td = tcase_create("data");
  tcase_add_test(td, config_inputs);
  tcase_add_test(td, inputs_shuffled_together_every_dtype);
  tcase_add_test(td, inputs_refused);
  suite_add_tcase(s, td);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  const int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
