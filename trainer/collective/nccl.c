/* nccl.c - the nccl backend (CUDA builds with NCCL only): NCCL
 * communicators made from the unique id that rank 0 hands out in the
 * rendezvous table.
 *
 * nccl_comm_num communicators: the first from the unique id, the others
 * split from it (ncclCommSplit, NCCL >= 2.18; older NCCL uses one); a
 * buffer is cut into one part per communicator, each on its own stream.
 * Communicators are non-blocking (config.blocking = 0) and every wait polls
 * the stream, ncclCommGetAsyncError and the engine's failure state with
 * the collective timeout, so a dead or hung peer ends in ncclCommAbort and
 * a named error instead of a hang.
 *
 * Buffers may be device memory (used in place) or host memory (staged
 * through a device buffer of this backend).  Each rank uses the GPU the
 * options name (the trainer passes fl_cluster_gpu's choice, the one its
 * model runs on), else its index on the node modulo the device count, made
 * current for the duration of every call (and the caller's device restored
 * after). */
#include <config.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl backend needs NCCL >= 2.14 (non-blocking communicators)"
#endif

#define MAX_COMMS 16

typedef struct nccl_state {
  fl_coll *c;
  int n, me;
  int device;
  int ncomm;
  ncclComm_t comm[MAX_COMMS];
  cudaStream_t stream[MAX_COMMS];
  int live; /* communicators usable (not aborted) */
  void *dev;
  size_t dev_cap;
  atomic_int aborted;
} nccl_state;

static fl_status nccl_err(ncclResult_t r, const char *what) {
  return FL_ERR(FL_ENCCL, "nccl: %s: %s", what, ncclGetErrorString(r));
}

fl_status fl_coll_nccl_make_id(uint8_t *blob, size_t cap, size_t *len) {
  ncclUniqueId id;
  if (sizeof(id) > cap) return FL_ERR(FL_EINVAL, "nccl: unique id larger than %zu bytes", cap);
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return nccl_err(r, "ncclGetUniqueId");
  memcpy(blob, &id, sizeof(id));
  *len = sizeof(id);
  return FL_OK;
}

static void nap(void) {
  struct timespec ts = {0, 100000};
  nanosleep(&ts, NULL);
}

static void abort_comms(nccl_state *s) {
  if (!s->live) return;
  s->live = 0;
  for (int k = 0; k < s->ncomm; k++)
    if (s->comm[k]) {
      ncclCommAbort(s->comm[k]);
      s->comm[k] = NULL;
    }
}

/* Wait until communicator k has no operation in progress (init, split) or,
 * when `stream` is set, until its stream drained. */
static fl_status wait_comm(nccl_state *s, int k, int stream, const char *what) {
  fl_coll *c = s->c;
  uint64_t deadline = coll_mono_ms() + (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 1000;
  for (;;) {
    ncclResult_t as = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(s->comm[k], &as);
    if (r != ncclSuccess) as = r;
    if (as != ncclSuccess && as != ncclInProgress) {
      const char *last = ncclGetLastError(s->comm[k]);
      coll_fail(c, -1, FL_ENCCL, 0, "nccl: %s: %s%s%s", what, ncclGetErrorString(as),
                last && last[0] ? ": " : "", last ? last : "");
      abort_comms(s);
      return FL_ENCCL;
    }
    if (as == ncclSuccess) {
      if (!stream) return FL_OK;
      cudaError_t ce = cudaStreamQuery(s->stream[k]);
      if (ce == cudaSuccess) return FL_OK;
      if (ce != cudaErrorNotReady) {
        coll_fail(c, -1, FL_ECUDA, 0, "nccl: %s: stream: %s", what, cudaGetErrorString(ce));
        abort_comms(s);
        return FL_ECUDA;
      }
    }
    fl_status f = coll_failed(c);
    if (f != FL_OK || atomic_load(&s->aborted)) {
      abort_comms(s);
      return f != FL_OK ? f : FL_ECLOSED;
    }
    if (coll_mono_ms() > deadline) {
      coll_fail(c, -1, FL_ETIMEDOUT, 0, "nccl: %s did not complete within %.1f s", what,
                c->timeout_s);
      abort_comms(s);
      return FL_ETIMEDOUT;
    }
    nap();
  }
}

static fl_status nccl_init(fl_coll *c, const coll_group *g, void **state) {
  *state = NULL;
  nccl_state *s = calloc(1, sizeof(*s));
  if (!s) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  *state = s;
  s->c = c;
  s->n = g->n;
  s->me = g->me;
  atomic_init(&s->aborted, 0);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
    return FL_ERR(FL_ENOTSUP, "nccl: no CUDA device on rank %d", c->rank);
  int local = 0;
  for (int r = 0; r < c->rank; r++)
    if (c->peers[r].node == c->peers[c->rank].node) local++;
  s->device = c->gpu >= 0 ? c->gpu : local % ndev;
  if (s->device >= ndev)
    return FL_ERR(FL_EINVAL, "nccl: rank %d was given GPU %d, but this machine has %d", c->rank,
                  s->device, ndev);
  if (cudaSetDevice(s->device) != cudaSuccess)
    return FL_ERR(FL_ECUDA, "nccl: cannot use GPU %d on rank %d", s->device, c->rank);
  ncclUniqueId id;
  if (c->blob_len != sizeof(id))
    return FL_ERR(FL_EPROTO, "nccl: the rank table carries no NCCL id (%zu bytes)", c->blob_len);
  memcpy(&id, c->blob, sizeof(id));
  s->ncomm = c->nrings > MAX_COMMS ? MAX_COMMS : c->nrings;
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
  if (s->ncomm > 1) {
    FL_LOGW("nccl: this NCCL cannot split communicators; nccl_comm_num %d uses 1", s->ncomm);
    s->ncomm = 1;
  }
#endif
  for (int k = 0; k < s->ncomm; k++)
    if (cudaStreamCreateWithFlags(&s->stream[k], cudaStreamNonBlocking) != cudaSuccess)
      return FL_ERR(FL_ECUDA, "nccl: cannot create a stream on GPU %d", s->device);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&s->comm[0], s->n, id, s->me, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_err(r, "ncclCommInitRankConfig");
  s->live = 1;
  FL_TRY(wait_comm(s, 0, 0, "ncclCommInitRank"));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  for (int k = 1; k < s->ncomm; k++) {
    ncclConfig_t sc = NCCL_CONFIG_INITIALIZER;
    sc.blocking = 0;
    r = ncclCommSplit(s->comm[0], 0, s->me, &s->comm[k], &sc);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_err(r, "ncclCommSplit");
    FL_TRY(wait_comm(s, 0, 0, "ncclCommSplit"));
    FL_TRY(wait_comm(s, k, 0, "ncclCommSplit"));
  }
#endif
  return FL_OK;
}

static ncclDataType_t nccl_type(fl_coll_dtype dt) {
  switch (dt) {
  case FL_COLL_F16: return ncclFloat16;
  case FL_COLL_BF16: return ncclBfloat16;
  case FL_COLL_F64: return ncclFloat64;
  default: return ncclFloat32;
  }
}

static int on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Device view of buf (bytes long): buf itself, or the staging buffer with
 * buf's bytes copied in when `in`. */
static fl_status stage_in(nccl_state *s, void *buf, size_t bytes, int in, void **dptr) {
  if (on_device(buf)) {
    *dptr = buf;
    return FL_OK;
  }
  if (bytes > s->dev_cap) {
    if (s->dev) cudaFree(s->dev);
    s->dev = NULL;
    s->dev_cap = 0;
    if (cudaMalloc(&s->dev, bytes) != cudaSuccess)
      return FL_ERR(FL_ECUDA, "nccl: cannot allocate %zu staging bytes on GPU %d", bytes,
                    s->device);
    s->dev_cap = bytes;
  }
  if (in && bytes && cudaMemcpy(s->dev, buf, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    return FL_ERR(FL_ECUDA, "nccl: host-to-device copy of %zu bytes failed", bytes);
  *dptr = s->dev;
  return FL_OK;
}

static fl_status stage_out(void *buf, void *dptr, size_t bytes) {
  if (dptr == buf || bytes == 0) return FL_OK;
  if (cudaMemcpy(buf, dptr, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    return FL_ERR(FL_ECUDA, "nccl: device-to-host copy of %zu bytes failed", bytes);
  return FL_OK;
}

static fl_status ready(nccl_state *s) {
  if (!s->live) return FL_ECLOSED;
  if (cudaSetDevice(s->device) != cudaSuccess)
    return FL_ERR(FL_ECUDA, "nccl: cannot use GPU %d", s->device);
  return FL_OK;
}

static fl_status finish_all(nccl_state *s, const char *what) {
  for (int k = 0; k < s->ncomm; k++) FL_TRY(wait_comm(s, k, 1, what));
  return FL_OK;
}

static fl_status allreduce_on(void *vs, void *buf, size_t count, fl_coll_dtype dt) {
  nccl_state *s = vs;
  if (count == 0) return FL_OK;
  FL_TRY(ready(s));
  size_t es = fl_coll_dtype_size(dt);
  void *d;
  FL_TRY(stage_in(s, buf, count * es, 1, &d));
  for (int k = 0; k < s->ncomm; k++) {
    size_t off, len;
    coll_segment(count, s->ncomm, k, &off, &len);
    if (!len) continue;
    uint8_t *p = (uint8_t *)d + off * es;
    ncclResult_t r =
        ncclAllReduce(p, p, len, nccl_type(dt), ncclSum, s->comm[k], s->stream[k]);
    if (r != ncclSuccess && r != ncclInProgress) {
      coll_fail(s->c, -1, FL_ENCCL, 0, "nccl: ncclAllReduce: %s", ncclGetErrorString(r));
      abort_comms(s);
      return FL_ENCCL;
    }
  }
  FL_TRY(finish_all(s, "allreduce"));
  return stage_out(buf, d, count * es);
}

static fl_status broadcast_on(void *vs, void *buf, size_t bytes, int root) {
  nccl_state *s = vs;
  if (bytes == 0) return FL_OK;
  FL_TRY(ready(s));
  void *d;
  FL_TRY(stage_in(s, buf, bytes, s->me == root, &d));
  for (int k = 0; k < s->ncomm; k++) {
    size_t off, len;
    coll_segment(bytes, s->ncomm, k, &off, &len);
    if (!len) continue;
    uint8_t *p = (uint8_t *)d + off;
    ncclResult_t r = ncclBroadcast(p, p, len, ncclUint8, root, s->comm[k], s->stream[k]);
    if (r != ncclSuccess && r != ncclInProgress) {
      coll_fail(s->c, -1, FL_ENCCL, 0, "nccl: ncclBroadcast: %s", ncclGetErrorString(r));
      abort_comms(s);
      return FL_ENCCL;
    }
  }
  FL_TRY(finish_all(s, "broadcast"));
  return stage_out(buf, d, bytes);
}

static fl_status allgather_on(void *vs, const void *send, size_t bytes, void *recv) {
  nccl_state *s = vs;
  uint8_t *mine = (uint8_t *)recv + (size_t)s->me * bytes;
  if (bytes == 0) return FL_OK;
  FL_TRY(ready(s));
  size_t total = (size_t)s->n * bytes;
  void *d;
  int dev = on_device(recv);
  if (!dev) {
    if (mine != send) memmove(mine, send, bytes);
  } else if (mine != send) {
    if (cudaMemcpy(mine, send, bytes, on_device(send) ? cudaMemcpyDeviceToDevice
                                                      : cudaMemcpyHostToDevice) != cudaSuccess)
      return FL_ERR(FL_ECUDA, "nccl: copy of this rank's allgather block failed");
  }
  FL_TRY(stage_in(s, recv, total, 1, &d));
  /* One communicator: the blocks are interleaved by rank, which a split
   * over several communicators would not keep contiguous. */
  uint8_t *p = d;
  ncclResult_t r = ncclAllGather(p + (size_t)s->me * bytes, p, bytes, ncclUint8, s->comm[0],
                                 s->stream[0]);
  if (r != ncclSuccess && r != ncclInProgress) {
    coll_fail(s->c, -1, FL_ENCCL, 0, "nccl: ncclAllGather: %s", ncclGetErrorString(r));
    abort_comms(s);
    return FL_ENCCL;
  }
  FL_TRY(wait_comm(s, 0, 1, "allgather"));
  return stage_out(recv, d, total);
}

/* A collective may run on the application's own thread: leave its current
 * device as it was. */
static fl_status nccl_allreduce(void *vs, void *buf, size_t count, fl_coll_dtype dt) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  fl_status st = allreduce_on(vs, buf, count, dt);
  if (prev >= 0) cudaSetDevice(prev);
  return st;
}

static fl_status nccl_broadcast(void *vs, void *buf, size_t bytes, int root) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  fl_status st = broadcast_on(vs, buf, bytes, root);
  if (prev >= 0) cudaSetDevice(prev);
  return st;
}

static fl_status nccl_allgather(void *vs, const void *send, size_t bytes, void *recv) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  fl_status st = allgather_on(vs, send, bytes, recv);
  if (prev >= 0) cudaSetDevice(prev);
  return st;
}

static fl_status nccl_barrier(void *vs) {
  float one = 1.0f;
  return nccl_allreduce(vs, &one, 1, FL_COLL_F32);
}

static void nccl_abort(void *vs) {
  nccl_state *s = vs;
  atomic_store(&s->aborted, 1);
}

static void nccl_destroy(void *vs) {
  nccl_state *s = vs;
  if (!s) return;
  if (s->live) {
    cudaSetDevice(s->device);
    for (int k = s->ncomm - 1; k >= 0; k--)
      if (s->comm[k]) {
        ncclCommFinalize(s->comm[k]);
        ncclResult_t as = ncclInProgress;
        uint64_t deadline = coll_mono_ms() + 5000;
        while (ncclCommGetAsyncError(s->comm[k], &as) == ncclSuccess && as == ncclInProgress &&
               coll_mono_ms() < deadline)
          nap();
        if (as == ncclSuccess)
          ncclCommDestroy(s->comm[k]);
        else
          ncclCommAbort(s->comm[k]);
      }
  }
  for (int k = 0; k < s->ncomm; k++)
    if (s->stream[k]) cudaStreamDestroy(s->stream[k]);
  if (s->dev) cudaFree(s->dev);
  free(s);
}

const coll_backend fl_coll_nccl_backend = {
    "nccl", nccl_init, nccl_allreduce, nccl_broadcast, nccl_allgather, nccl_barrier, nccl_abort,
    nccl_destroy, NULL, NULL, NULL};
