/* data_inputs.c - named, typed inputs (data.inputs): one .npy file per
 * model input, all with the same sample count so that one permutation
 * shuffles them together, and the conversion of each sample to what the
 * model input takes (float or int64), done as the loader gathers it.
 *
 * Why convert per sample instead of at load: the files stay mapped as
 * numpy wrote them (ranks on a node share the page cache), and what an
 * input takes is only known once the model is built (its graph input's
 * element type), after the data is opened. */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_data.h"
#include "fl_log.h"

/* IEEE half to float. */
static float half_to_float(uint16_t h) {
  const int sign = h >> 15, ex = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (ex == 0) v = ldexpf((float)man, -24);
  else if (ex == 31) v = man ? NAN : INFINITY;
  else v = ldexpf((float)(man | 0x400), ex - 25);
  return sign ? -v : v;
}

/* Open input k of spec into out->inputs[k]; its sample count into *n. */
static fl_status open_input(const fl_npy_inputs *spec, size_t k, fl_dataset *out, size_t *n) {
  fl_data_input *in = &out->inputs[k];
  const char *path = spec->paths[k];
  if (!spec->names[k] || !spec->names[k][0] || strlen(spec->names[k]) >= sizeof in->name)
    return FL_ERR(FL_EINVAL, "%s: data input %zu needs a name of 1..%zu bytes", path ? path : "",
                  k, sizeof in->name - 1);
  FL_TRY(fl_npy_open(path, &in->file));
  out->n_inputs = k + 1; /* from here fl_dataset_free closes it */
  snprintf(in->name, sizeof in->name, "%s", spec->names[k]);
  in->dtype = fl_npy_dtype_of(in->file);
  in->elem = FL_DATA_F32;
  in->scale = spec->scale;
  const int nd = fl_npy_ndim(in->file);
  const int64_t *sh = fl_npy_shape(in->file);
  if (nd < 1 || sh[0] == 0)
    return FL_ERR(FL_EINVAL, "%s: input '%s' holds no samples (shape %s)", path, in->name,
                  nd < 1 ? "()" : "(0, ...)");
  in->dim = 1;
  for (int d = 1; d < nd; d++) in->dim *= (size_t)sh[d];
  if (in->dim == 0)
    return FL_ERR(FL_EINVAL, "%s: input '%s' has samples of zero values", path, in->name);
  *n = (size_t)sh[0];
  return FL_OK;
}

/* Every input and the labels hold the same number of samples. */
static fl_status same_counts(const fl_npy_inputs *spec, const size_t *cnt, size_t ny) {
  for (size_t k = 0; k <= spec->n; k++) {
    const size_t c = k < spec->n ? cnt[k] : ny;
    if (c != cnt[0])
      return FL_ERR(FL_EINVAL, "%s has %zu samples but %s has %zu: every data input and the "
                    "labels must hold the same samples", spec->paths[0], cnt[0],
                    k < spec->n ? spec->paths[k] : spec->y_path, c);
  }
  return FL_OK;
}

static fl_status load_inputs(const fl_npy_inputs *spec, fl_dataset *out) {
  size_t cnt[FL_DATA_MAX_INPUTS];
  if (spec->n < 1 || spec->n > FL_DATA_MAX_INPUTS || !spec->y_path)
    return FL_ERR(FL_EINVAL, "data: %zu named inputs (1..%d) and a labels file needed", spec->n,
                  FL_DATA_MAX_INPUTS);
  for (size_t k = 0; k < spec->n; k++) {
    for (size_t j = 0; j < k; j++)
      if (spec->names[j] && spec->names[k] && !strcmp(spec->names[j], spec->names[k]))
        return FL_ERR(FL_EINVAL, "%s: input '%s' is named twice", spec->paths[k], spec->names[k]);
    FL_TRY(open_input(spec, k, out, &cnt[k]));
  }
  fl_npy *yf;
  FL_TRY(fl_npy_open(spec->y_path, &yf));
  const size_t ny = fl_npy_ndim(yf) >= 1 ? (size_t)fl_npy_shape(yf)[0] : 0;
  fl_status st = same_counts(spec, cnt, ny);
  size_t n = cnt[0];
  if (spec->limit > 0 && spec->limit < n) n = spec->limit;
  if (st == FL_OK) st = fl_npy_labels(yf, n, spec->num_classes, 1, spec->ignore_index, out);
  if (out->maps[1] != yf) fl_npy_close(yf); /* class ids were copied */
  FL_TRY(st);
  const fl_data_input *first = &out->inputs[0];
  out->n = n;
  out->dim = first->dim;
  out->num_classes = spec->num_classes;
  out->sample_ndim = fl_npy_ndim(first->file) - 1;
  for (int d = 0; d < out->sample_ndim; d++)
    out->sample_shape[d] = fl_npy_shape(first->file)[d + 1];
  out->channels = out->height = 1;
  out->width = first->dim > INT32_MAX ? 0 : (int)first->dim;
  return FL_OK;
}

fl_status fl_npy_load_inputs(const fl_npy_inputs *spec, fl_dataset *out) {
  memset(out, 0, sizeof *out);
  if (!spec) return FL_ERR(FL_EINVAL, "data: NULL inputs");
  const fl_status st = load_inputs(spec, out);
  if (st != FL_OK) fl_dataset_free(out);
  return st;
}

fl_status fl_dataset_bind_input(fl_dataset *d, size_t k, fl_data_elem elem, int cast_to_int) {
  if (k >= d->n_inputs) return FL_ERR(FL_EINVAL, "data: no input %zu", k);
  fl_data_input *in = &d->inputs[k];
  const char *path = fl_npy_name(in->file), *dt = fl_npy_dtype_name(in->dtype);
  const int is_float = in->dtype == FL_NPY_F32 || in->dtype == FL_NPY_F16;
  if (elem == FL_DATA_I64 && is_float)
    return FL_ERR(FL_EINVAL, "%s: input '%s' is int64 in the model but the file holds %s; save "
                  "the ids as int64 (numpy .astype('int64'))", path, in->name, dt);
  if (elem == FL_DATA_F32 && !is_float && in->dtype != FL_NPY_U8)
    return FL_ERR(FL_EINVAL, "%s: input '%s' is float in the model but the file holds %s; save "
                  "it as float32", path, in->name, dt);
  if (elem == FL_DATA_F32 && in->dtype == FL_NPY_U8 && cast_to_int)
    return FL_ERR(FL_EINVAL, "%s: input '%s' holds uint8 for a float model input that the graph "
                  "casts to an integer type right away: the ids would be scaled by data.scale; "
                  "export the model with an int64 input, or save the ids as float32", path,
                  in->name);
  if (elem != FL_DATA_F32 && elem != FL_DATA_I64)
    return FL_ERR(FL_EINVAL, "%s: input '%s': unknown element type %d", path, in->name, (int)elem);
  in->elem = elem;
  return FL_OK;
}

/* Element i of in's file as a double (exact for every stored type but
 * int64 beyond 2^53, which is copied directly where it matters). */
static double elem_at(const fl_data_input *in, size_t i) {
  const void *p = fl_npy_data(in->file);
  switch (in->dtype) {
  case FL_NPY_F32: return ((const float *)p)[i];
  case FL_NPY_F16: return half_to_float(((const uint16_t *)p)[i]);
  case FL_NPY_U8: return ((const uint8_t *)p)[i];
  case FL_NPY_BOOL: return ((const uint8_t *)p)[i] != 0;
  case FL_NPY_I32: return ((const int32_t *)p)[i];
  case FL_NPY_I64: return (double)((const int64_t *)p)[i];
  }
  return 0.0;
}

void fl_dataset_input_rows(const fl_dataset *d, size_t k, size_t first, size_t count, void *dst) {
  const fl_data_input *in = &d->inputs[k];
  const size_t a = first * in->dim, total = count * in->dim;
  if (in->elem == FL_DATA_I64) {
    int64_t *o = dst;
    if (in->dtype == FL_NPY_I64) {
      memcpy(o, (const int64_t *)fl_npy_data(in->file) + a, total * sizeof *o);
      return;
    }
    for (size_t i = 0; i < total; i++) o[i] = (int64_t)elem_at(in, a + i);
    return;
  }
  float *o = dst;
  const float s = in->dtype == FL_NPY_U8 ? in->scale : 1.0f;
  for (size_t i = 0; i < total; i++) o[i] = (float)elem_at(in, a + i) * s;
}
