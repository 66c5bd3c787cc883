/* fl_ckpt.h - the checkpoint file: named records, checksummed, atomic.
 *
 * Trainers and pservers save the same kind of file (`.flc`): a list of
 * named records, each a dtype, a shape and raw little-endian bytes.
 * Tensors (parameters, optimizer state) and small metadata (step, epoch,
 * RNG state, mode) are all records; fl_ckpt_put_i64 and fl_ckpt_put_blob
 * are shorthands for 0-d int64 and 1-d uint8 records.
 *
 * Layout (all integers little-endian):
 *   header   "FLCKPT\r\n"  u32 version (1)  u32 header size (16)
 *   record*  u32 tag "REC1"  u16 name_len  u8 dtype  u8 ndim
 *            name bytes  i64 shape[ndim]  u64 nbytes
 *            zero padding to a multiple of 8 from the file start  data[nbytes]
 *   trailer  "FLCKEND\n"  u64 record count  u64 trailer offset  u32 crc  u32 0
 * The CRC-32 (zlib) covers every byte before the crc field.  A load reads
 * the whole file and verifies magic, version, trailer, CRC and every record
 * bound before handing anything out: truncation, a bad magic or a flipped
 * byte gives FL_ECORRUPT with the path and the offset.  Record data in a
 * loaded checkpoint is 8-byte aligned.
 *
 * Atomicity: a writer streams into a temporary file in the destination's
 * directory; commit writes the trailer, flushes, fsyncs, renames over the
 * destination and fsyncs the directory.  Any failure (ENOSPC, EIO, a
 * read-only dir) removes the temporary file, leaves the previous file at
 * the path untouched and returns FL_EIO with the reason logged.
 *
 * A directory of checkpoints holds `ckpt-<step>.flc`; fl_ckpt_dir_load_latest
 * takes the newest that verifies (warning about each corrupt newer one). */
#ifndef FL_CKPT_H
#define FL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FL_CKPT_MAX_DIMS 8
#define FL_CKPT_NAME_MAX 1024 /* record name bytes, without the NUL */
#define FL_CKPT_VERSION 1

typedef enum fl_ckpt_dtype {
  FL_CKPT_F32 = 1,
  FL_CKPT_F16 = 2,
  FL_CKPT_BF16 = 3,
  FL_CKPT_F64 = 4,
  FL_CKPT_I32 = 5,
  FL_CKPT_I64 = 6,
  FL_CKPT_U8 = 7,
  FL_CKPT_U64 = 8
} fl_ckpt_dtype;

/* Bytes per element of dtype (0 for an unknown dtype) and its name ("f32"...). */
size_t fl_ckpt_dtype_size(fl_ckpt_dtype dtype);
const char *fl_ckpt_dtype_name(fl_ckpt_dtype dtype);

/* ------------------------------------------------------------------ writer */
typedef struct fl_ckpt_writer fl_ckpt_writer;

/* Start a checkpoint that will replace path on commit (streams into a
 * temporary file beside it).  FL_EIO when the temporary cannot be created.
 * On success the caller owns *out and must end it with commit or abort. */
fl_status fl_ckpt_writer_open(const char *path, fl_ckpt_writer **out);

/* Start a checkpoint built in memory (for sending over the wire); end it
 * with fl_ckpt_writer_commit_mem or abort. */
fl_status fl_ckpt_writer_open_mem(fl_ckpt_writer **out);

/* Append a record: data holds nbytes = dtype size * prod(shape) bytes
 * (ndim 0 = a scalar, ndim <= FL_CKPT_MAX_DIMS, shape entries >= 0).  The
 * name must be unique in the file, 1..FL_CKPT_NAME_MAX bytes.  data is
 * copied (written) before return.  An error is sticky: later puts and the
 * commit return it without writing. */
fl_status fl_ckpt_put(fl_ckpt_writer *w, const char *name, fl_ckpt_dtype dtype, int ndim,
                      const int64_t *shape, const void *data);
/* A 0-d int64 record. */
fl_status fl_ckpt_put_i64(fl_ckpt_writer *w, const char *name, int64_t value);
/* A 1-d uint8 record of n bytes (strings, RNG state, opaque structs). */
fl_status fl_ckpt_put_blob(fl_ckpt_writer *w, const char *name, const void *data, size_t n);

/* Finish a file writer: trailer, fflush, fsync, rename, fsync of the
 * directory.  Frees w whatever the outcome.  FL_EIO (previous file intact)
 * or the sticky error of an earlier put. */
fl_status fl_ckpt_writer_commit(fl_ckpt_writer *w);
/* The same, but the file ends up at path instead of the one given to open
 * (for a name that depends on what was written, such as the step); path
 * must be in the same directory (FL_EINVAL otherwise).  Frees w. */
fl_status fl_ckpt_writer_commit_as(fl_ckpt_writer *w, const char *path);

/* Finish a memory writer: *buf (malloc'd, caller frees) and *len get the
 * complete file image.  Frees w whatever the outcome. */
fl_status fl_ckpt_writer_commit_mem(fl_ckpt_writer *w, void **buf, size_t *len);

/* Drop an unfinished checkpoint (removes the temporary file); frees w.
 * NULL is allowed. */
void fl_ckpt_writer_abort(fl_ckpt_writer *w);

/* ------------------------------------------------------------------ reader */
typedef struct fl_ckpt fl_ckpt;

/* One record of a loaded checkpoint; name and data point into the fl_ckpt
 * and stay valid until fl_ckpt_free. */
typedef struct fl_ckpt_record {
  const char *name;
  fl_ckpt_dtype dtype;
  int ndim;
  int64_t shape[FL_CKPT_MAX_DIMS];
  size_t nbytes;
  const void *data; /* 8-byte aligned */
} fl_ckpt_record;

/* Read and verify the file at path.  FL_EIO when it cannot be read,
 * FL_ECORRUPT (path and offset logged) when it does not verify.  The caller
 * owns *out (fl_ckpt_free). */
fl_status fl_ckpt_load(const char *path, fl_ckpt **out);

/* The same from a file image in memory (copied); name stands for the path
 * in messages. */
fl_status fl_ckpt_load_mem(const void *buf, size_t len, const char *name, fl_ckpt **out);

void fl_ckpt_free(fl_ckpt *c);

/* Number of records and the i-th one, in file order. */
size_t fl_ckpt_count(const fl_ckpt *c);
fl_status fl_ckpt_record_at(const fl_ckpt *c, size_t i, fl_ckpt_record *out);

/* The record called name: FL_ENOTFOUND (not logged) when absent. */
fl_status fl_ckpt_find(const fl_ckpt *c, const char *name, fl_ckpt_record *out);

/* A 0-d int64 record's value; FL_ENOTFOUND (not logged) when absent,
 * FL_EINVAL (logged) when the record is not a 0-d int64. */
fl_status fl_ckpt_get_i64(const fl_ckpt *c, const char *name, int64_t *value);

/* Copy a record into dst after checking it has exactly this dtype and
 * shape; FL_ENOTFOUND (logged) when absent, FL_EINVAL (logged, naming the
 * record and both shapes) when it differs. */
fl_status fl_ckpt_read(const fl_ckpt *c, const char *name, fl_ckpt_dtype dtype, int ndim,
                       const int64_t *shape, void *dst);

/* ------------------------------------------------------------ directories */

/* "<dir>/ckpt-<step>.flc" into out; FL_EINVAL when it does not fit. */
fl_status fl_ckpt_dir_path(const char *dir, int64_t step, char *out, size_t cap);

/* Create dir (and its parents) if needed, then open a writer for the
 * checkpoint of step.  FL_EIO when dir cannot be created. */
fl_status fl_ckpt_dir_begin(const char *dir, int64_t step, fl_ckpt_writer **out);
/* The same for a file called name beside the series (not a ckpt-<step>
 * name: the listing, pruning and loading of the series ignore it). */
fl_status fl_ckpt_dir_begin_named(const char *dir, const char *name, fl_ckpt_writer **out);

/* The steps of every ckpt-<step>.flc in dir, newest first, into steps[0..cap)
 * with the total in *n (may exceed cap).  A missing dir gives *n = 0. */
fl_status fl_ckpt_dir_list(const char *dir, int64_t *steps, size_t cap, size_t *n);

/* Load the newest checkpoint of dir that verifies; each newer corrupt one
 * is skipped with a warning.  *step (may be NULL) gets its step.
 * FL_ENOTFOUND (not logged) when dir has no checkpoint, FL_ECORRUPT when it
 * has some but none verifies, FL_EIO on a read error. */
fl_status fl_ckpt_dir_load_latest(const char *dir, fl_ckpt **out, int64_t *step);

/* Delete all but the newest keep (>= 1) checkpoints of dir, and the
 * temporary files of writers that are gone (fl_ckpt_dir_clean_tmp). */
fl_status fl_ckpt_dir_prune(const char *dir, int keep);

/* Remove the temporary files (".ckpt-N.flc.tmp.<pid>.<n>") whose writer
 * process no longer exists - left by a kill -9 during a write - and, with
 * include_self, this process's own (at start, before it writes any).  Each
 * removal is logged; *removed (may be NULL) gets the count.  A missing dir
 * is no error. */
fl_status fl_ckpt_dir_clean_tmp(const char *dir, int include_self, size_t *removed);

/* Move every ckpt-<step>.flc of dir into a new subdirectory
 * <dir>/old-<UTC yyyymmddThhmmssZ>[-k] (never deleting anything); its path
 * into moved_to (cap bytes, may be NULL), the count into *moved (0: nothing
 * to move, no subdirectory made).  FL_EIO (logged) when a move fails. */
fl_status fl_ckpt_dir_move_aside(const char *dir, char *moved_to, size_t cap, size_t *moved);

#ifdef __cplusplus
}
#endif
#endif
