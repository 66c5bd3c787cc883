/* log_capture.h - what a unit test's calls log to stderr, captured in an
 * anonymous temporary file and read back as one string, for the tests that
 * check an error names what is wrong.  One capture at a time per program. */
#ifndef LOG_CAPTURE_H
#define LOG_CAPTURE_H

#include <check.h>
#include <stdio.h>
#include <unistd.h>

static FILE *lc_file;
static int lc_saved = -1;

/* Send stderr to a fresh temporary file until capture_end. */
static inline void capture_begin(void) {
  fflush(stderr);
  lc_file = tmpfile();
  ck_assert_ptr_nonnull(lc_file);
  lc_saved = dup(STDERR_FILENO);
  ck_assert_int_ge(lc_saved, 0);
  ck_assert_int_ge(dup2(fileno(lc_file), STDERR_FILENO), 0);
}

/* Give stderr back and return what was written meanwhile (its first
 * 16 KiB): a static buffer, valid until the next capture_end. */
static inline char *capture_end(void) {
  static char buf[16384];
  fflush(stderr);
  dup2(lc_saved, STDERR_FILENO);
  close(lc_saved);
  rewind(lc_file);
  const size_t n = fread(buf, 1, sizeof buf - 1, lc_file);
  buf[n] = '\0';
  fclose(lc_file);
  return buf;
}

#endif
