/* fuzz.h - what the harnesses in tests/fuzz share.
 *
 * Each fuzz_<name>.c defines LLVMFuzzerTestOneInput (and
 * LLVMFuzzerInitialize) and is built two ways from the same source:
 *   - by `make fuzz` (tests/fuzz/run.sh) in a separate clang tree with
 *     -fsanitize=fuzzer,address,undefined: a libFuzzer binary
 *     (FL_FUZZ_LIBFUZZER is defined there, replay.c compiles to nothing
 *     and libFuzzer brings main);
 *   - by every ordinary tree as a Check test (replay.c's main) that feeds
 *     each file of tests/fuzz/corpus/<name>/ through the harness, so the
 *     committed corpus is a regression test under gcc, ASan/UBSan and
 *     valgrind alike.
 * A harness returns 0 for every input; an input that breaks an invariant
 * (FUZZ_CHECK) aborts, which both modes report as a failure.  The input
 * reaches a loader of files as a memory file (fuzz_memfile), gzipped
 * where the harness asks (fuzz_gzip). */
#ifndef FL_FUZZ_H
#define FL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifdef FL_FUZZ_LIBFUZZER
#define FUZZ_ENGINE 1
#else
#define FUZZ_ENGINE 0
#endif

/* Under libFuzzer the library's error lines (one or more per rejected
 * input) would bury the report and slow the run, so they are off unless
 * FLOTILLA_LOG_LEVEL asks for them (set it when reproducing a crash).  The
 * replay keeps them: there every message is formatted and checked by the
 * sanitizers too. */
static inline void fuzz_init_logging(void) {
  if (FUZZ_ENGINE && !getenv("FLOTILLA_LOG_LEVEL")) fl_log_set_level(FL_LOG_OFF);
}

/* An invariant on what the library accepted or returned. */
#define FUZZ_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: fuzz invariant failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                           \
      abort();                                                                       \
    }                                                                                \
  } while (0)

/* Little-endian reads of the harness's own framing bytes. */
static inline uint16_t fuzz_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t fuzz_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* p[0..n) as a file: a memory file, whose path (/proc/self/fd/N) goes into
 * path (cap bytes); returns its descriptor, which the caller closes. */
static inline int fuzz_memfile(const uint8_t *p, size_t n, char *path, size_t cap) {
  int fd = memfd_create("fuzz_input", MFD_CLOEXEC);
  FUZZ_CHECK(fd >= 0, "memfd_create");
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, p + off, n - off);
    FUZZ_CHECK(w > 0, "write to memfd");
    off += (size_t)w;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

/* p[0..n) gzip-compressed: *zn bytes the caller frees. */
static inline uint8_t *fuzz_gzip(const uint8_t *p, size_t n, size_t *zn) {
  z_stream s;
  memset(&s, 0, sizeof s);
  FUZZ_CHECK(deflateInit2(&s, 1, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflate");
  size_t cap = deflateBound(&s, (uLong)n) + 32;
  uint8_t *z = malloc(cap);
  FUZZ_CHECK(z != NULL, "malloc");
  s.next_in = (Bytef *)(uintptr_t)p;
  s.avail_in = (uInt)n;
  s.next_out = z;
  s.avail_out = (uInt)cap;
  FUZZ_CHECK(deflate(&s, Z_FINISH) == Z_STREAM_END, "deflate");
  *zn = cap - s.avail_out;
  deflateEnd(&s);
  return z;
}

#endif
