/* test_ps_tier_chain1.c - a whole checkpoint chain with the disk tier
 * written by the build before layout 2 (tests/fixtures/tier_chain_layout1:
 * a base and two deltas, each with its store copy, a delta's copy a
 * RocksDB store of its own; README.gen.c.txt there says how it was made)
 * restarts a pserver core of this build: both deltas replay, some rows
 * come back on disk, and every row (ids and values) is bit for bit what
 * the old build's run had after its second delta (rows.txt there). */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_testutil.h"

#define DIM 8
#define KEYS 200
#define FIXTURE "tests/fixtures/tier_chain_layout1"

/* Copy the file from into to. */
static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  char buf[4096];
  size_t k;
  ck_assert_ptr_nonnull(in);
  ck_assert_ptr_nonnull(out);
  while ((k = fread(buf, 1, sizeof buf, in)) > 0) ck_assert_uint_eq(fwrite(buf, 1, k, out), k);
  fclose(in);
  ck_assert_int_eq(fclose(out), 0);
}

/* Copy the directory from into to (made here), one level of directories
 * under it as the fixture has. */
static void copy_tree(const char *from, const char *to) {
  DIR *d = opendir(from);
  struct dirent *e;
  char a[1024], b[1024];
  struct stat sb;
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(mkdir(to, 0755), 0);
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(a, sizeof a, "%s/%s", from, e->d_name);
    snprintf(b, sizeof b, "%s/%s", to, e->d_name);
    ck_assert_int_eq(stat(a, &sb), 0);
    if (S_ISDIR(sb.st_mode)) copy_tree(a, b);
    else copy_file(a, b);
  }
  closedir(d);
}

/* The rows the old build's run had (rows.txt of dir: an id, its DIM
 * floats in %a, a line each) into want, their ids marked in had. */
static void old_rows(const char *dir, float *want, uint8_t *had) {
  char p[1024];
  FILE *f;
  int id, n = 0;
  snprintf(p, sizeof p, "%s/rows.txt", dir);
  ck_assert_ptr_nonnull(f = fopen(p, "r"));
  while (fscanf(f, "%d", &id) == 1) {
    ck_assert(id >= 0 && id < KEYS);
    for (int j = 0; j < DIM; j++) ck_assert_int_eq(fscanf(f, "%a", &want[id * DIM + j]), 1);
    had[id] = 1;
    n++;
  }
  fclose(f);
  ck_assert_int_eq(n, KEYS);
}

START_TEST(test_old_chain_restarts) {
  char dir[] = "/tmp/fl_test_chain1_XXXXXX", src[1024], chain[600], logp[600];
  const char *top = getenv("FL_SRCDIR");
  static float want[KEYS * DIM], got[KEYS * DIM];
  static uint8_t had[KEYS];
  uint64_t all[KEYS];
  fl_ps_core_opts o;
  fl_ps_core *c;
  fl_ps_tiers ts;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(src, sizeof src, "%s/" FIXTURE, top ? top : "..");
  snprintf(chain, sizeof chain, "%s/chain", dir);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  copy_tree(src, chain);
  old_rows(chain, want, had);
  /* As the old run was made (README.gen.c.txt). */
  pt_opts(&o, 1, 1, FL_OPTIM_ROWWISE_ADAGRAD, 0.1f, 1 << 20);
  o.job.pserver.memory_budget = 16 << 10;
  o.job.pserver.checkpoint_delta.every = 4;
  c = pt_core(&o);
  ck_assert_int_eq(fl_ps_core_open_tier(c, chain), FL_OK);
  ck_assert_int_eq(pt_load_chain(c, chain, logp), 2);
  fl_ps_core_tier_stats(c, &ts);
  ck_assert_uint_gt(ts.disk_rows, 0);
  ck_assert_uint_eq(ts.mem_rows + ts.disk_rows, KEYS);
  pt_register(c, &(pt_reg){.trainer = 0, .n_trainers = 1,
                           .mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC, .dim = DIM});
  for (uint64_t k = 0; k < KEYS; k++) all[k] = k;
  ck_assert_int_eq(pt_pull_sparse(c, &(pt_call){.trainer = 0, .table = "emb", .dim = DIM,
                                                .read_only = 1},
                                  all, KEYS, got),
                   FL_OK);
  ck_assert_mem_eq(got, want, sizeof got);
  fl_ps_core_free(c);
  pt_rm_tree(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_tier_chain1");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_old_chain_restarts);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
