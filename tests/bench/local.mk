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

# PServer mode: push+pull of a 64 MB model with 2 pservers x 2 trainers,
# beside raw loopback TCP and a bare gRPC echo of the same bytes; sparse
# pull rows/s (64-float rows, batches of 4096 ids).
noinst_PROGRAMS += tests/bench/bench_ps
tests_bench_bench_ps_SOURCES = tests/bench/bench_ps.c
tests_bench_bench_ps_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_ps_LDADD = libfltrainer.la $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS) -lpthread
