/* test_ckpt.c - the checkpoint format: round trip, every truncation and
 * every flipped byte refused, newest-valid selection in a directory,
 * pruning, and atomicity (a failed write leaves the previous file intact);
 * stale temporary files of dead writers removed; run identities and the
 * start-up decision about a used directory (fl_identity.h). */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_identity.h"
#include "fl_log.h"

static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_ckpt_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char p[512];
    struct stat st;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static void teardown(void) { rm_rf(g_dir); }

static void quiet(void) { fl_log_set_level(FL_LOG_OFF); }

/* A checkpoint of a few records, marked by `tag`, into w. */
static void fill(fl_ckpt_writer *w, int64_t tag) {
  float wts[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-7f, -1e30f};
  int64_t s2[2] = {2, 3};
  uint16_t half[24];
  int64_t s3[3] = {2, 3, 4};
  int64_t s0[2] = {0, 5};
  for (int i = 0; i < 24; i++) half[i] = (uint16_t)(i * 1000);
  ck_assert_int_eq(fl_ckpt_put(w, "fc0.weight", FL_CKPT_F32, 2, s2, wts), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_i64(w, "step", tag), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_blob(w, "rng", "\x01\x02\x03", 3), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "amp.half", FL_CKPT_F16, 3, s3, half), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "empty", FL_CKPT_F32, 2, s0, NULL), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_blob(w, "mode", "collective", 10), FL_OK);
}

static void check_content(const fl_ckpt *c, int64_t tag) {
  fl_ckpt_record r;
  int64_t v;
  float wts[6];
  int64_t s2[2] = {2, 3}, bad[2] = {3, 2};
  ck_assert_uint_eq(fl_ckpt_count(c), 6);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "step", &v), FL_OK);
  ck_assert_int_eq(v, tag);
  ck_assert_int_eq(fl_ckpt_read(c, "fc0.weight", FL_CKPT_F32, 2, s2, wts), FL_OK);
  ck_assert_float_eq(wts[2], 3.25f);
  ck_assert_float_eq(wts[5], -1e30f);
  ck_assert_int_eq(fl_ckpt_read(c, "fc0.weight", FL_CKPT_F32, 2, bad, wts), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "fc0.weight", FL_CKPT_F16, 2, s2, wts), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "nope", FL_CKPT_F32, 2, s2, wts), FL_ENOTFOUND);
  ck_assert_int_eq(fl_ckpt_find(c, "nope", NULL), FL_ENOTFOUND);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "rng", &v), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_find(c, "amp.half", &r), FL_OK);
  ck_assert_int_eq(r.dtype, FL_CKPT_F16);
  ck_assert_int_eq(r.ndim, 3);
  ck_assert_int_eq(r.shape[2], 4);
  ck_assert_uint_eq(r.nbytes, 48);
  ck_assert_uint_eq(((const uint16_t *)r.data)[23], 23000);
  ck_assert_int_eq(fl_ckpt_find(c, "rng", &r), FL_OK);
  ck_assert_uint_eq(r.nbytes, 3);
  ck_assert(memcmp(r.data, "\x01\x02\x03", 3) == 0);
  ck_assert_int_eq(fl_ckpt_find(c, "empty", &r), FL_OK);
  ck_assert_uint_eq(r.nbytes, 0);
  /* file order, aligned data */
  for (size_t i = 0; i < fl_ckpt_count(c); i++) {
    ck_assert_int_eq(fl_ckpt_record_at(c, i, &r), FL_OK);
    ck_assert_uint_eq((uintptr_t)r.data % 8, 0);
  }
  ck_assert_int_eq(fl_ckpt_record_at(c, 0, &r), FL_OK);
  ck_assert_str_eq(r.name, "fc0.weight");
  ck_assert_int_eq(fl_ckpt_record_at(c, 5, &r), FL_OK);
  ck_assert_str_eq(r.name, "mode");
}

static void write_file(const char *path, int64_t tag) {
  fl_ckpt_writer *w;
  ck_assert_int_eq(fl_ckpt_writer_open(path, &w), FL_OK);
  fill(w, tag);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
}

static void *mem_image(int64_t tag, size_t *len) {
  fl_ckpt_writer *w;
  void *buf;
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  fill(w, tag);
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, len), FL_OK);
  return buf;
}

static size_t count_entries(const char *dir) {
  size_t n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

START_TEST(test_round_trip) {
  char path[256];
  fl_ckpt *c;
  snprintf(path, sizeof path, "%s/a.flc", g_dir);
  write_file(path, 42);
  ck_assert_int_eq(fl_ckpt_load(path, &c), FL_OK);
  check_content(c, 42);
  fl_ckpt_free(c);
  ck_assert_uint_eq(count_entries(g_dir), 1); /* no temporary left behind */

  /* the memory image is the file, byte for byte */
  size_t len;
  void *img = mem_image(42, &len);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_uint_eq((size_t)st.st_size, len);
  unsigned char *disk = malloc(len);
  FILE *f = fopen(path, "rb");
  ck_assert_uint_eq(fread(disk, 1, len, f), len);
  fclose(f);
  ck_assert(memcmp(disk, img, len) == 0);
  free(disk);
  ck_assert_int_eq(fl_ckpt_load_mem(img, len, "img", &c), FL_OK);
  check_content(c, 42);
  fl_ckpt_free(c);
  free(img);

  /* an empty checkpoint is valid too */
  fl_ckpt_writer *w;
  void *buf;
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, &len), FL_OK);
  ck_assert_int_eq(fl_ckpt_load_mem(buf, len, "empty", &c), FL_OK);
  ck_assert_uint_eq(fl_ckpt_count(c), 0);
  fl_ckpt_free(c);
  free(buf);
}
END_TEST

START_TEST(test_writer_errors) {
  fl_ckpt_writer *w;
  void *buf;
  size_t len;
  int64_t neg[1] = {-1};
  quiet();
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_i64(w, "a", 1), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_i64(w, "a", 2), FL_EINVAL); /* duplicate */
  ck_assert_int_eq(fl_ckpt_put_i64(w, "b", 2), FL_EINVAL); /* sticky */
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, &len), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "", FL_CKPT_U8, 0, NULL, "x"), FL_EINVAL);
  fl_ckpt_writer_abort(w);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "n", FL_CKPT_F32, 1, neg, NULL), FL_EINVAL);
  fl_ckpt_writer_abort(w);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "d", (fl_ckpt_dtype)99, 0, NULL, "x"), FL_EINVAL);
  fl_ckpt_writer_abort(w);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "d", FL_CKPT_F32, FL_CKPT_MAX_DIMS + 1, neg, "x"), FL_EINVAL);
  fl_ckpt_writer_abort(w);
  fl_ckpt_writer_abort(NULL);
}
END_TEST

START_TEST(test_truncated_everywhere) {
  size_t len;
  unsigned char *img = mem_image(7, &len);
  char path[256];
  fl_ckpt *c;
  quiet();
  snprintf(path, sizeof path, "%s/t.flc", g_dir);
  for (size_t n = 0; n < len; n++) {
    ck_assert_msg(fl_ckpt_load_mem(img, n, "trunc", &c) == FL_ECORRUPT, "length %zu accepted", n);
    /* and the same on disk */
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(img, 1, n, f), n);
    fclose(f);
    ck_assert_msg(fl_ckpt_load(path, &c) == FL_ECORRUPT, "file of %zu bytes accepted", n);
  }
  /* an extra byte at the end is refused as well */
  unsigned char *big = malloc(len + 1);
  memcpy(big, img, len);
  big[len] = 0;
  ck_assert_int_eq(fl_ckpt_load_mem(big, len + 1, "long", &c), FL_ECORRUPT);
  free(big);
  free(img);
}
END_TEST

START_TEST(test_flipped_everywhere) {
  size_t len;
  unsigned char *img = mem_image(7, &len);
  fl_ckpt *c;
  quiet();
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit += 3) {
      img[i] ^= (unsigned char)(1u << bit);
      ck_assert_msg(fl_ckpt_load_mem(img, len, "flip", &c) == FL_ECORRUPT,
                    "flip of bit %d at offset %zu accepted", bit, i);
      img[i] ^= (unsigned char)(1u << bit);
    }
  }
  ck_assert_int_eq(fl_ckpt_load_mem(img, len, "intact", &c), FL_OK);
  fl_ckpt_free(c);
  free(img);
}
END_TEST

static void corrupt_file(const char *path) {
  int fd = open(path, O_RDWR);
  unsigned char b;
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, &b, 1, 40), 1);
  b ^= 0x10;
  ck_assert_int_eq(pwrite(fd, &b, 1, 40), 1);
  close(fd);
}

START_TEST(test_dir_newest_valid) {
  char dir[256], path[512], junk[512];
  int64_t steps[8], step = -1;
  size_t n;
  fl_ckpt *c;
  fl_ckpt_writer *w;
  quiet();
  snprintf(dir, sizeof dir, "%s/run/ckpts", g_dir);
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &c, &step), FL_ENOTFOUND);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 0);
  for (int64_t s = 10; s <= 30; s += 10) {
    ck_assert_int_eq(fl_ckpt_dir_begin(dir, s, &w), FL_OK); /* creates run/ckpts */
    fill(w, s);
    ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
  }
  ck_assert_int_eq(fl_ckpt_dir_begin(dir, 100, &w), FL_OK);
  fill(w, 100);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
  /* names that are not checkpoints are ignored */
  snprintf(junk, sizeof junk, "%s/ckpt-abc.flc", dir);
  fclose(fopen(junk, "w"));
  snprintf(junk, sizeof junk, "%s/.ckpt-200.flc.tmp.1.0", dir);
  fclose(fopen(junk, "w"));
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 2, &n), FL_OK);
  ck_assert_uint_eq(n, 4);
  ck_assert_int_eq(steps[0], 100);
  ck_assert_int_eq(steps[1], 30);

  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &c, &step), FL_OK);
  ck_assert_int_eq(step, 100);
  fl_ckpt_free(c);
  /* newest corrupt, next one truncated: the one before is used */
  ck_assert_int_eq(fl_ckpt_dir_path(dir, 100, path, sizeof path), FL_OK);
  corrupt_file(path);
  ck_assert_int_eq(fl_ckpt_dir_path(dir, 30, path, sizeof path), FL_OK);
  ck_assert_int_eq(truncate(path, 50), 0);
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &c, &step), FL_OK);
  ck_assert_int_eq(step, 20);
  check_content(c, 20);
  fl_ckpt_free(c);

  /* keep the newest 2 (whatever their state) */
  ck_assert_int_eq(fl_ckpt_dir_prune(dir, 2), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(steps[1], 30);
  /* both corrupt now: nothing valid */
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &c, &step), FL_ECORRUPT);
  ck_assert_int_eq(fl_ckpt_dir_prune(dir, 0), FL_EINVAL);
}
END_TEST

/* commit_as: the file lands under the other name (same directory), and
 * the temporary is gone; another directory is refused and nothing stays. */
START_TEST(test_commit_as) {
  char dir[256], path[512], other[512];
  int64_t steps[4], step = -1;
  size_t n;
  fl_ckpt *c;
  fl_ckpt_writer *w;
  quiet();
  snprintf(dir, sizeof dir, "%s/as", g_dir);
  ck_assert_int_eq(fl_ckpt_dir_begin(dir, 5, &w), FL_OK);
  fill(w, 7);
  ck_assert_int_eq(fl_ckpt_dir_path(dir, 7, path, sizeof path), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit_as(w, path), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 4, &n), FL_OK);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(steps[0], 7);
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &c, &step), FL_OK);
  ck_assert_int_eq(step, 7);
  check_content(c, 7);
  fl_ckpt_free(c);

  ck_assert_int_eq(fl_ckpt_dir_begin(dir, 8, &w), FL_OK);
  fill(w, 8);
  snprintf(other, sizeof other, "%s/ckpt-8.flc", g_dir);
  ck_assert_int_eq(fl_ckpt_writer_commit_as(w, other), FL_EINVAL);
  ck_assert_int_ne(access(other, F_OK), 0);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 4, &n), FL_OK);
  ck_assert_uint_eq(n, 1);
  /* no temporary left behind either: the directory holds ckpt-7.flc only */
  ck_assert_uint_eq(count_entries(dir), 1);
}
END_TEST

START_TEST(test_atomic_failed_write) {
  char path[256], bad[256];
  fl_ckpt *c;
  fl_ckpt_writer *w;
  quiet();
  snprintf(path, sizeof path, "%s/ckpt-5.flc", g_dir);
  write_file(path, 5);

  /* a directory that does not exist, and one that is a file */
  snprintf(bad, sizeof bad, "%s/nonexistent/ckpt-6.flc", g_dir);
  ck_assert_int_eq(fl_ckpt_writer_open(bad, &w), FL_EIO);
  snprintf(bad, sizeof bad, "%s/ckpt-5.flc/ckpt-6.flc", g_dir);
  ck_assert_int_eq(fl_ckpt_writer_open(bad, &w), FL_EIO);
  ck_assert_int_eq(fl_ckpt_dir_begin(path, 6, &w), FL_EIO);

  /* the disk fills up in the middle of a big replacement (a file-size
   * limit stands in for ENOSPC): FL_EIO, the old file intact, no temp */
  struct rlimit old, lim;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_IGN);
  lim = old;
  lim.rlim_cur = 64 * 1024;
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  size_t nbig = 1 << 20;
  float *big = calloc(nbig, sizeof *big);
  int64_t shape[1] = {(int64_t)nbig};
  ck_assert_int_eq(fl_ckpt_writer_open(path, &w), FL_OK);
  fl_status st = fl_ckpt_put(w, "big", FL_CKPT_F32, 1, shape, big);
  fl_status st2 = fl_ckpt_writer_commit(w);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  free(big);
  ck_assert(st == FL_EIO || st2 == FL_EIO);
  ck_assert_int_eq(st2, FL_EIO);
  ck_assert_int_eq(fl_ckpt_load(path, &c), FL_OK);
  check_content(c, 5);
  fl_ckpt_free(c);
  ck_assert_uint_eq(count_entries(g_dir), 1);

  /* an aborted write leaves the old file too */
  ck_assert_int_eq(fl_ckpt_writer_open(path, &w), FL_OK);
  fill(w, 6);
  fl_ckpt_writer_abort(w);
  ck_assert_int_eq(fl_ckpt_load(path, &c), FL_OK);
  check_content(c, 5);
  fl_ckpt_free(c);
  ck_assert_uint_eq(count_entries(g_dir), 1);

  /* and a successful one replaces it */
  write_file(path, 6);
  ck_assert_int_eq(fl_ckpt_load(path, &c), FL_OK);
  check_content(c, 6);
  fl_ckpt_free(c);
  ck_assert_uint_eq(count_entries(g_dir), 1);
  ck_assert_int_eq(fl_ckpt_load(bad, &c), FL_EIO);
}
END_TEST

static int exists(const char *dir, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

/* The pid of a process that has exited (and was reaped). */
static pid_t dead_pid(void) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) _exit(0);
  ck_assert_int_eq(waitpid(p, NULL, 0), p);
  return p;
}

/* Fault 7: kill -9 during a write left .ckpt-N.flc.tmp.PID.0 forever.  Start
 * (include_self) and prune remove those of dead writers, never a live
 * writer's. */
START_TEST(test_stale_tmp_removed) {
  char dir[256], dead[128], live[128], mine[128];
  size_t n;
  fl_ckpt_writer *w;
  quiet();
  snprintf(dir, sizeof dir, "%s/ck", g_dir);
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  snprintf(dead, sizeof dead, ".ckpt-40.flc.tmp.%ld.0", (long)dead_pid());
  snprintf(live, sizeof live, ".ckpt-50.flc.tmp.%ld.3", (long)getppid());
  snprintf(mine, sizeof mine, ".ckpt-60.flc.tmp.%ld.7", (long)getpid());
  const char *names[] = {dead, live, mine, ".ckpt-7.flc.tmp.x.0", "notes.txt"};
  for (int i = 0; i < 5; i++) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    fclose(fopen(p, "w"));
  }
  /* a prune (during a run) keeps our own: it may be a write in progress */
  ck_assert_int_eq(fl_ckpt_dir_begin(dir, 10, &w), FL_OK);
  fill(w, 10);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_prune(dir, 1), FL_OK);
  ck_assert(!exists(dir, dead));
  ck_assert(exists(dir, live));
  ck_assert(exists(dir, mine));
  ck_assert(exists(dir, ".ckpt-7.flc.tmp.x.0"));
  ck_assert(exists(dir, "notes.txt"));
  ck_assert(exists(dir, "ckpt-10.flc"));
  /* at start nothing of ours is being written */
  ck_assert_int_eq(fl_ckpt_dir_clean_tmp(dir, 1, &n), FL_OK);
  ck_assert_uint_eq(n, 1);
  ck_assert(!exists(dir, mine));
  ck_assert(exists(dir, live));
  ck_assert_int_eq(fl_ckpt_dir_clean_tmp("/nonexistent/fl", 1, &n), FL_OK);
  ck_assert_uint_eq(n, 0);
}
END_TEST

/* A checkpoint of step `step` in dir with identity id (NULL: none, as
 * written before identities existed). */
static void write_run(const char *dir, int64_t step, const fl_run_identity *id) {
  fl_ckpt_writer *w;
  ck_assert_int_eq(fl_ckpt_dir_begin(dir, step, &w), FL_OK);
  if (id) ck_assert_int_eq(fl_run_identity_put(w, id), FL_OK);
  fill(w, step);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
}

static fl_run_identity ident(uint64_t hash, const char *run) {
  fl_run_identity id;
  memset(&id, 0, sizeof id);
  id.job_hash = hash;
  snprintf(id.run_id, sizeof id.run_id, "%s", run);
  return id;
}

/* Fault 1: a new run meeting another run's checkpoints refuses (nothing
 * changed), resumes its own, continues another's only with --resume, and
 * --fresh moves them aside without deleting; a checkpoint without identity
 * is another run's. */
START_TEST(test_claim_identity) {
  char dir[256], old[512];
  fl_run_identity a = ident(0x1111, "run-a"), b = ident(0x1111, "run-b"), got;
  fl_run_identity c2 = ident(0x2222, "run-a");
  fl_ckpt *c;
  int64_t step, steps[8];
  size_t n;
  quiet();
  snprintf(dir, sizeof dir, "%s/ck", g_dir);
  /* empty (missing) directory: start from scratch */
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &a, FL_CKPT_START_AUTO, 1, &c, &step), FL_OK);
  ck_assert_ptr_null(c);
  write_run(dir, 1000, &a);
  write_run(dir, 2000, &a);
  /* our own: resume from the newest */
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &a, FL_CKPT_START_AUTO, 1, &c, &step), FL_OK);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(step, 2000);
  ck_assert_int_eq(fl_run_identity_get(c, "x", &got), FL_OK);
  ck_assert(fl_run_identity_same(&got, &a));
  fl_ckpt_free(c);
  /* another run (same job, or same run id with a changed job): refused */
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_AUTO, 1, &c, &step), FL_ESTATE);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &c2, FL_CKPT_START_AUTO, 1, &c, &step), FL_ESTATE);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 2);
  /* --resume takes it */
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_RESUME, 1, &c, &step), FL_OK);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(step, 2000);
  fl_ckpt_free(c);
  /* --fresh on a rank that does not own the directory: nothing moves */
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_FRESH, 0, &c, &step), FL_OK);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 2);
  /* --fresh: moved aside, nothing deleted */
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_FRESH, 1, &c, &step), FL_OK);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(fl_ckpt_dir_list(dir, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 0);
  DIR *d = opendir(dir);
  struct dirent *e;
  old[0] = '\0';
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "old-", 4)) snprintf(old, sizeof old, "%s/%s", dir, e->d_name);
  closedir(d);
  ck_assert(old[0]);
  ck_assert_int_eq(fl_ckpt_dir_list(old, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(steps[0], 2000);
  /* the new run's checkpoints, small steps, are its own now */
  write_run(dir, 5, &b);
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_AUTO, 1, &c, &step), FL_OK);
  ck_assert_int_eq(step, 5);
  fl_ckpt_free(c);
  /* a checkpoint from before identities: another run's */
  write_run(dir, 9, NULL);
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_AUTO, 1, &c, &step), FL_ESTATE);
  ck_assert_int_eq(fl_ckpt_dir_claim(dir, &b, FL_CKPT_START_RESUME, 1, &c, &step), FL_OK);
  ck_assert_int_eq(step, 9);
  ck_assert_int_eq(fl_run_identity_get(c, "x", &got), FL_ENOTFOUND);
  fl_ckpt_free(c);
}
END_TEST

/* The job hash covers the model and optimizer sections only. */
START_TEST(test_job_hash) {
  fl_job j;
  uint64_t h0, h;
  fl_job_defaults(&j);
  ck_assert_int_eq(fl_job_hash(&j, &h0), FL_OK);
  j.train.epochs += 3; /* another section: same job */
  ck_assert_int_eq(fl_job_hash(&j, &h), FL_OK);
  ck_assert_uint_eq(h, h0);
  j.optimizer.lr *= 2.0f;
  ck_assert_int_eq(fl_job_hash(&j, &h), FL_OK);
  ck_assert_uint_ne(h, h0);
  fl_job_defaults(&j);
  j.model.num_classes += 1;
  ck_assert_int_eq(fl_job_hash(&j, &h), FL_OK);
  ck_assert_uint_ne(h, h0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt");
  TCase *tc = tcase_create("format");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_writer_errors);
  tcase_add_test(tc, test_truncated_everywhere);
  tcase_add_test(tc, test_flipped_everywhere);
  tcase_add_test(tc, test_dir_newest_valid);
  tcase_add_test(tc, test_commit_as);
  tcase_add_test(tc, test_atomic_failed_write);
  tcase_add_test(tc, test_stale_tmp_removed);
  tcase_add_test(tc, test_claim_identity);
  tcase_add_test(tc, test_job_hash);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
