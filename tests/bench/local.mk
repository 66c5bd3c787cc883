# Benchmarks: built with the tree, run by hand or by deploy/run-main-job.sh;
# they print `name: value unit` lines and are never pass/fail tests.

# CUDA optimizer throughput vs device-to-device copy; prints
# `cuda: unavailable` without a device.
noinst_PROGRAMS += tests/bench/bench_optim_cuda
tests_bench_bench_optim_cuda_SOURCES = tests/bench/bench_optim_cuda.c
tests_bench_bench_optim_cuda_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS)
tests_bench_bench_optim_cuda_LDADD = $(FL_LIBS)

# CPU optimizer throughput (every optimizer, 16M parameters) beside a STREAM
# triad measured in the same run on the same threads.
noinst_PROGRAMS += tests/bench/bench_optim
tests_bench_bench_optim_SOURCES = tests/bench/bench_optim.c
tests_bench_bench_optim_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS)
tests_bench_bench_optim_LDADD = $(FL_LIBS)

# Training quality and speed on Fashion-MNIST (MLP and CNN example jobs),
# side by side with the same MLP in PyTorch: tests/bench/bench_train.sh.
EXTRA_DIST += tests/bench/bench_train.sh tests/bench/torch_mlp.py \
	deploy/examples/mlp_fmnist.yaml deploy/examples/cnn_fmnist.yaml

# The graph engine's MLP training speed beside the deleted sequential
# engine (a build of 8c73758), alternating runs: bench_engine_vs_seq.sh.
EXTRA_DIST += tests/bench/bench_engine_vs_seq.sh

# PServer mode: push+pull of a 64 MB model with 2 pservers x 2 trainers,
# beside raw loopback TCP and a bare gRPC echo of the same bytes; sparse
# pull rows/s (64-float rows, batches of 4096 ids).
noinst_PROGRAMS += tests/bench/bench_ps
tests_bench_bench_ps_SOURCES = tests/bench/bench_ps.c tests/integration/free_port.h
tests_bench_bench_ps_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_ps_LDADD = libfltrainer.la $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS) -lpthread

# A pserver's sparse-table loop alone: the DLRM example's 26 tables x 16
# stripes of 8-float Adagrad rows, 256 ids a table a step pulled and
# pushed, in CPU seconds (the rows' memory layout).
noinst_PROGRAMS += tests/bench/bench_ps_table
tests_bench_bench_ps_table_SOURCES = tests/bench/bench_ps_table.c
tests_bench_bench_ps_table_CFLAGS = $(FL_PSERVER_CFLAGS)
tests_bench_bench_ps_table_LDADD = $(FL_PSERVER_LIBS) -lm

# Collective allreduce bus bandwidth per backend (tcp, shm, hierarchical),
# 2 and 4 ranks, beside memcpy; tests/bench/run_bench_collective.sh adds
# OpenMPI's MPI_Allreduce (mpi_allreduce.c, compiled there with mpicc).
noinst_PROGRAMS += tests/bench/bench_allreduce
tests_bench_bench_allreduce_SOURCES = tests/bench/bench_allreduce.c tests/unit/coll_testutil.h
tests_bench_bench_allreduce_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_allreduce_LDADD = libfltrainer.la $(FL_LIBS)
EXTRA_DIST += tests/bench/mpi_allreduce.c

# Collective-mode MLP training with 2 ranks: step time with overlap on and
# off (shm and tcp), samples/s, beside one local process; the script also
# runs PyTorch DDP (gloo) on the same model and batch (torch_ddp_mlp.py).
noinst_PROGRAMS += tests/bench/bench_coll_train
tests_bench_bench_coll_train_SOURCES = tests/bench/bench_coll_train.c tests/unit/coll_testutil.h
tests_bench_bench_coll_train_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_coll_train_LDADD = libfltrainer.la $(FL_LIBS)
EXTRA_DIST += tests/bench/torch_ddp_mlp.py tests/bench/run_bench_collective.sh

# Large-batch study (LARS/LAMB against momentum/Adam at global batches of
# 4k-16k by gradient merge): tests/bench/large_batch.py runs the job files
# of deploy/examples/large_batch/ and writes its RESULTS.md and plot.
EXTRA_DIST += tests/bench/large_batch.py deploy/examples/large_batch

# PServer soak: 8 async trainers x 2 pservers for ~2 minutes on loopback;
# RSS of every daemon over time, failed calls, and the trainers' totals
# reconciled with the servers' (tests/bench/soak_ps.sh; uses
# tests/integration/ps_probe and faults_lib.sh).
EXTRA_DIST += tests/bench/soak_ps.sh

# One rank of an allreduce benchmark over machines or network namespaces
# (tests/bench/run_bench_netns.sh): its place from FLOTILLA_* or a cluster
# engine's variables, busbw per size printed by rank 0.
noinst_PROGRAMS += tests/bench/bench_allreduce_rank
tests_bench_bench_allreduce_rank_SOURCES = tests/bench/bench_allreduce_rank.c
tests_bench_bench_allreduce_rank_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_allreduce_rank_LDADD = libfltrainer.la $(FL_LIBS)

# Allreduce on capped links between network namespaces (root): ours (flat
# ring, two rings, hierarchical) and OpenMPI's, then the alpha-beta model
# fitted to them:
#   bash tests/bench/run_bench_netns.sh BUILDDIR --out figures.txt
#   tests/bench/allreduce_model.py figures.txt --png model.png
EXTRA_DIST += tests/bench/run_bench_netns.sh tests/bench/allreduce_model.py tests/bench/allreduce_model.png
# The ONNX examples (deploy/examples/onnx/: a ResNet and a ViT written in
# PyTorch) trained by Flotilla beside the same modules in PyTorch, one
# thread and 2 ranks against DDP: tests/bench/bench_onnx.sh.
EXTRA_DIST += tests/bench/bench_onnx.sh tests/bench/torch_onnx_train.py deploy/examples/onnx

# The recurrent ops: a BiLSTM text classifier's training step (batch 64,
# seq 32, emb 64, hidden 64) on one thread beside PyTorch 1.13:
# tests/bench/bench_lstm.sh (lstm_torch.py exports and times the module).
noinst_PROGRAMS += tests/bench/bench_lstm
tests_bench_bench_lstm_SOURCES = tests/bench/bench_lstm.c
tests_bench_bench_lstm_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_lstm_LDADD = libfltrainer.la $(FL_LIBS)
EXTRA_DIST += tests/bench/bench_lstm.sh tests/bench/lstm_torch.py

# The DLRM recsys example (deploy/examples/recsys/) trained by Flotilla (one
# trainer, one pserver, sparse tables) beside the same module in PyTorch:
# samples per CPU second of all processes and the test AUC:
# tests/bench/bench_dlrm.sh.
EXTRA_DIST += tests/bench/bench_dlrm.sh
# The sparse tables' disk tier (pserver.memory_budget) against the table
# all in memory: fill and Zipf pull+push rows/s, peak RSS: bench_tier.sh.
noinst_PROGRAMS += tests/bench/bench_tier
tests_bench_bench_tier_SOURCES = tests/bench/bench_tier.c
tests_bench_bench_tier_CFLAGS = $(FL_PSERVER_CFLAGS) $(ROCKSDB_CFLAGS)
tests_bench_bench_tier_LDADD = $(FL_PSERVER_LIBS) -lm
EXTRA_DIST += tests/bench/bench_tier.sh tests/bench/bench_tier_cgroup.sh
# The CTR preset's share of step time waiting for sparse rows, pipelined
# pulls (pserver.sparse.pipeline) against sequential ones, async and sync:
# tests/bench/bench_sparse_pipeline.sh.
EXTRA_DIST += tests/bench/bench_sparse_pipeline.sh
# Elastic membership on etcd: recovery time after a node is killed
# (elastic_recovery_s), bench_elastic.sh.
EXTRA_DIST += tests/bench/bench_elastic.sh
# Delta against whole checkpoints of a sparse table when an interval
# touches a small share of its rows: bytes and seconds, their ratios.
noinst_PROGRAMS += tests/bench/bench_delta_ckpt
tests_bench_bench_delta_ckpt_SOURCES = tests/bench/bench_delta_ckpt.c
tests_bench_bench_delta_ckpt_CFLAGS = $(FL_PSERVER_CFLAGS)
tests_bench_bench_delta_ckpt_LDADD = $(FL_PSERVER_LIBS)
# The bound the disk puts on the disk tier: random 4 KiB reads (O_DIRECT,
# and through the page cache in a memory cgroup) at queue depths 1, 8 and
# 32, and the ceiling they set on tier_pull_push_vs_memory for a run's
# miss fraction and blocks per miss: bench_disk.sh.
noinst_PROGRAMS += tests/bench/bench_disk
tests_bench_bench_disk_SOURCES = tests/bench/bench_disk.c
tests_bench_bench_disk_LDADD = libflkernels.la -lpthread
EXTRA_DIST += tests/bench/bench_disk.sh tests/bench/cgroup_lib.sh
