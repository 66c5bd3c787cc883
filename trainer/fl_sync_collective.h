/* fl_sync_collective.h - collective mode of flotilla-trainer: the fl_sync
 * (fl_sync.h) whose ranks average their gradients with allreduce.
 *
 * What it does with the job's strategy:
 *   fuse_all_reduce_ops, fuse_grad_size_in_MB, fuse_grad_size_in_TFLOPS
 *       gradients go, in reverse layer order, into fusion buckets
 *       (coll_bucket.h); a bucket's allreduce is queued on the engine the
 *       moment its last gradient is reported (grad_ready), so it runs on
 *       the engine's threads while backward goes on;
 *   use_hierarchical_allreduce, hierarchical_allreduce_inter_nranks,
 *   nccl_comm_num
 *       handed to the engine (fl_coll.h): hierarchical shm+tcp, and the
 *       number of parallel rings / communicators;
 *   sync_nccl_allreduce
 *       the engine completes each allreduce before it starts the next, on
 *       every backend, which is this flag's "true"; "false" is accepted
 *       and behaves the same (there is no stream to leave unsynchronised);
 *   grad_compression / fp16_allreduce
 *       each rank divides its gradients by the world size, casts them to
 *       fp16 or bf16 and the allreduce carries 16 bits (added in fp32 at
 *       every step); without compression fp32 sums are divided after;
 *   gradient_merge
 *       the loop reports gradients only on the k-th micro-batch, so the
 *       ranks communicate once every k_steps;
 *   sync_batch_norm
 *       synchronised batch norm (PyTorch SyncBatchNorm, Paddle
 *       sync_batch_norm): the instance sets the model's batch-norm hook
 *       (fl_model_set_norm_sync), a blocking fp64 allreduce on the job's
 *       communicator, so every batch-norm layer normalises with the mean
 *       and variance of the global micro-batch (every rank's samples;
 *       under gradient merge, each micro-batch), dx uses the global sums
 *       of dz and dz*xhat, and the running statistics are updated from the
 *       global statistics, identically on every rank.  The exchanges share
 *       the engine's ordered queue with the gradient buckets (see
 *       sync_collective.c), so they never interleave with a bucket.  A
 *       model without the hook (a plugin) is refused at init_params with
 *       FL_ENOTSUP.  Without sync_batch_norm each rank normalises with its
 *       own micro-batch and rank 0's running statistics (buffers) are
 *       broadcast after every step (as PyTorch DDP's broadcast_buffers
 *       does).
 * Start: rank 0's parameters are broadcast to every rank (init_params);
 * the ranks agree on the steps per epoch (the minimum); metrics are summed
 * in fp64.  Rank 0 writes the checkpoints (the loop asks sync->rank), and
 * every rank resumes from them.  The checkpoint also holds the engine's
 * allreduce tuning (record collective/tuning, the ckpt_save hook); with
 * allreduce_algorithm auto (or hierarchical) rank 0 hands the one in the
 * newest checkpoint of the directory to the engine at create, which
 * reuses it for the same world size instead of probing, so a resumed run
 * runs the same algorithms and gives the bits of an uninterrupted one.
 * (Under --fresh the checkpoints move aside only after create: that run
 * keeps the previous tuning too when the world size matches.)
 *
 * The transport is the cluster's collective_backend (FLOTILLA_COLLECTIVE_
 * BACKEND / --collective_backend: tcp | shm | nccl | auto, default auto:
 * shm on one host, tcp across hosts).  Environment only (a benchmark's):
 *   FLOTILLA_COLLECTIVE_OVERLAP  1 (default): buckets start during
 *                                backward; 0: all start at the end of the
 *                                step (for measuring what overlap gains) */
#ifndef FL_SYNC_COLLECTIVE_H
#define FL_SYNC_COLLECTIVE_H

#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_sync.h"

/* Join the job's collective (rendezvous at the first trainer endpoint,
 * token from FLOTILLA_TOKEN or the token file) and fill *out.  The caller
 * ends it with ops->finish after a successful run and always with
 * ops->destroy; destroying an unfinished instance tells the other ranks
 * that this rank aborted.  job must outlive the instance. */
fl_status fl_sync_collective_create(const fl_job *job, const fl_cluster *cluster, fl_sync *out);

/* Elastic worlds: the creates from now on ask fn(arg) every 100 ms while
 * their rendezvous waits for its peers, and give it up (FL_EAGAIN) when it
 * returns nonzero (fl_coll_options.give_up); fn NULL: never.  Ownership:
 * arg stays the caller's and must outlive those creates. */
void fl_sync_collective_give_up(int (*fn)(void *arg), void *arg);

#endif
