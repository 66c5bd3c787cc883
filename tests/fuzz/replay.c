/* replay.c - a harness's committed corpus as a Check test (see fuzz.h).
 *
 * Built with one fuzz_<name>.c and -DFUZZ_NAME=<name>, it feeds every file
 * of $FL_SRCDIR/tests/fuzz/corpus/<name>/ (and of any file or directory
 * given on the command line) through LLVMFuzzerTestOneInput, one forked
 * Check iteration per file, so a crash, an abort of a FUZZ_CHECK, a leak
 * or a sanitizer report names the file that caused it.  Under libFuzzer
 * (FL_FUZZ_LIBFUZZER) this file is empty: libFuzzer brings main.
 *
 * Memory is capped (4 GiB of address space, or 2 GiB per allocation under
 * ASan) the way libFuzzer's -malloc_limit_mb caps it, so that an input that
 * makes the library ask for gigabytes (a size taken on trust from a header)
 * fails with FL_ENOMEM here too, which the harnesses refuse: none of their
 * inputs legitimately needs that much. */
#include <config.h>

#ifndef FL_FUZZ_LIBFUZZER
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "fuzz.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif

#ifdef FUZZ_ASAN
/* ASan's defaults for this program (ASAN_OPTIONS from the environment are
 * applied after them): a too large allocation returns NULL. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "max_allocation_size_mb=2048:allocator_may_return_null=1";
}
#endif

/* RLIMIT_AS of 4 GiB, unless ASan (which maps terabytes of shadow) or
 * valgrind (its own address space) runs the program. */
static void cap_memory(void) {
#ifndef FUZZ_ASAN
  const rlim_t cap = (rlim_t)4 << 30;
  const char *pre = getenv("LD_PRELOAD");
  struct rlimit rl;
  if (pre && strstr(pre, "vgpreload")) return;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= cap))
    return;
  rl.rlim_cur = cap;
  if (setrlimit(RLIMIT_AS, &rl) != 0) perror("replay: setrlimit(RLIMIT_AS)");
#endif
}

#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)

static char **g_files; /* owned: every input, sorted within each directory */
static size_t g_n, g_cap;

static void add_file(const char *path) {
  if (g_n == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 64;
    g_files = realloc(g_files, g_cap * sizeof *g_files);
    if (!g_files) abort();
  }
  if (!(g_files[g_n++] = strdup(path))) abort();
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Add path, or every regular file directly in it when it is a directory
 * (names starting with '.' skipped).  A missing path adds nothing. */
static void add_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    add_file(path);
    return;
  }
  DIR *d = opendir(path);
  if (!d) return;
  size_t first = g_n;
  struct dirent *e;
  while ((e = readdir(d))) {
    char p[4096];
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) add_file(p);
  }
  closedir(d);
  qsort(g_files + first, g_n - first, sizeof *g_files, cmp_str);
}

/* The whole file at path (malloc'd, at least 1 byte so that an empty
 * input still has a valid pointer). */
static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  if (!f) return NULL;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) break;
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad || !buf) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

START_TEST(corpus_present) {
  ck_assert_msg(g_n > 0, "no corpus files for " FUZZ_STR(FUZZ_NAME)
                " (is FL_SRCDIR set to the source tree?)");
}
END_TEST

START_TEST(replay_one) {
  size_t len = 0;
  uint8_t *buf = slurp(g_files[_i], &len);
  ck_assert_msg(buf != NULL, "cannot read %s", g_files[_i]);
  fprintf(stderr, "replay: %s (%zu bytes)\n", g_files[_i], len);
  ck_assert_int_eq(LLVMFuzzerTestOneInput(buf, len), 0);
  free(buf);
}
END_TEST

int main(int argc, char **argv) {
  char dir[4096];
  const char *src = getenv("FL_SRCDIR");
  cap_memory();
  LLVMFuzzerInitialize(&argc, &argv);
  snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", src ? src : ".", FUZZ_STR(FUZZ_NAME));
  add_path(dir);
  for (int i = 1; i < argc; i++) add_path(argv[i]);

  Suite *s = suite_create("fuzz_" FUZZ_STR(FUZZ_NAME) "_replay");
  TCase *tc = tcase_create("corpus");
  tcase_add_test(tc, corpus_present);
  tcase_add_loop_test(tc, replay_one, 0, (int)g_n);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  for (size_t i = 0; i < g_n; i++) free(g_files[i]);
  free(g_files);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif
