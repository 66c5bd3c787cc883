/* test_coll_nccl.c - the nccl backend on one GPU: a single-rank
 * communicator (NCCL cannot put two ranks on one device) through every
 * call: allreduce in fp32, fp16, bf16 and fp64 on host and device
 * buffers, broadcast, allgather, barrier, and two communicators split from
 * the first (nccl_comm_num 2).  Exits 77 (SKIP) without a GPU or in a
 * build without NCCL. */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_testutil.h"
#include "fl_optim.h"

#ifdef FL_HAVE_NCCL
#include <cuda_runtime.h>

static fl_coll *open_nccl(int rings) {
  const char *h[] = {"127.0.0.1"};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, 1, h), 0);
  fl_coll_options o = ct_opts(&j, 0, "nccl", 20.0);
  o.nrings = rings;
  fl_coll *c = NULL;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_OK);
  ck_assert_str_eq(fl_coll_backend_name(c), "nccl");
  return c;
}

static void host_calls(int rings) {
  fl_coll *c = open_nccl(rings);
  float f[1001];
  double d[7];
  uint16_t h[513], bf[513];
  float src[513], back[513];
  for (int i = 0; i < 1001; i++) f[i] = (float)i * 0.5f;
  for (int i = 0; i < 7; i++) d[i] = i * 1.25;
  for (int i = 0; i < 513; i++) src[i] = (float)(i % 64) * 0.25f;
  fl_cast_f32_to_f16(src, h, 513);
  fl_cast_f32_to_bf16(src, bf, 513);
  ck_assert_int_eq(fl_coll_allreduce(c, f, 1001, FL_COLL_F32), FL_OK);
  ck_assert_int_eq(fl_coll_allreduce(c, d, 7, FL_COLL_F64), FL_OK);
  ck_assert_int_eq(fl_coll_allreduce(c, h, 513, FL_COLL_F16), FL_OK);
  ck_assert_int_eq(fl_coll_allreduce(c, bf, 513, FL_COLL_BF16), FL_OK);
  for (int i = 0; i < 1001; i++) ck_assert(f[i] == (float)i * 0.5f);
  for (int i = 0; i < 7; i++) ck_assert(d[i] == i * 1.25);
  fl_cast_f16_to_f32(h, back, 513);
  for (int i = 0; i < 513; i++) ck_assert(back[i] == src[i]);
  fl_cast_bf16_to_f32(bf, back, 513);
  for (int i = 0; i < 513; i++) ck_assert(back[i] == src[i]);
  uint8_t b[100], g[100];
  for (int i = 0; i < 100; i++) b[i] = (uint8_t)i;
  ck_assert_int_eq(fl_coll_broadcast(c, b, 100, 0), FL_OK);
  ck_assert_int_eq(fl_coll_allgather(c, b, 100, g), FL_OK);
  ck_assert_int_eq(memcmp(b, g, 100), 0);
  ck_assert_int_eq(fl_coll_barrier(c), FL_OK);
  fl_coll_req *q = NULL;
  ck_assert_int_eq(fl_coll_iallreduce(c, f, 1001, FL_COLL_F32, &q), FL_OK);
  ck_assert_int_eq(fl_coll_wait(c, q), FL_OK);
  fl_coll_destroy(c);
}

START_TEST(host_buffers) {
  host_calls(1);
}
END_TEST

START_TEST(two_communicators) {
  host_calls(2);
}
END_TEST

START_TEST(device_buffers) {
  fl_coll *c = open_nccl(1);
  const size_t n = (size_t)1 << 20;
  float *hbuf = malloc(n * sizeof(float)), *dbuf = NULL;
  for (size_t i = 0; i < n; i++) hbuf[i] = (float)(i % 1000);
  ck_assert_int_eq(cudaMalloc((void **)&dbuf, n * sizeof(float)), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(dbuf, hbuf, n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ck_assert_int_eq(fl_coll_allreduce(c, dbuf, n, FL_COLL_F32), FL_OK);
  ck_assert_int_eq(fl_coll_broadcast(c, dbuf, n * sizeof(float), 0), FL_OK);
  memset(hbuf, 0, n * sizeof(float));
  ck_assert_int_eq(cudaMemcpy(hbuf, dbuf, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; i++) ck_assert(hbuf[i] == (float)(i % 1000));
  cudaFree(dbuf);
  free(hbuf);
  fl_coll_destroy(c);
}
END_TEST
#endif

int main(void) {
#ifndef FL_HAVE_NCCL
  printf("SKIP: this build has no NCCL (configure --with-cuda with NCCL installed)\n");
  return 77;
#else
  if (fl_cuda_device_count() == 0) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  Suite *s = suite_create("coll_nccl");
  TCase *t = tcase_create("one_rank");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, host_buffers);
  tcase_add_test(t, two_communicators);
  tcase_add_test(t, device_buffers);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
#endif
}
