/* cuda_internal.h - what the CUDA files of kernels/ share (never installed).
 *
 * The boundary where CUDA, cuBLAS and cuDNN errors become FL_ECUDA: each
 * failing call is logged once here, with the calling function and what it
 * was doing, and the code propagates from there.  Also the stream cast and
 * the launch-error check every entry point does after queuing its kernels. */
#ifndef FL_CUDA_INTERNAL_H
#define FL_CUDA_INTERNAL_H

#include <cuda_runtime.h>

#include "fl_status.h"

extern "C" {
#include "fl_log.h"
}

/* The public headers pass streams as void* so that C callers need no CUDA
 * headers; NULL is the default stream. */
static inline cudaStream_t fl_stream(void *s) { return (cudaStream_t)s; }

/* Evaluate a CUDA runtime call; on failure log it (function, what) and
 * return FL_ECUDA from the enclosing function.  For use where no cleanup is
 * pending; with cleanup, use FL_CUDA_GOTO. */
#define FL_CUDA_TRY(call, what)                                                     \
  do {                                                                              \
    cudaError_t fl_ce_ = (call);                                                    \
    if (fl_ce_ != cudaSuccess)                                                      \
      return FL_ERR(FL_ECUDA, "%s: %s: %s", __func__, (what), cudaGetErrorString(fl_ce_)); \
  } while (0)

/* Same, but store FL_ECUDA in st and jump to fail. */
#define FL_CUDA_GOTO(call, what, st)                                                \
  do {                                                                              \
    cudaError_t fl_ce_ = (call);                                                    \
    if (fl_ce_ != cudaSuccess) {                                                    \
      (st) = FL_ERR(FL_ECUDA, "%s: %s: %s", __func__, (what), cudaGetErrorString(fl_ce_)); \
      goto fail;                                                                    \
    }                                                                               \
  } while (0)

/* FL_TRY for C++ (fl_log.h's version returns an int, which C++ will not
 * convert back to fl_status). */
#define FL_CU_TRY(expr)                                                             \
  do {                                                                              \
    fl_status fl_cu_st_ = (expr);                                                   \
    if (fl_cu_st_ != FL_OK) return fl_cu_st_;                                       \
  } while (0)

/* After queuing kernels: report a launch failure (bad configuration, no
 * device, a sticky error from earlier work) as FL_ECUDA. */
#define FL_CUDA_LAUNCHED(what) FL_CUDA_TRY(cudaGetLastError(), (what))

#endif
