/* fuzz_ckpt.c - the checkpoint reader (fl_ckpt_load_mem / fl_ckpt_load) on
 * hostile files.
 *
 * Input: one flag byte, then the file image.  Flags:
 *   bit 0  repair the trailer first (end magic, records-end offset and
 *          CRC-32 made consistent), so that mutations reach the record
 *          parser instead of stopping at the checksum;
 *   bit 1  load through a file (a memfd under /proc/self/fd) instead of
 *          from memory.
 * Invariants: a refused file gives FL_ECORRUPT (or FL_EIO for the file
 * path); an accepted one hands out records whose data lie inside it, that
 * fl_ckpt_find / fl_ckpt_read / fl_ckpt_get_i64 return consistently, and
 * that a writer given the same records reproduces the file byte for byte
 * (the format has exactly one encoding of a record list). */
#include <config.h>

#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_ckpt.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (1 << 20)
#define TRAILER 32

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Make the trailer of buf[0..len) agree with the bytes before it. */
static void repair(uint8_t *buf, size_t len) {
  if (len < 16 + TRAILER) return;
  size_t t = len - TRAILER;
  memcpy(buf + t, "FLCKEND\n", 8);
  put_le(buf + t + 16, t, 8);
  put_le(buf + t + 28, 0, 4);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, buf, (uInt)(t + 24));
  put_le(buf + t + 24, crc, 4);
}

static fl_status load_file(const uint8_t *buf, size_t len, fl_ckpt **out) {
  char path[64];
  int fd = fuzz_memfile(buf, len, path, sizeof path);
  fl_status st = fl_ckpt_load(path, out);
  close(fd);
  return st;
}

/* Every record of an accepted checkpoint, checked and written again. */
static void check_loaded(const fl_ckpt *c, const uint8_t *file, size_t len) {
  size_t n = fl_ckpt_count(c);
  fl_ckpt_writer *w = NULL;
  fl_ckpt_record r, f;
  void *again = NULL;
  size_t again_len = 0;

  FUZZ_CHECK(fl_ckpt_writer_open_mem(&w) == FL_OK, "open_mem");
  for (size_t i = 0; i < n; i++) {
    FUZZ_CHECK(fl_ckpt_record_at(c, i, &r) == FL_OK, "record %zu of %zu", i, n);
    FUZZ_CHECK(r.ndim >= 0 && r.ndim <= FL_CKPT_MAX_DIMS, "ndim %d", r.ndim);
    FUZZ_CHECK(fl_ckpt_dtype_size(r.dtype) != 0, "dtype %d", (int)r.dtype);
    uint64_t elems = 1;
    for (int d = 0; d < r.ndim; d++) {
      FUZZ_CHECK(r.shape[d] >= 0, "shape[%d] = %lld", d, (long long)r.shape[d]);
      elems *= (uint64_t)r.shape[d];
    }
    FUZZ_CHECK(r.nbytes == elems * fl_ckpt_dtype_size(r.dtype), "%s: %zu bytes", r.name,
               r.nbytes);
    FUZZ_CHECK(r.nbytes <= len && ((uintptr_t)r.data & 7u) == 0, "%s: data", r.name);
    FUZZ_CHECK(fl_ckpt_find(c, r.name, &f) == FL_OK && f.data == r.data, "find %s", r.name);
    void *copy = malloc(r.nbytes ? r.nbytes : 1);
    FUZZ_CHECK(copy != NULL, "malloc");
    FUZZ_CHECK(fl_ckpt_read(c, r.name, r.dtype, r.ndim, r.shape, copy) == FL_OK, "read %s",
               r.name);
    FUZZ_CHECK(!r.nbytes || !memcmp(copy, r.data, r.nbytes), "read %s: bytes differ", r.name);
    free(copy);
    int64_t v;
    fl_status gs = fl_ckpt_get_i64(c, r.name, &v);
    FUZZ_CHECK(gs == ((r.dtype == FL_CKPT_I64 && r.ndim == 0) ? FL_OK : FL_EINVAL),
               "get_i64 %s: %d", r.name, (int)gs);
    FUZZ_CHECK(fl_ckpt_put(w, r.name, r.dtype, r.ndim, r.shape, r.data) == FL_OK, "put %s",
               r.name);
  }
  FUZZ_CHECK(fl_ckpt_record_at(c, n, &r) == FL_EINVAL, "record past the end");
  FUZZ_CHECK(fl_ckpt_writer_commit_mem(w, &again, &again_len) == FL_OK, "commit_mem");
  FUZZ_CHECK(again_len == len && !memcmp(again, file, len),
             "%zu records written again give %zu bytes, the file has %zu (or differ)", n,
             again_len, len);
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  uint8_t flags = data[0];
  size_t len = size - 1;
  uint8_t *buf = malloc(len ? len : 1);
  fl_ckpt *c = NULL;
  if (!buf) return 0;
  memcpy(buf, data + 1, len);
  if (flags & 1) repair(buf, len);

  fl_status st = (flags & 2) ? load_file(buf, len, &c) : fl_ckpt_load_mem(buf, len, "fuzz.flc", &c);
  if (st == FL_OK) {
    check_loaded(c, buf, len);
    fl_ckpt_free(c);
  } else {
    FUZZ_CHECK(st == FL_ECORRUPT, "status %d", (int)st);
  }
  free(buf);
  return 0;
}
