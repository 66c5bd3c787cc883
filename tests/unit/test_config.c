/* test_config.c - the job file: every section, defaults, normalisation, the
 * dump/reload round trip, the error messages (file:line:column and key),
 * the effective optimizer, and every example job under deploy/examples. */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_config.h"
#include "fl_log.h"

static const char *k_full =
    "model:\n"
    "  kind: cnn\n"
    "  input_shape: [3, 32, 32]\n"
    "  num_classes: 100\n"
    "  hidden: [512, 64]\n"
    "  activation: tanh\n"
    "  conv_channels: [16, 48]\n"
    "  conv_kernel: 3\n"
    "  fc_hidden: 128\n"
    "  norm: gn\n"
    "  gn_groups: 4\n"
    "  bn_momentum: 0.2\n"
    "  bn_epsilon: 0.001\n"
    "  plugin_path: /opt/p.so\n"
    "  plugin_args: \"a=1 b='2'\"\n"
    "  ctr: {embedding_dim: 16, sparse_slots: 20, dense_features: 5, hash_buckets: 4096}\n"
    "data:\n"
    "  format: synthetic\n"
    "  train_images: /a\n"
    "  train_labels: /b\n"
    "  test_images: /c\n"
    "  test_labels: /d\n"
    "  train_path: /e\n"
    "  test_path: /f\n"
    "  synthetic: {kind: image, train_samples: 1000, test_samples: 100, seed: 42}\n"
    "  limit_train: 5000\n"
    "  limit_test: 700\n"
    "  prefetch: 2\n"
    "  shuffle: false\n"
    "optimizer:\n"
    "  name: adam\n"
    "  lr: 0.002\n"
    "  momentum: 0.8\n"
    "  nesterov: false\n"
    "  beta1: 0.85\n"
    "  beta2: 0.99\n"
    "  weight_decay: 0\n"
    "  initial_accumulator: 0.1\n"
    "lr_schedule:\n"
    "  kind: polynomial\n"
    "  warmup_steps: 100\n"
    "  warmup_start_lr: 0.0001\n"
    "  end_lr: 0.00001\n"
    "  power: 2.0\n"
    "  decay_steps: 5000\n"
    "train:\n"
    "  epochs: 3\n"
    "  batch_size: 32\n"
    "  seed: 7\n"
    "  eval: true\n"
    "  eval_batch_size: 250\n"
    "  log_interval: 5\n"
    "  checkpoint_dir: /tmp/ck\n"
    "  checkpoint_interval: 50\n"
    "  checkpoint_keep: 2\n"
    "  num_threads: 2\n"
    "  max_steps: 999\n"
    "cluster:\n"
    "  mode: collective\n"
    "  collective_timeout_s: 15.5\n"
    "  heartbeat_timeout_s: 3\n"
    "  rpc_timeout_s: 4\n"
    "  token_file: /etc/flotilla/token\n"
    "  tls: {cert: /c.pem, key: /k.pem, ca: /ca.pem, mutual: true}\n"
    "  metrics_addr: 127.0.0.1:9100\n"
    "pserver:\n"
    "  optimizer: {name: adamw, lr: 0.01, weight_decay: 0}\n"
    "  dense_block_size: 1024\n"
    "  sparse:\n"
    "    optimizer: {name: sgd, lr: 0.5}\n"
    "    init_range: 0.05\n"
    "    max_rows: 12345\n"
    "    pipeline: false\n"
    "  checkpoint_dir: /tmp/ps\n"
    "  checkpoint_interval_steps: 100\n"
    "  checkpoint_interval_s: 60\n"
    "strategy:\n"
    "  a_sync: true\n"
    "  a_sync_configs: {k_steps: 8}\n"
    "  gradient_merge: true\n"
    "  gradient_merge_configs: {k_steps: 4, avg: false}\n"
    "  lamb: true\n"
    "  lamb_configs:\n"
    "    lamb_weight_decay: 0.02\n"
    "    exclude_from_weight_decay: [layer_norm, .b_0]\n"
    "  amp: true\n"
    "  amp_configs:\n"
    "    init_loss_scaling: 128\n"
    "    incr_every_n_steps: 500\n"
    "    decr_every_n_nan_or_inf: 3\n"
    "    incr_ratio: 3.0\n"
    "    decr_ratio: 0.5\n"
    "    use_dynamic_loss_scaling: false\n"
    "    custom_white_list: [matmul]\n"
    "    custom_black_list: [softmax, exp]\n"
    "    dtype: bfloat16\n"
    "  recompute: true\n"
    "  recompute_configs: {checkpoints: [fc0, fc1]}\n"
    "  fuse_all_reduce_ops: false\n"
    "  fuse_grad_size_in_MB: 16\n"
    "  fuse_grad_size_in_TFLOPS: 20\n"
    "  use_hierarchical_allreduce: true\n"
    "  hierarchical_allreduce_inter_nranks: 2\n"
    "  nccl_comm_num: 2\n"
    "  sync_nccl_allreduce: false\n"
    "  sync_batch_norm: true\n"
    "  grad_compression: bf16\n"
    "  dgc: false\n"
    "  pipeline_configs: {}\n"
    "  cudnn_exhaustive_search: True\n"
    "  build_strategy: {fuse_bn_act_ops: false}\n"
    "  execution_strategy: {num_threads: 1}\n";

START_TEST(test_defaults) {
  fl_job a, b;
  fl_job_defaults(&a);
  ck_assert_str_eq(a.model.kind, "mlp");
  ck_assert_uint_eq(a.model.n_hidden, 3);
  ck_assert_uint_eq(a.model.hidden[0], 256);
  ck_assert_uint_eq(a.model.hidden[2], 100);
  ck_assert_int_eq(a.optimizer.hp.kind, FL_OPTIM_MOMENTUM);
  ck_assert_int_eq(a.strategy.fuse_grad_size_in_MB, 32);
  ck_assert_int_eq(a.strategy.fuse_grad_size_in_TFLOPS, 50);
  ck_assert_float_eq(a.strategy.lamb_configs.lamb_weight_decay, 0.01f);
  ck_assert_float_eq(a.strategy.lars_configs.lars_coeff, 0.001f);
  ck_assert_float_eq(a.strategy.amp_configs.init_loss_scaling, 32768.0f);
  ck_assert_int_eq(a.strategy.amp_configs.incr_every_n_steps, 1000);
  ck_assert_int_eq(a.strategy.amp_configs.decr_every_n_nan_or_inf, 2);
  ck_assert_float_eq(a.strategy.amp_configs.decr_ratio, 0.8f);
  ck_assert_int_eq(a.strategy.gradient_merge_configs.k_steps, 1);
  ck_assert_int_eq(a.strategy.a_sync, 0);
  ck_assert_int_eq(a.pserver.sparse.pipeline, 1);
  ck_assert_int_eq(a.cluster.mode, FL_MODE_LOCAL);
  ck_assert_int_eq(a.train.batch_size, 64);
  ck_assert_int_eq(fl_job_merge_steps(&a), 1);
  /* an empty or section-less file is an error (it would train a default
   * job without a word); a file of empty sections gives the defaults */
  ck_assert_int_eq(fl_job_load_string("", "empty.yaml", &b), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_job_last_error(), "empty.yaml: the job file has no section"));
  ck_assert_int_eq(fl_job_load_string("# only a comment\n", "c.yaml", &b), FL_EINVAL);
  ck_assert_int_eq(fl_job_load_string("{}\n", "m.yaml", &b), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_job_last_error(), "has no section"));
  ck_assert_int_eq(fl_job_load_string("model:\nstrategy:\n", "e.yaml", &b), FL_OK);
  memcpy(b.source, a.source, sizeof a.source);
  ck_assert(memcmp(&a, &b, sizeof a) == 0);
  ck_assert_int_eq(fl_job_validate(&a), FL_OK);
}
END_TEST

START_TEST(test_every_section) {
  fl_job j;
  ck_assert_int_eq(fl_job_load_string(k_full, "full.yaml", &j), FL_OK);
  ck_assert_str_eq(j.source, "full.yaml");
  /* model */
  ck_assert_str_eq(j.model.kind, "cnn");
  ck_assert_int_eq(j.model.input_shape[0], 3);
  ck_assert_int_eq(j.model.input_shape[2], 32);
  ck_assert_int_eq(j.model.num_classes, 100);
  ck_assert_uint_eq(j.model.n_hidden, 2);
  ck_assert_uint_eq(j.model.hidden[1], 64);
  ck_assert_str_eq(j.model.activation, "tanh");
  ck_assert_int_eq(j.model.conv_channels[1], 48);
  ck_assert_int_eq(j.model.conv_kernel, 3);
  ck_assert_uint_eq(j.model.fc_hidden, 128);
  ck_assert_int_eq(j.model.norm, FL_NORM_GN);
  ck_assert_int_eq(j.model.gn_groups, 4);
  ck_assert_float_eq(j.model.bn_momentum, 0.2f);
  ck_assert_float_eq(j.model.bn_epsilon, 0.001f);
  ck_assert_str_eq(j.model.plugin_path, "/opt/p.so");
  ck_assert_str_eq(j.model.plugin_args, "a=1 b='2'");
  ck_assert_int_eq(j.model.ctr.embedding_dim, 16);
  ck_assert_int_eq(j.model.ctr.sparse_slots, 20);
  ck_assert_int_eq(j.model.ctr.dense_features, 5);
  ck_assert_int_eq(j.model.ctr.hash_buckets, 4096);
  /* data */
  ck_assert_int_eq(j.data.format, FL_DATA_SYNTHETIC);
  ck_assert_str_eq(j.data.train_images, "/a");
  ck_assert_str_eq(j.data.test_labels, "/d");
  ck_assert_str_eq(j.data.train_path, "/e");
  ck_assert_str_eq(j.data.test_path, "/f");
  ck_assert_int_eq(j.data.synthetic.kind, FL_SYNTH_IMAGE);
  ck_assert_int_eq(j.data.synthetic.train_samples, 1000);
  ck_assert_int_eq(j.data.synthetic.test_samples, 100);
  ck_assert_uint_eq(j.data.synthetic.seed, 42);
  ck_assert_int_eq(j.data.limit_train, 5000);
  ck_assert_int_eq(j.data.limit_test, 700);
  ck_assert_int_eq(j.data.prefetch, 2);
  ck_assert_int_eq(j.data.shuffle, 0);
  /* optimizer (epsilon left out: LAMB's default) */
  ck_assert_int_eq(j.optimizer.hp.kind, FL_OPTIM_ADAM);
  ck_assert_float_eq(j.optimizer.lr, 0.002f);
  ck_assert_float_eq(j.optimizer.hp.momentum, 0.8f);
  ck_assert_float_eq(j.optimizer.hp.beta1, 0.85f);
  ck_assert_float_eq(j.optimizer.hp.beta2, 0.99f);
  ck_assert_float_eq(j.optimizer.hp.epsilon, 1e-6f);
  ck_assert_float_eq(j.optimizer.hp.initial_accumulator, 0.1f);
  /* lr */
  ck_assert_int_eq(j.lr_schedule.kind, FL_LR_POLYNOMIAL);
  ck_assert_int_eq(j.lr_schedule.warmup_steps, 100);
  ck_assert_float_eq(j.lr_schedule.warmup_start_lr, 0.0001f);
  ck_assert_float_eq(j.lr_schedule.end_lr, 0.00001f);
  ck_assert_float_eq(j.lr_schedule.power, 2.0f);
  ck_assert_int_eq(j.lr_schedule.decay_steps, 5000);
  /* train */
  ck_assert_int_eq(j.train.epochs, 3);
  ck_assert_uint_eq(j.train.batch_size, 32);
  ck_assert_uint_eq(j.train.seed, 7);
  ck_assert_uint_eq(j.train.eval_batch_size, 250);
  ck_assert_int_eq(j.train.log_interval, 5);
  ck_assert_str_eq(j.train.checkpoint_dir, "/tmp/ck");
  ck_assert_int_eq(j.train.checkpoint_interval, 50);
  ck_assert_int_eq(j.train.checkpoint_keep, 2);
  ck_assert_int_eq(j.train.num_threads, 2);
  ck_assert_int_eq(j.train.max_steps, 999);
  /* cluster */
  ck_assert_int_eq(j.cluster.mode, FL_MODE_COLLECTIVE);
  ck_assert_double_eq(j.cluster.collective_timeout_s, 15.5);
  ck_assert_double_eq(j.cluster.heartbeat_timeout_s, 3);
  ck_assert_double_eq(j.cluster.rpc_timeout_s, 4);
  ck_assert_str_eq(j.cluster.token_file, "/etc/flotilla/token");
  ck_assert_str_eq(j.cluster.tls.cert, "/c.pem");
  ck_assert_str_eq(j.cluster.tls.key, "/k.pem");
  ck_assert_str_eq(j.cluster.tls.ca, "/ca.pem");
  ck_assert_int_eq(j.cluster.tls.mutual, 1);
  ck_assert_str_eq(j.cluster.metrics_addr, "127.0.0.1:9100");
  /* pserver */
  ck_assert_int_eq(j.pserver.optimizer.hp.kind, FL_OPTIM_ADAMW);
  ck_assert_float_eq(j.pserver.optimizer.lr, 0.01f);
  ck_assert_float_eq(j.pserver.optimizer.hp.epsilon, 1e-6f);
  ck_assert_uint_eq(j.pserver.dense_block_size, 1024);
  ck_assert_int_eq(j.pserver.sparse.optimizer.hp.kind, FL_OPTIM_SGD);
  ck_assert_float_eq(j.pserver.sparse.optimizer.lr, 0.5f);
  ck_assert_float_eq(j.pserver.sparse.init_range, 0.05f);
  ck_assert_int_eq(j.pserver.sparse.max_rows, 12345);
  ck_assert_int_eq(j.pserver.sparse.pipeline, 0);
  ck_assert_str_eq(j.pserver.checkpoint_dir, "/tmp/ps");
  ck_assert_int_eq(j.pserver.checkpoint_interval_steps, 100);
  ck_assert_double_eq(j.pserver.checkpoint_interval_s, 60);
  /* strategy */
  const fl_strategy *s = &j.strategy;
  ck_assert_int_eq(s->a_sync, 1);
  ck_assert_int_eq(s->a_sync_configs.k_steps, 8);
  ck_assert_int_eq(s->gradient_merge, 1);
  ck_assert_int_eq(s->gradient_merge_configs.k_steps, 4);
  ck_assert_int_eq(s->gradient_merge_configs.avg, 0);
  ck_assert_int_eq(fl_job_merge_steps(&j), 4);
  ck_assert_int_eq(s->lamb, 1);
  ck_assert_float_eq(s->lamb_configs.lamb_weight_decay, 0.02f);
  ck_assert_uint_eq(s->lamb_configs.n_exclude, 2);
  ck_assert_str_eq(s->lamb_configs.exclude_from_weight_decay[1], ".b_0");
  ck_assert_int_eq(s->amp, 1);
  ck_assert_float_eq(s->amp_configs.init_loss_scaling, 128.0f);
  ck_assert_int_eq(s->amp_configs.incr_every_n_steps, 500);
  ck_assert_int_eq(s->amp_configs.decr_every_n_nan_or_inf, 3);
  ck_assert_float_eq(s->amp_configs.incr_ratio, 3.0f);
  ck_assert_float_eq(s->amp_configs.decr_ratio, 0.5f);
  ck_assert_int_eq(s->amp_configs.use_dynamic_loss_scaling, 0);
  ck_assert_uint_eq(s->amp_configs.n_white, 1);
  ck_assert_uint_eq(s->amp_configs.n_black, 2);
  ck_assert_str_eq(s->amp_configs.custom_black_list[1], "exp");
  ck_assert_int_eq(s->amp_configs.dtype, FL_AMP_BFLOAT16);
  ck_assert_int_eq(s->recompute, 1);
  ck_assert_uint_eq(s->recompute_configs.n_checkpoints, 2);
  ck_assert_str_eq(s->recompute_configs.checkpoints[0], "fc0");
  ck_assert_int_eq(s->fuse_all_reduce_ops, 0);
  ck_assert_int_eq(s->fuse_grad_size_in_MB, 16);
  ck_assert_int_eq(s->fuse_grad_size_in_TFLOPS, 20);
  ck_assert_int_eq(s->use_hierarchical_allreduce, 1);
  ck_assert_int_eq(s->hierarchical_allreduce_inter_nranks, 2);
  ck_assert_int_eq(s->nccl_comm_num, 2);
  ck_assert_int_eq(s->sync_nccl_allreduce, 0);
  ck_assert_int_eq(s->sync_batch_norm, 1);
  ck_assert_int_eq(s->grad_compression, FL_COMPRESS_BF16);

  fl_loss_scaler ls = fl_job_loss_scaler(&j);
  ck_assert_float_eq(ls.scale, 128.0f);
  ck_assert_int_eq(ls.dynamic, 0);
  ck_assert_float_eq(ls.decr_ratio, 0.5f);
}
END_TEST

static void round_trip(const fl_job *a) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fl_job_write_yaml(a, f), FL_OK);
  fclose(f);
  fl_job b;
  fl_status st = fl_job_load_string(buf, "dump.yaml", &b);
  if (st != FL_OK) fprintf(stderr, "%s\n%s\n", fl_job_last_error(), buf);
  ck_assert_int_eq(st, FL_OK);
  memcpy(b.source, a->source, sizeof b.source);
  ck_assert_msg(memcmp(a, &b, sizeof b) == 0, "reloaded dump differs:\n%s", buf);
  /* dump -> load -> dump is a fixed point (libyaml's emitter writes it) */
  char *buf2 = NULL;
  size_t len2 = 0;
  f = open_memstream(&buf2, &len2);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fl_job_write_yaml(&b, f), FL_OK);
  fclose(f);
  ck_assert_str_eq(strchr(buf2, '\n'), strchr(buf, '\n')); /* after the "resolved from" line */
  free(buf2);
  free(buf);
}

START_TEST(test_round_trip) {
  fl_job j;
  fl_job_defaults(&j);
  round_trip(&j);
  ck_assert_int_eq(fl_job_load_string(k_full, "full.yaml", &j), FL_OK);
  round_trip(&j);
  /* awkward strings and float values survive */
  ck_assert_int_eq(fl_job_load_string("model: {kind: plugin, plugin_path: \"/p \\\"q\\\"\\\\x.so\","
                                      " plugin_args: \"tab\\there\\nnl\"}\n"
                                      "optimizer: {lr: 0.1, momentum: 0.123456789}\n"
                                      "lr_schedule: {kind: piecewise, boundaries: [10, 20],"
                                      " values: [0.3, 0.1, 1e-7]}\n",
                                      "odd.yaml", &j),
                   FL_OK);
  ck_assert_str_eq(j.model.plugin_path, "/p \"q\"\\x.so");
  ck_assert_str_eq(j.model.plugin_args, "tab\there\nnl");
  round_trip(&j);
}
END_TEST

/* Load text and expect FL_EINVAL with every fragment in the message. */
static void expect_error(const char *text, const char *const *frags) {
  fl_job j;
  fl_log_level old = fl_log_get_level();
  fl_log_set_level(FL_LOG_OFF);
  fl_status st = fl_job_load_string(text, "job.yaml", &j);
  fl_log_set_level(old);
  ck_assert_msg(st == FL_EINVAL, "expected FL_EINVAL for:\n%s\ngot %d", text, st);
  const char *msg = fl_job_last_error();
  for (int i = 0; frags[i]; i++)
    ck_assert_msg(strstr(msg, frags[i]) != NULL, "message \"%s\" lacks \"%s\"", msg, frags[i]);
}
#define EXPECT_ERROR(text, ...) expect_error(text, (const char *const[]){__VA_ARGS__, NULL})

START_TEST(test_errors) {
  /* the example of the documentation, exactly */
  EXPECT_ERROR("train:\n  epochs: 2\nstrategy:\n  gradient_merge: true\n"
               "  gradient_merge_configs:\n    k_steps: 0\n",
               "job.yaml:6:5: strategy.gradient_merge_configs.k_steps: must be >= 1, got 0");
  /* unknown keys, at every depth, with a suggestion */
  EXPECT_ERROR("modle:\n  kind: mlp\n", "job.yaml:1:1: modle: unknown key", "did you mean \"model\"");
  EXPECT_ERROR("strategy:\n  gradient_merge_configs: {k_step: 2}\n", "job.yaml:2:28:",
               "strategy.gradient_merge_configs.k_step: unknown key", "k_steps");
  EXPECT_ERROR("data:\n  synthetic:\n    flavour: x\n", "job.yaml:3:5: data.synthetic.flavour",
               "unknown key");
  /* wrong types */
  EXPECT_ERROR("train:\n  epochs: ten\n", "job.yaml:2:3: train.epochs: expected an integer",
               "\"ten\"");
  EXPECT_ERROR("train:\n  epochs: 1.5\n", "job.yaml:2:3: train.epochs: expected an integer");
  EXPECT_ERROR("train:\n  eval: \"true\"\n", "job.yaml:2:3: train.eval: expected a boolean",
               "quoted string");
  EXPECT_ERROR("optimizer:\n  lr: fast\n", "job.yaml:2:3: optimizer.lr: expected a number");
  /* a float that underflows to 0 is refused, not stored as 0 past a "> 0" limit */
  EXPECT_ERROR("model:\n  bn_epsilon: 1e-57\n",
               "job.yaml:2:3: model.bn_epsilon: too small (rounds to 0 as a float), got 1e-57");
  EXPECT_ERROR("optimizer:\n  lr: .nan\n", "optimizer.lr: expected a number");
  EXPECT_ERROR("model:\n  hidden: 256\n", "job.yaml:2:3: model.hidden: expected a sequence");
  EXPECT_ERROR("model:\n  hidden: [256, x]\n", "model.hidden[1]: expected an integer");
  EXPECT_ERROR("model: [1, 2]\n", "job.yaml:1:8: model: expected a mapping, got a sequence");
  EXPECT_ERROR("model:\n  kind: [mlp]\n", "model.kind: expected a string, got a sequence");
  EXPECT_ERROR("model:\n  kind: rnn\n", "model.kind: must be one of logreg, mlp, cnn, plugin, ctr, onnx",
               "\"rnn\"");
  EXPECT_ERROR("- a\n- b\n", "expected a mapping");
  /* out of range */
  EXPECT_ERROR("train:\n  batch_size: 0\n", "job.yaml:2:3: train.batch_size: must be in [1, ");
  EXPECT_ERROR("optimizer:\n  beta2: 1.0\n", "optimizer.beta2: must be in [0, 1), got 1.0");
  EXPECT_ERROR("optimizer:\n  lr: -0.1\n", "optimizer.lr: must be >= 0, got -0.1");
  EXPECT_ERROR("strategy:\n  nccl_comm_num: 17\n", "job.yaml:2:3: strategy.nccl_comm_num: "
               "must be in [1, 16], got 17");
  EXPECT_ERROR("strategy:\n  amp_configs: {decr_ratio: 1}\n",
               "strategy.amp_configs.decr_ratio: must be in (0, 1), got 1");
  EXPECT_ERROR("model:\n  input_shape: [1, 28]\n", "model.input_shape: expected exactly 3");
  EXPECT_ERROR("model:\n  hidden: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]\n",
               "model.hidden: at most 16 entries, got 17");
  EXPECT_ERROR("train:\n  checkpoint_dir: \"", "job.yaml:", "YAML syntax error");
  /* duplicates and extra documents */
  EXPECT_ERROR("train:\n  epochs: 1\n  epochs: 2\n", "job.yaml:3:3: train.epochs: duplicate key");
  EXPECT_ERROR("train: {}\n---\ntrain: {}\n", "one YAML document");
  /* unsupported Paddle strategies */
  EXPECT_ERROR("strategy:\n  dgc: true\n",
               "job.yaml:2:3: strategy.dgc is not supported by Flotilla");
  EXPECT_ERROR("strategy:\n  pipeline_configs: {micro_batch: 4}\n",
               "job.yaml:2:3: strategy.pipeline_configs is not supported by Flotilla");
  EXPECT_ERROR("strategy:\n  conv_workspace_size_limit: 512\n",
               "strategy.conv_workspace_size_limit is not supported by Flotilla");
  EXPECT_ERROR("strategy:\n  build_strategy:\n    fuse_bn_act_ops: true\n",
               "job.yaml:3:5: strategy.build_strategy.fuse_bn_act_ops is not supported");
  EXPECT_ERROR("strategy:\n  sharding: true\n", "strategy.sharding is not supported by Flotilla");
  EXPECT_ERROR("strategy:\n  tensor_parallel: true\n", "strategy.tensor_parallel is not supported");
  /* cross-field rules */
  EXPECT_ERROR("optimizer: {name: momentum}\nstrategy:\n  lars: true\n  lamb: true\n",
               "job.yaml:4:3: strategy.lamb: lars and lamb cannot both be true");
  EXPECT_ERROR("optimizer: {name: adam}\nstrategy:\n  lars: true\n",
               "job.yaml:3:3: strategy.lars: needs optimizer.name momentum", "got adam");
  EXPECT_ERROR("optimizer: {name: sgd}\nstrategy: {lamb: true}\n",
               "job.yaml:2:12: strategy.lamb: needs optimizer.name adam or adamw");
  EXPECT_ERROR("optimizer: {name: momentum, weight_decay: 0.1}\nstrategy: {lars: true}\n",
               "job.yaml:1:29: optimizer.weight_decay: must be 0 with strategy.lars");
  EXPECT_ERROR("strategy: {a_sync_configs: {k_steps: 4}}\n",
               "strategy.a_sync_configs.k_steps: geo mode", "a_sync: true");
  EXPECT_ERROR("strategy: {fp16_allreduce: true, grad_compression: bf16}\n",
               "strategy.fp16_allreduce: true conflicts with strategy.grad_compression: bf16");
  EXPECT_ERROR("model: {kind: plugin}\n", "job.yaml:1:9: model.kind: plugin needs model.plugin_path");
  EXPECT_ERROR("model: {kind: cnn, conv_kernel: 4}\n", "model.conv_kernel: must be odd");
  EXPECT_ERROR("model: {kind: cnn, norm: gn, gn_groups: 5}\n", "model.gn_groups: 5 must divide");
  EXPECT_ERROR("lr_schedule: {kind: piecewise, boundaries: [10, 5], values: [1, 2, 3]}\n",
               "lr_schedule.boundaries: must be strictly increasing");
  EXPECT_ERROR("lr_schedule: {kind: piecewise, boundaries: [10], values: [1]}\n",
               "lr_schedule.values: piecewise needs 2 values");
  EXPECT_ERROR("cluster: {tls: {cert: /a.pem}}\n", "cluster.tls.key: cluster.tls.cert and");
  EXPECT_ERROR("model: {kind: ctr, num_classes: 2}\n", "data.format: the ctr model needs");
  EXPECT_ERROR("model: {kind: ctr, num_classes: 2}\n"
               "data: {format: synthetic, synthetic: {kind: ctr}, augment: {random_crop_padding: 2}}\n",
               "data.augment: transforms images; sparse (ctr) data has none");
  EXPECT_ERROR("data: {augment: {random_crop_padding: -1}}\n", "data.augment.random_crop_padding");
  EXPECT_ERROR("pserver: {sparse: {optimizer: {name: momentum}}}\n",
               "pserver.sparse.optimizer.name: must be sgd, adagrad, adam, rowwise_adagrad or ftrl");
  EXPECT_ERROR("optimizer: {name: ftrl}\n", "optimizer.name: ftrl is for sparse-table rows only");
  EXPECT_ERROR("pserver: {optimizer: {name: rowwise_adagrad}}\n",
               "pserver.optimizer.name: rowwise_adagrad is for sparse-table rows only");
  EXPECT_ERROR("pserver: {sparse: {optimizer: {name: ftrl, lr_power: 0.5}}}\n",
               "pserver.sparse.optimizer.lr_power");
}
END_TEST

START_TEST(test_load_file) {
  char dir[] = "/tmp/fl_test_config_XXXXXX", path[128];
  fl_job j;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/job.yaml", dir);
  FILE *f = fopen(path, "w");
  fputs("train:\n  epochs: 4\n  bogus: 1\n", f);
  fclose(f);
  fl_log_set_level(FL_LOG_OFF);
  ck_assert_int_eq(fl_job_load_file(path, &j), FL_EINVAL);
  char want[160];
  snprintf(want, sizeof want, "%s:3:3: train.bogus: unknown key", path);
  ck_assert_msg(strstr(fl_job_last_error(), want), "got %s", fl_job_last_error());
  f = fopen(path, "w");
  fputs("train:\n  epochs: 4\n", f);
  fclose(f);
  ck_assert_int_eq(fl_job_load_file(path, &j), FL_OK);
  ck_assert_int_eq(j.train.epochs, 4);
  ck_assert_str_eq(j.source, path);
  ck_assert_str_eq(fl_job_last_error(), "");
  unlink(path);
  ck_assert_int_eq(fl_job_load_file(path, &j), FL_EIO);
  ck_assert(strstr(fl_job_last_error(), path) != NULL);
  rmdir(dir);
}
END_TEST

START_TEST(test_normalise_and_hparams) {
  fl_job j;
  fl_optim_hparams hp, sp;
  const char *ex[FL_JOB_MAX_LIST];

  /* name lars = momentum + strategy.lars; LARS takes its configs */
  ck_assert_int_eq(fl_job_load_string("optimizer: {name: lars, lr: 0.2}\n"
                                      "train: {num_threads: 3}\n"
                                      "strategy:\n  lars_configs:\n    lars_coeff: 0.002\n"
                                      "    lars_weight_decay: 0.0004\n    epsilon: 0.00001\n"
                                      "    exclude_from_weight_decay: [batch_norm, .b_0]\n",
                                      "lars.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(j.optimizer.hp.kind, FL_OPTIM_MOMENTUM);
  ck_assert_int_eq(j.strategy.lars, 1);
  ck_assert_int_eq(fl_job_optim_hparams(&j, &hp, ex), FL_OK);
  ck_assert_int_eq(hp.kind, FL_OPTIM_LARS);
  ck_assert_float_eq(hp.lars_coeff, 0.002f);
  ck_assert_float_eq(hp.weight_decay, 0.0004f);
  ck_assert_float_eq(hp.epsilon, 0.00001f);
  ck_assert_float_eq(hp.momentum, 0.9f);
  ck_assert_int_eq(hp.num_threads, 3);
  ck_assert_uint_eq(hp.n_exclude, 2);
  ck_assert_ptr_eq(hp.exclude_from_weight_decay, ex);
  ck_assert_ptr_eq(ex[1], j.strategy.lars_configs.exclude_from_weight_decay[1]);
  ck_assert_str_eq(hp.exclude_from_weight_decay[0], "batch_norm");
  /* the pserver inherits the optimizer and the strategy */
  ck_assert_int_eq(j.pserver.optimizer.hp.kind, FL_OPTIM_MOMENTUM);
  ck_assert_float_eq(j.pserver.optimizer.lr, 0.2f);
  ck_assert_int_eq(fl_job_pserver_hparams(&j, &hp, &sp, ex), FL_OK);
  ck_assert_int_eq(hp.kind, FL_OPTIM_LARS);
  ck_assert_int_eq(sp.kind, FL_OPTIM_ADAGRAD);
  round_trip(&j);

  /* lamb: adam inside, eps 1e-6 unless given */
  ck_assert_int_eq(fl_job_load_string("optimizer: {name: lamb, lr: 0.001}\n", "lamb.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(j.optimizer.hp.kind, FL_OPTIM_ADAM);
  ck_assert_int_eq(fl_job_optim_hparams(&j, &hp, ex), FL_OK);
  ck_assert_int_eq(hp.kind, FL_OPTIM_LAMB);
  ck_assert_float_eq(hp.weight_decay, 0.01f);
  ck_assert_float_eq(hp.epsilon, 1e-6f);
  ck_assert_float_eq(hp.beta1, 0.9f);
  ck_assert_uint_eq(hp.n_exclude, 0);
  ck_assert_int_eq(fl_job_load_string("optimizer: {name: adamw, epsilon: 0.001}\n"
                                      "strategy: {lamb: true}\n", "l2.yaml", &j),
                   FL_OK);
  ck_assert_float_eq(j.optimizer.hp.epsilon, 0.001f);

  /* plain adam: 1e-8, weight decay untouched */
  ck_assert_int_eq(fl_job_load_string("optimizer: {name: adam, weight_decay: 0.05}\n", "a.yaml",
                                      &j), FL_OK);
  ck_assert_int_eq(fl_job_optim_hparams(&j, &hp, ex), FL_OK);
  ck_assert_int_eq(hp.kind, FL_OPTIM_ADAM);
  ck_assert_float_eq(hp.epsilon, 1e-8f);
  ck_assert_float_eq(hp.weight_decay, 0.05f);

  /* fp16_allreduce is grad_compression fp16 */
  ck_assert_int_eq(fl_job_load_string("strategy: {fp16_allreduce: true}\n", "f.yaml", &j), FL_OK);
  ck_assert_int_eq(j.strategy.grad_compression, FL_COMPRESS_FP16);
  round_trip(&j);

  /* a bad job built in code is caught by fl_job_validate */
  fl_job_defaults(&j);
  j.strategy.lars = 1;
  j.strategy.lamb = 1;
  fl_log_set_level(FL_LOG_OFF);
  ck_assert_int_eq(fl_job_validate(&j), FL_EINVAL);
  ck_assert(strstr(fl_job_last_error(), "<defaults>: strategy.lars: lars and lamb") != NULL);
}
END_TEST

START_TEST(test_lr_schedule) {
  fl_job j;
  fl_lr_schedule s;
  ck_assert_int_eq(fl_job_load_string("optimizer: {lr: 0.4}\n"
                                      "lr_schedule: {kind: cosine, warmup_steps: 100,"
                                      " warmup_start_lr: 0.01, end_lr: 0.001}\n",
                                      "lr.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 1000, &s), FL_OK);
  ck_assert_int_eq(s.kind, FL_LR_COSINE);
  ck_assert_float_eq(s.base_lr, 0.4f);
  ck_assert_int_eq(s.decay_steps, 900);
  ck_assert_int_eq(s.warmup_steps, 100);
  ck_assert_float_eq(s.warmup_start_lr, 0.01f);
  ck_assert_float_eq(s.end_lr, 0.001f);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 50, &s), FL_OK);
  ck_assert_int_eq(s.decay_steps, 1);
  ck_assert_int_eq(fl_job_load_string("lr_schedule: {kind: piecewise, boundaries: [5, 9],"
                                      " values: [0.3, 0.2, 0.1]}\n", "pw.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 100, &s), FL_OK);
  ck_assert_uint_eq(s.n_boundaries, 2);
  ck_assert_int_eq(s.boundaries[1], 9);
  ck_assert_float_eq(s.values[2], 0.1f);
}
END_TEST

START_TEST(test_torch_lr_schedules) {
  fl_job j;
  fl_lr_schedule s;
  ck_assert_int_eq(fl_job_load_string("lr_schedule: {kind: multistep, milestones: [3, 8],"
                                      " gamma: 0.5}\n", "ms.yaml", &j), FL_OK);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 100, &s), FL_OK);
  ck_assert_int_eq(s.kind, FL_LR_MULTISTEP);
  ck_assert_uint_eq(s.n_boundaries, 2);
  ck_assert_int_eq(s.boundaries[1], 8);
  ck_assert_float_eq(fl_lr_at(&s, 8), 0.0025f);
  ck_assert_int_eq(fl_job_load_string("optimizer: {lr: 0.5}\n"
                                      "lr_schedule: {kind: onecycle, max_lr: 0.2, pct_start: 0.25,"
                                      " anneal: linear}\n", "oc.yaml", &j), FL_OK);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 40, &s), FL_OK);
  ck_assert_float_eq(s.base_lr, 0.2f); /* max_lr wins over optimizer.lr */
  ck_assert_int_eq(s.decay_steps, 40); /* total_steps 0: the run's */
  ck_assert_int_eq(s.anneal, FL_LR_ANNEAL_LINEAR);
  ck_assert_float_eq(s.div_factor, 25.0f);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 3, &s), FL_EINVAL); /* phases under a step */
  ck_assert_int_eq(fl_job_load_string("lr_schedule: {kind: linear, start_factor: 1, end_factor: 0,"
                                      " total_iters: 0}\n", "lin.yaml", &j), FL_OK);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 10, &s), FL_OK);
  ck_assert_int_eq(s.decay_steps, 10);
  ck_assert_int_eq(fl_job_load_string("lr_schedule: {kind: plateau, mode: max, factor: 0.5,"
                                      " patience: 2, threshold_mode: abs, cooldown: 1,"
                                      " min_lr: 0.001, metric: acc1}\n", "pl.yaml", &j), FL_OK);
  ck_assert_int_eq(fl_job_lr_schedule(&j, 10, &s), FL_OK);
  ck_assert_int_eq(s.plateau.mode_max, 1);
  ck_assert_int_eq(s.plateau.threshold_abs, 1);
  ck_assert_int_eq(s.plateau.patience, 2);
  ck_assert_float_eq(s.plateau.min_lr, 0.001f);
  ck_assert_int_eq(j.lr_schedule.metric, FL_LR_METRIC_ACC1);
  ck_assert_int_eq(fl_job_load_string("lr_schedule: {kind: inverse_sqrt, warmup_steps: 4}\n"
                                      "optimizer:\n  grad_clip: {kind: global_norm, max_norm: 1.5,"
                                      " norm_type: inf}\n", "is.yaml", &j), FL_OK);
  fl_clip c = fl_job_grad_clip(&j);
  ck_assert_int_eq(c.kind, FL_CLIP_GLOBAL_NORM);
  ck_assert_float_eq(c.max_norm, 1.5f);
  ck_assert(isinf(c.norm_type));
  ck_assert_int_eq(j.pserver.optimizer.grad_clip.kind, FL_CLIP_NONE); /* not copied */
  round_trip(&j);
}
END_TEST

START_TEST(test_lr_clip_errors) {
  EXPECT_ERROR("lr_schedule: {kind: cosine, gamma: 0.5}\n",
               "lr_schedule.gamma: is not read by kind cosine (it reads end_lr decay_steps");
  EXPECT_ERROR("lr_schedule: {kind: constant, milestones: [4]}\n",
               "lr_schedule.milestones: is not read by kind constant");
  EXPECT_ERROR("lr_schedule: {kind: step}\n", "lr_schedule.step_size: kind step needs it");
  EXPECT_ERROR("lr_schedule: {kind: step, step_size: 2, gamma: 1.5}\n", "job.yaml:1:",
               "lr_schedule.gamma: must be in (0, 1]");
  EXPECT_ERROR("lr_schedule: {kind: multistep}\n", "lr_schedule.milestones: kind multistep needs");
  EXPECT_ERROR("lr_schedule: {kind: multistep, milestones: [5, 5]}\n",
               "lr_schedule.milestones: must be strictly increasing");
  EXPECT_ERROR("lr_schedule: {kind: inverse_sqrt}\n",
               "lr_schedule.warmup_steps: kind inverse_sqrt needs it >= 1");
  EXPECT_ERROR("train: {eval: false}\nlr_schedule: {kind: plateau}\n",
               "lr_schedule.kind: plateau follows the evaluation's loss: it needs train.eval");
  EXPECT_ERROR("lr_schedule: {kind: plateau, factor: 1}\n",
               "lr_schedule.factor: must be in (0, 1)");
  EXPECT_ERROR("lr_schedule: {kind: onecycle, anneal: cosine}\n", "lr_schedule.anneal");
  EXPECT_ERROR("optimizer:\n  grad_clip: {kind: global_norm}\n",
               "optimizer.grad_clip.max_norm: kind global_norm needs it (> 0)");
  EXPECT_ERROR("optimizer:\n  grad_clip: {kind: value, max_norm: 1}\n",
               "optimizer.grad_clip.clip_value: kind value needs it (> 0)");
  EXPECT_ERROR("optimizer:\n  grad_clip: {kind: norm, max_norm: 1, norm_type: 0}\n",
               "optimizer.grad_clip.norm_type: must be > 0");
  EXPECT_ERROR("optimizer:\n  grad_clip: {kind: l2}\n", "optimizer.grad_clip.kind");
  EXPECT_ERROR("pserver:\n  optimizer:\n    grad_clip: {kind: value, clip_value: 1}\n",
               "pserver.optimizer.grad_clip.kind: the trainers clip their gradients");
}
END_TEST

static char *overview(const fl_job *j) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fl_strategy_print_overview(j, f);
  fclose(f);
  return buf;
}

START_TEST(test_overview) {
  fl_job j;
  ck_assert_int_eq(fl_job_load_string("strategy:\n  gradient_merge: true\n"
                                      "  gradient_merge_configs: {k_steps: 4, avg: true}\n",
                                      "gm.yaml", &j),
                   FL_OK);
  char *o = overview(&j);
  ck_assert(strstr(o, "DistributedStrategy Overview") != NULL);
  ck_assert(strstr(o, "gradient_merge=True <-> gradient_merge_configs") != NULL);
  ck_assert(strstr(o, "k_steps    4") != NULL);
  ck_assert(strstr(o, "avg    True") != NULL);
  ck_assert(strstr(o, "lars") == NULL);
  ck_assert(strstr(o, "amp") == NULL);
  /* every line of the box is 80 columns */
  for (char *line = o; *line;) {
    char *nl = strchr(line, '\n');
    ck_assert_ptr_nonnull(nl);
    ck_assert_int_eq((int)(nl - line), 80);
    line = nl + 1;
  }
  free(o);

  ck_assert_int_eq(fl_job_load_string(k_full, "full.yaml", &j), FL_OK);
  o = overview(&j);
  ck_assert(strstr(o, "lamb=True <-> lamb_configs") != NULL);
  ck_assert(strstr(o, "layer_norm") != NULL && strstr(o, ".b_0") != NULL);
  ck_assert(strstr(o, "amp=True <-> amp_configs") != NULL);
  ck_assert(strstr(o, "bfloat16") != NULL);
  ck_assert(strstr(o, "recompute=True <-> recompute_configs") != NULL);
  ck_assert(strstr(o, "a_sync=True <-> a_sync_configs") != NULL);
  ck_assert(strstr(o, "use_hierarchical_allreduce") != NULL);
  ck_assert(strstr(o, "lars=True") == NULL);
  free(o);

  fl_job_defaults(&j);
  o = overview(&j);
  ck_assert(strstr(o, "no strategy enabled") != NULL);
  free(o);
}
END_TEST

/* Load every *.yaml below dir; returns how many. */
static int load_all(const char *dir, int *found_base) {
  int n = 0;
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[1024];
    struct stat st;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      n += load_all(path, found_base);
      continue;
    }
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 5, ".yaml")) continue;
    fl_job j;
    fl_status s = fl_job_load_file(path, &j);
    ck_assert_msg(s == FL_OK, "%s: %s", path, fl_job_last_error());
    if (!strcmp(e->d_name, "mlp_fmnist.yaml") || !strcmp(e->d_name, "cnn_fmnist.yaml") ||
        !strcmp(e->d_name, "logreg_fmnist.yaml"))
      (*found_base)++;
    n++;
  }
  closedir(d);
  return n;
}

START_TEST(test_examples) {
  const char *src = getenv("FL_SRCDIR");
  char dir[1024];
  int base = 0;
  snprintf(dir, sizeof dir, "%s/deploy/examples", src ? src : "..");
  int n = load_all(dir, &base);
  ck_assert_int_eq(base, 3);
  ck_assert_int_ge(n, 3);

  fl_job j;
  snprintf(dir, sizeof dir, "%s/deploy/examples/mlp_fmnist.yaml", src ? src : "..");
  ck_assert_int_eq(fl_job_load_file(dir, &j), FL_OK);
  ck_assert_str_eq(j.model.kind, "mlp");
  ck_assert_uint_eq(j.model.n_hidden, 3);
  ck_assert_uint_eq(j.model.hidden[0], 256);
  ck_assert_uint_eq(j.model.hidden[1], 128);
  ck_assert_uint_eq(j.model.hidden[2], 100);
  round_trip(&j);
}
END_TEST

/* model.kind onnx: its keys (path, output, loss), train.export_onnx, their
 * defaults, dump, and the cross-field rules. */
START_TEST(test_onnx_keys) {
  fl_job j;
  fl_job_defaults(&j);
  ck_assert_int_eq(j.model.loss, FL_LOSS_SOFTMAX_XENT);
  ck_assert_str_eq(j.model.path, "");
  ck_assert_str_eq(j.model.output, "");
  ck_assert_str_eq(j.train.export_onnx, "");
  ck_assert_int_eq(fl_job_load_string("model:\n  kind: onnx\n  path: /m/net.onnx\n"
                                      "  output: logits\n  loss: bce_with_logits\n"
                                      "train:\n  export_onnx: /out/trained.onnx\n",
                                      "onnx.yaml", &j),
                   FL_OK);
  ck_assert_str_eq(j.model.kind, "onnx");
  ck_assert_str_eq(j.model.path, "/m/net.onnx");
  ck_assert_str_eq(j.model.output, "logits");
  ck_assert_int_eq(j.model.loss, FL_LOSS_BCE_LOGITS);
  ck_assert_str_eq(j.train.export_onnx, "/out/trained.onnx");
  round_trip(&j);
  /* the presets export too, with their only loss */
  ck_assert_int_eq(fl_job_load_string("model: {kind: cnn, loss: softmax_cross_entropy}\n"
                                      "train: {export_onnx: c.onnx}\n", "cnn.yaml", &j),
                   FL_OK);
  round_trip(&j);
  EXPECT_ERROR("model:\n  kind: onnx\n", "job.yaml:2:3: model.kind: onnx needs model.path");
  EXPECT_ERROR("model:\n  kind: onnx\n  path: m.onnx\n  loss: hinge\n",
               "job.yaml:4:3: model.loss: must be one of softmax_cross_entropy, "
               "bce_with_logits, mse", "\"hinge\"");
  EXPECT_ERROR("model:\n  kind: mlp\n  loss: mse\n",
               "job.yaml:3:3: model.loss: mse needs model.kind onnx; mlp trains with "
               "softmax_cross_entropy");
  EXPECT_ERROR("model:\n  kind: cnn\n  path: m.onnx\n",
               "job.yaml:3:3: model.path: only for model.kind onnx, the kind is cnn");
  EXPECT_ERROR("model: {output: y}\n", "job.yaml:1:9: model.output: only for model.kind onnx");
  EXPECT_ERROR("model: {kind: plugin, plugin_path: p.so}\ntrain: {export_onnx: o.onnx}\n",
               "job.yaml:2:9: train.export_onnx: model.kind plugin cannot be exported as ONNX");
}
END_TEST

/* pserver.sparse_tables: entries, their defaults, the dump, the refusals. */
START_TEST(test_sparse_tables_keys) {
  static const char *base = "model: {kind: onnx, path: m.onnx}\ncluster: {mode: ps}\n";
  char text[2048];
  fl_job j;
  snprintf(text, sizeof text, "%spserver:\n  sparse: {init_range: 0.02, optimizer: {name: ftrl, lr: 0.7}}\n"
           "  sparse_tables:\n"
           "    emb.weight: {optimizer: {name: sgd, lr: 0.5}, init: from_model, padding_id: 0}\n"
           "    bag.weight: {init: uniform(0.1)}\n    t3: {init: uniform}\n"
           "    t4: {init: uniform(0)}\n", base);
  ck_assert_int_eq(fl_job_load_string(text, "st.yaml", &j), FL_OK);
  ck_assert_int_eq(j.pserver.n_sparse_tables, 4);
  const fl_job_sparse_table *t = j.pserver.sparse_tables;
  ck_assert_str_eq(t[0].name, "emb.weight");
  ck_assert_int_eq(t[0].optimizer.hp.kind, FL_OPTIM_SGD);
  ck_assert_float_eq(t[0].optimizer.lr, 0.5f);
  ck_assert_int_eq(t[0].init, FL_SPARSE_INIT_FROM_MODEL);
  ck_assert_int_eq(t[0].has_padding, 1);
  ck_assert_int_eq(t[0].padding_id, 0);
  ck_assert_int_eq(t[1].optimizer.hp.kind, FL_OPTIM_FTRL); /* pserver.sparse.optimizer's */
  ck_assert_float_eq(t[1].optimizer.lr, 0.7f);
  ck_assert_float_eq(t[1].init_range, 0.1f);
  ck_assert_int_eq(t[1].has_padding, 0);
  ck_assert_float_eq(t[2].init_range, 0.02f); /* pserver.sparse.init_range */
  ck_assert_int_eq(t[3].init, FL_SPARSE_INIT_UNIFORM); /* uniform(0): rows start at zeros */
  ck_assert_float_eq(t[3].init_range, 0.0f);
  round_trip(&j);
  static const char *const bad[] = {"normal(1)", "uniform(-0.1)", "uniform(1001)", "uniform()",
                                    "uniform(0.1", "uniform(0.1)x", "uniform0.1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(text, sizeof text, "%spserver: {sparse_tables: {e: {init: '%s'}}}\n", base, bad[i]);
    EXPECT_ERROR(text, "pserver.sparse_tables.e.init: expected uniform, uniform(R) with R in "
                 "[0, 1000] or from_model, got", bad[i]);
  }
  snprintf(text, sizeof text, "%spserver: {sparse_tables: {e: {}, e: {}}}\n", base);
  EXPECT_ERROR(text, "pserver.sparse_tables.e: duplicate table");
  int len = snprintf(text, sizeof text, "%spserver: {sparse_tables: {", base);
  for (int i = 0; i <= FL_JOB_MAX_SPARSE_TABLES; i++)
    len += snprintf(text + len, sizeof text - (size_t)len, "%st%d: {}", i ? ", " : "", i);
  snprintf(text + len, sizeof text - (size_t)len, "}}\n");
  EXPECT_ERROR(text, "pserver.sparse_tables: at most 64 tables");
  EXPECT_ERROR("model: {kind: onnx, path: m.onnx}\ncluster: {mode: collective}\n"
               "pserver: {sparse_tables: {e: {}}}\n",
               "pserver.sparse_tables: the tables live on the pservers: they need cluster.mode "
               "ps, got collective");
  EXPECT_ERROR("cluster: {mode: ps}\npserver: {sparse_tables: {e: {}}}\n",
               "pserver.sparse_tables: names initializers of an ONNX model: needs model.kind "
               "onnx, got mlp");
  snprintf(text, sizeof text, "%strain: {device: gpu}\npserver: {sparse_tables: {e: {}}}\n", base);
  EXPECT_ERROR(text, "pserver.sparse_tables: a model with sparse tables trains on the cpu");
  snprintf(text, sizeof text, "%spserver: {sparse_tables: {e: {optimizer: {name: momentum}}}}\n",
           base);
  EXPECT_ERROR(text, "pserver.sparse_tables.e.optimizer.name: must be");
}
END_TEST

/* data.format npy: its keys, defaults, dump and the required paths. */
START_TEST(test_npy_keys) {
  fl_job j;
  fl_job_defaults(&j);
  ck_assert(j.data.scale == 1.0f / 255.0f);
  ck_assert_str_eq(j.data.train_x, "");
  ck_assert_int_eq(fl_job_load_string("data:\n  format: npy\n  train_x: /d/x.npy\n"
                                      "  train_y: /d/y.npy\n  test_x: /d/tx.npy\n"
                                      "  test_y: /d/ty.npy\n  scale: 0.5\n",
                                      "npy.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(j.data.format, FL_DATA_NPY);
  ck_assert_str_eq(j.data.train_x, "/d/x.npy");
  ck_assert_str_eq(j.data.train_y, "/d/y.npy");
  ck_assert_str_eq(j.data.test_x, "/d/tx.npy");
  ck_assert_str_eq(j.data.test_y, "/d/ty.npy");
  ck_assert(j.data.scale == 0.5f);
  round_trip(&j);
  ck_assert_int_eq(fl_job_load_string("data: {format: npy, train_x: a, train_y: b}\n"
                                      "train: {eval: false}\n", "npy.yaml", &j),
                   FL_OK);
  EXPECT_ERROR("data:\n  format: npy\n  train_y: /y.npy\n",
               "job.yaml: data.train_x: required with data.format npy");
  EXPECT_ERROR("data:\n  format: npy\n  train_x: /x.npy\n",
               "job.yaml: data.train_y: required with data.format npy");
  EXPECT_ERROR("data:\n  format: npy\n  train_x: /x.npy\n  train_y: /y.npy\n  test_x: /t\n",
               "data.test_y: required with train.eval: true");
  EXPECT_ERROR("data:\n  scale: 0\n", "job.yaml:2:3: data.scale: must be > 0, got 0");
  EXPECT_ERROR("data:\n  format: parquet\n", "job.yaml:2:3: data.format: must be one of idx, "
               "libsvm, synthetic, npy");
}
END_TEST

/* data.format criteo: its keys, defaults, dump and the required path. */
START_TEST(test_criteo_keys) {
  fl_job j;
  fl_job_defaults(&j);
  ck_assert_int_eq(j.data.shuffle_buffer, 100000);
  ck_assert_int_eq(j.data.bad_lines, 0);
  ck_assert_int_eq(j.data.hash_buckets, 0);
  ck_assert_int_eq(fl_job_load_string("model: {kind: onnx, path: /m.onnx, loss: bce_with_logits}\n"
                                      "data:\n  format: criteo\n"
                                      "  train_files: [/d/day_0.gz, '/d/day_1*.gz']\n"
                                      "  test_files: /d/day_23.gz\n"
                                      "  criteo: {dense_input: x, shuffle_buffer: 64,\n"
                                      "    bad_lines: skip, hash_buckets: 1000003}\n",
                                      "criteo.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(j.data.format, FL_DATA_CRITEO);
  ck_assert_uint_eq(j.data.n_train_files, 2);
  ck_assert_str_eq(j.data.train_files[1], "/d/day_1*.gz");
  ck_assert_uint_eq(j.data.n_test_files, 1);
  ck_assert_str_eq(j.data.test_files[0], "/d/day_23.gz");
  ck_assert_str_eq(j.data.dense_input, "x");
  ck_assert_str_eq(j.data.sparse_input, "sparse");
  ck_assert_int_eq(j.data.shuffle_buffer, 64);
  ck_assert_int_eq(j.data.bad_lines, 1);
  ck_assert_int_eq(j.data.hash_buckets, 1000003);
  round_trip(&j);
  EXPECT_ERROR("model: {kind: onnx, path: /m.onnx}\ndata:\n  format: criteo\n",
               "data.train_files: required with format criteo");
  EXPECT_ERROR("data:\n  criteo: {bad_lines: ignore}\n",
               "data.criteo.bad_lines: must be one of stop, skip");
  EXPECT_ERROR("model: {kind: onnx, path: /m.onnx}\n"
               "data: {format: criteo, train_files: /d/x, test_files: /d/y,\n"
               "  criteo: {sparse_input: dense}}\n",
               "data.criteo.sparse_input: must differ from dense_input (dense)");
  EXPECT_ERROR("model: {kind: ctr, num_classes: 2}\ndata: {format: criteo, train_path: /d/x}\n",
               "data.format: criteo feeds an ONNX model");
}
END_TEST

START_TEST(test_admission_keys) {
  fl_job j;
  fl_job_defaults(&j);
  ck_assert_int_eq(j.pserver.sparse.admit_threshold, 0);
  ck_assert_uint_eq(j.pserver.sparse.admit_sketch_bytes, 4194304);
  ck_assert_int_eq(j.pserver.checkpoint_delta.every, 0);
  ck_assert_int_eq(fl_job_load_string("pserver:\n  sparse: {admit_threshold: 3, admit_sketch_bytes: "
                                      "65536, admit_default: -0.5, expire_after_steps: 100, "
                                      "expire_after_seconds: 3600}\n  checkpoint_delta: {every: 4}\n",
                                      "admit.yaml", &j),
                   FL_OK);
  ck_assert_int_eq(j.pserver.sparse.admit_threshold, 3);
  ck_assert_uint_eq(j.pserver.sparse.admit_sketch_bytes, 65536);
  ck_assert(j.pserver.sparse.admit_default == -0.5f);
  ck_assert_int_eq(j.pserver.sparse.expire_after_steps, 100);
  ck_assert(j.pserver.sparse.expire_after_seconds == 3600);
  ck_assert_int_eq(j.pserver.checkpoint_delta.every, 4);
  round_trip(&j);
  ck_assert_int_eq(fl_job_load_string("pserver: {sparse: {admit_sketch_bytes: 100}}\n", "a.yaml", &j),
                   FL_EINVAL);
  /* The disk tier takes deltas, admission and expiry. */
  ck_assert_int_eq(fl_job_load_string("pserver: {memory_budget: 1000000, checkpoint_delta: {every: "
                                      "4}, sparse: {admit_threshold: 2, expire_after_steps: 10, "
                                      "expire_after_seconds: 60}}\n", "a.yaml", &j),
                   FL_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("job");
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_every_section);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_load_file);
  tcase_add_test(tc, test_normalise_and_hparams);
  tcase_add_test(tc, test_lr_schedule);
  tcase_add_test(tc, test_torch_lr_schedules);
  tcase_add_test(tc, test_lr_clip_errors);
  tcase_add_test(tc, test_overview);
  tcase_add_test(tc, test_examples);
  tcase_add_test(tc, test_npy_keys);
  tcase_add_test(tc, test_criteo_keys);
  tcase_add_test(tc, test_admission_keys);
  tcase_add_test(tc, test_onnx_keys);
  tcase_add_test(tc, test_sparse_tables_keys);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
