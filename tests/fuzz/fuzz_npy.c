/* fuzz_npy.c - the .npy reader (fl_npy_open_mem, fl_npy_open) and the npy
 * dataset loader (fl_npy_load) on hostile files.
 *
 * Input: one flag byte, then the bytes.
 *   bit 0 clear: the bytes are one .npy file, read from memory and from a
 *                file (a memfd); both readers must agree on the status and,
 *                when accepted, on dtype, shape and payload.
 *   bit 0 set:   a features file and a labels file: the next two bytes are
 *                the features file's length (little-endian, clamped), the
 *                labels file is the rest; num_classes = 1 + (flag >> 1)
 *                (1..128), limit 0 or 3 (bit 7... taken from the length's
 *                top bit).
 * Invariants: a refused file gives FL_EPROTO or FL_EINVAL (never FL_EIO or
 * FL_ENOMEM: see replay.c) and a NULL handle / zeroed dataset; an accepted
 * file has ndim <= FL_DATA_MAX_DIMS, count == prod(shape), its payload
 * aligned and equal to the file's last count*size bytes; an accepted
 * dataset has n >= 1, dim >= 1, class ids in [0, num_classes) or float
 * targets, and fl_dataset_rows reads every sample. */
#include <config.h>

#include <string.h>
#include <unistd.h>

#include "fl_data.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (1 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

static size_t elem_size(fl_npy_dtype dt) {
  return dt == FL_NPY_U8 || dt == FL_NPY_BOOL ? 1 : dt == FL_NPY_I64 ? 8 : dt == FL_NPY_F16 ? 2 : 4;
}

static void check_file(const fl_npy *cf, const uint8_t *p, size_t n) {
  fl_npy *f = (fl_npy *)cf;
  FUZZ_CHECK(fl_npy_ndim(f) >= 0 && fl_npy_ndim(f) <= FL_DATA_MAX_DIMS, "ndim %d",
             fl_npy_ndim(f));
  size_t count = 1;
  for (int i = 0; i < fl_npy_ndim(f); i++) {
    FUZZ_CHECK(fl_npy_shape(f)[i] >= 0, "negative dim");
    count *= (size_t)fl_npy_shape(f)[i];
  }
  FUZZ_CHECK(count == fl_npy_count(f), "count %zu, shape says %zu", fl_npy_count(f), count);
  size_t es = elem_size(fl_npy_dtype_of(f)), bytes = count * es;
  FUZZ_CHECK(bytes <= n, "payload %zu bytes in a %zu-byte file", bytes, n);
  FUZZ_CHECK((uintptr_t)fl_npy_data(f) % es == 0, "payload not aligned");
  FUZZ_CHECK(bytes == 0 || memcmp(fl_npy_data(f), p + n - bytes, bytes) == 0,
             "payload differs from the file's tail");
}

static void one_file(const uint8_t *p, size_t n) {
  fl_npy *a = NULL, *b = NULL;
  char path[64];
  fl_status sa = fl_npy_open_mem(p, n, "fuzz.npy", &a);
  int fd = fuzz_memfile(p, n, path, sizeof path);
  fl_status sb = fl_npy_open(path, &b);
  close(fd);
  FUZZ_CHECK(sa == sb, "memory reader says %d, file reader %d", (int)sa, (int)sb);
  if (sa != FL_OK) {
    FUZZ_CHECK(sa == FL_EPROTO || sa == FL_EINVAL, "status %d", (int)sa);
    FUZZ_CHECK(a == NULL && b == NULL, "handle set on error");
    return;
  }
  check_file(a, p, n);
  check_file(b, p, n);
  FUZZ_CHECK(fl_npy_dtype_of(a) == fl_npy_dtype_of(b) && fl_npy_ndim(a) == fl_npy_ndim(b) &&
                 !memcmp(fl_npy_shape(a), fl_npy_shape(b), (size_t)fl_npy_ndim(a) * sizeof(int64_t)),
             "readers disagree on dtype or shape");
  fl_npy_close(a);
  fl_npy_close(b);
}

static void two_files(uint8_t flags, const uint8_t *p, size_t n) {
  if (n < 2) return;
  uint16_t raw = fuzz_u16(p);
  size_t xl = raw & 0x7fff, limit = (raw & 0x8000) ? 3 : 0;
  p += 2;
  n -= 2;
  if (xl > n) xl = n;
  int nc = 1 + (flags >> 1);
  char xp[64], yp[64];
  int xfd = fuzz_memfile(p, xl, xp, sizeof xp);
  int yfd = fuzz_memfile(p + xl, n - xl, yp, sizeof yp);
  fl_dataset d;
  fl_status st = fl_npy_load(xp, yp, nc, FL_NPY_DEFAULT_SCALE, limit, &d);
  close(xfd);
  close(yfd);
  if (st != FL_OK) {
    FUZZ_CHECK(st == FL_EPROTO || st == FL_EINVAL, "status %d", (int)st);
    FUZZ_CHECK(d.n == 0 && !d.x && !d.xq && !d.y && !d.t && !d.maps[0] && !d.maps[1],
               "dataset not zeroed");
    return;
  }
  FUZZ_CHECK(d.n >= 1 && d.dim >= 1, "n %zu dim %zu", d.n, d.dim);
  FUZZ_CHECK(limit == 0 || d.n <= limit, "n %zu past limit %zu", d.n, limit);
  FUZZ_CHECK(!d.x != !d.xq, "exactly one of x / xq");
  FUZZ_CHECK(!d.y != !d.t, "exactly one of y / t");
  for (size_t i = 0; d.y && i < d.n; i++)
    FUZZ_CHECK(d.y[i] >= 0 && d.y[i] < nc, "label %d of %d", (int)d.y[i], nc);
  FUZZ_CHECK(!d.t || d.tdim >= 1, "tdim %zu", d.tdim);
  float *row = malloc(d.dim * sizeof *row);
  FUZZ_CHECK(row != NULL, "malloc");
  volatile float sink = 0;
  for (size_t i = 0; i < d.n; i++) {
    const float *r = fl_dataset_rows(&d, i, 1, row);
    sink += r[0] + r[d.dim - 1];
    if (d.t) sink += d.t[i * d.tdim + d.tdim - 1];
  }
  (void)sink;
  free(row);
  fl_dataset_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  if (data[0] & 1)
    two_files(data[0], data + 1, size - 1);
  else
    one_file(data + 1, size - 1);
  return 0;
}
