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
 * (FUZZ_CHECK) aborts, which both modes report as a failure. */
#ifndef FL_FUZZ_H
#define FL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
