/* test_chunks.c - the elastic ps chunk claims (trainer/elastic_chunks.c)
 * against a real etcd whose endpoint test_etcd.sh passes in
 * FL_ETCD_ENDPOINT: two trainers share an epoch of 4 chunks (10 steps)
 * with no step trained twice; one dies holding a chunk, which the other
 * then trains again whole; an epoch whose chunks are all done is skipped by
 * a late joiner; max_steps bounds the job's steps, in the epochs' order. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd_testutil.h"
#include "fl_chunks.h"

/* A trainer's chunks of a 10-step epoch of 4 chunks, 3 samples a step,
 * claims under prefix with a lease of 2 s. */
static fl_chunks *trainer(const char *prefix) {
  char v[512];
  fl_chunks *c = NULL;
  snprintf(v, sizeof v, "4 2 %s %s", etcd_test_endpoint(), prefix);
  ck_assert_int_eq(setenv("FLOTILLA_ELASTIC_CHUNKS", v, 1), 0);
  ck_assert_int_eq(fl_chunks_open(10, 3, 7, &c), FL_OK);
  ck_assert_ptr_nonnull(c);
  return c;
}

/* One step of epoch e: 1 when there was one; *chunk_first the first sample
 * when a chunk began (else unchanged). */
static int step(fl_chunks *c, int64_t e, int64_t *chunk_first) {
  int64_t at = -1;
  int more = -1;
  ck_assert_int_eq(fl_chunks_next_step(c, e, &at, &more), FL_OK);
  if (at >= 0) *chunk_first = at;
  return more;
}

/* One trainer's thread through epoch 1 (a trainer with nothing left to
 * claim waits for the other's chunk: they run side by side). */
typedef struct run {
  fl_chunks *c;
  int steps;
  fl_status st;
} run;

static void *epoch1(void *arg) {
  run *r = arg;
  int64_t at;
  int more = 1;
  while (r->st == FL_OK && more) {
    r->st = fl_chunks_next_step(r->c, 1, &at, &more);
    r->steps += more;
    usleep(20 * 1000); /* a step's work, so that both get chunks */
  }
  return NULL;
}

START_TEST(share_die_retrain) {
  fl_chunks *a = trainer("/tc/job/chunks/"), *b = trainer("/tc/job/chunks/");
  int64_t fa = -1, fb = -1, e = -1;
  int steps_a = 0, steps_b = 0;
  /* a takes a chunk and trains one step of it, then dies (its lease is
   * revoked: the claim goes, no done mark) */
  ck_assert_int_eq(step(a, 0, &fa), 1);
  ck_assert_int_ge(fa, 0);
  fl_chunks_close(a);
  /* b trains the whole epoch: every chunk, a's from its start */
  int retrained = 0;
  while (step(b, 0, &fb)) {
    retrained |= fb == fa;
    steps_b++;
  }
  ck_assert_int_eq(steps_b, 10); /* 10 steps: no step twice, none left */
  ck_assert_int_eq(retrained, 1);
  /* a late joiner finds epoch 0 done and starts at 1; the two share it */
  a = trainer("/tc/job/chunks/");
  ck_assert_int_eq(fl_chunks_first_epoch(a, 0, 3, &e), FL_OK);
  ck_assert_int_eq(e, 1);
  run r[2] = {{a, 0, 0}, {b, 0, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, epoch1, &r[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  ck_assert_int_eq(r[0].st, FL_OK);
  ck_assert_int_eq(r[1].st, FL_OK);
  steps_a = r[0].steps;
  steps_b = r[1].steps;
  ck_assert_int_eq(steps_a + steps_b, 10);
  ck_assert_int_gt(steps_a, 0);
  ck_assert_int_gt(steps_b, 0);
  ck_assert_int_eq(fl_chunks_first_epoch(b, 0, 3, &e), FL_OK);
  ck_assert_int_eq(e, 2);
  fl_chunks_close(a);
  fl_chunks_close(b);
}
END_TEST

/* max_steps 16 of epochs of 10 steps (chunks at steps 0, 2, 5, 7): epoch
 * 0 whole, epoch 1's steps 0..5 (chunk 2 cut to step 5), no epoch 2. */
START_TEST(max_steps_of_the_job) {
  fl_chunks *c = trainer("/tc/limit/chunks/");
  int64_t at = -1, e = -1;
  int steps[2] = {0, 0}, more = 1;
  fl_chunks_limit(c, 16);
  ck_assert_int_eq(fl_chunks_epochs(c, 5), 2);
  for (int64_t ep = 0; ep < 2; ep++)
    for (more = 1; more;) {
      ck_assert_int_eq(fl_chunks_next_step(c, ep, &at, &more), FL_OK);
      steps[ep] += more;
      ck_assert(at < 0 || at % 3 == 0);
      ck_assert(at < 6 * 3 || ep == 0);
    }
  ck_assert_int_eq(steps[0], 10);
  ck_assert_int_eq(steps[1], 6);
  ck_assert_int_eq(fl_chunks_first_epoch(c, 0, 5, &e), FL_OK);
  ck_assert_int_eq(e, 5); /* every chunk of every epoch done or past the bound */
  fl_chunks_limit(c, 0);
  ck_assert_int_eq(fl_chunks_epochs(c, 5), 5);
  fl_chunks_close(c);
}
END_TEST

int main(void) {
  const TTest *tests[] = {share_die_retrain, max_steps_of_the_job};
  return etcd_test_main("chunks", CK_FORK_GETENV, tests, sizeof tests / sizeof *tests);
}
