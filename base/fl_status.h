/* fl_status.h - the result codes every fallible Flotilla call returns.
 *
 * One enum for the whole suite, as libuv does: a call returns FL_OK or a
 * negative code; errno, gRPC, CUDA and NCCL errors are converted to these at
 * the boundary where they happen, and logged once there.  This header is
 * self-contained (no library code behind it) so that kernels/, which depends
 * on nothing else of ours, can return the same codes. */
#ifndef FL_STATUS_H
#define FL_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fl_status {
  FL_OK = 0,
  FL_EINVAL = -1,     /* bad argument, config value, or message field */
  FL_ENOMEM = -2,     /* allocation failed */
  FL_EIO = -3,        /* file or socket I/O failed */
  FL_ETIMEDOUT = -4,  /* a deadline or collective timeout passed */
  FL_EREMOTE = -5,    /* the peer answered with an error */
  FL_ENOTSUP = -6,    /* not built in (e.g. CUDA in a CPU-only tree) */
  FL_ECUDA = -7,      /* a CUDA, cuBLAS or cuDNN call failed */
  FL_ENCCL = -8,      /* an NCCL call failed */
  FL_EPROTO = -9,     /* malformed wire message or file format */
  FL_ECORRUPT = -10,  /* checksum mismatch, truncated file */
  FL_EAUTH = -11,     /* token or TLS check failed */
  FL_ENOTFOUND = -12, /* no such table, parameter, file or key */
  FL_ECLOSED = -13,   /* peer or job shut down */
  FL_EAGAIN = -14,    /* retryable: try again later */
  FL_ESTATE = -15     /* call not valid in the object's current state */
} fl_status;

/* A static English description of a status code; never NULL. */
static inline const char *fl_strerror(int st) {
  switch (st) {
  case FL_OK: return "success";
  case FL_EINVAL: return "invalid argument";
  case FL_ENOMEM: return "out of memory";
  case FL_EIO: return "I/O error";
  case FL_ETIMEDOUT: return "timed out";
  case FL_EREMOTE: return "remote error";
  case FL_ENOTSUP: return "not supported in this build";
  case FL_ECUDA: return "CUDA error";
  case FL_ENCCL: return "NCCL error";
  case FL_EPROTO: return "protocol or format error";
  case FL_ECORRUPT: return "corrupt data";
  case FL_EAUTH: return "authentication failed";
  case FL_ENOTFOUND: return "not found";
  case FL_ECLOSED: return "closed";
  case FL_EAGAIN: return "try again";
  case FL_ESTATE: return "invalid state";
  default: return "unknown error";
  }
}

#ifdef __cplusplus
}
#endif
#endif
