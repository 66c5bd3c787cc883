# make gpu-bundle: the CUDA tests, the CUDA benchmark and flotilla-trainer
# relinked into a self-contained folder (default gpu/ at the top of the
# source tree; GPU_BUNDLE_DIR=... elsewhere) with run.sh, which runs them
# all on a GPU machine in a few minutes and writes report.txt.  Only the C
# library, the CUDA driver and CUDA's shared libraries stay dynamic: the
# machine with the GPU may lack gRPC, protobuf-c, Check or even Debian.
# The relinking is deploy/gpu-bundle.sh's; this fragment builds the
# programs as usual and hands it their objects and the libraries' objects.
EXTRA_DIST += deploy/gpu-bundle.sh deploy/gpu-run.sh deploy/gpu_bundle_main.c \
	deploy/gpu_bundle_stubs.c

GPU_BUNDLE_DIR = $(abs_top_srcdir)/gpu
FL_GPU_BUNDLE_PROGS = tests/unit/test_cuda_optim tests/unit/test_cuda_layers \
	tests/unit/test_cuda_syncbn tests/unit/test_graph_ops_cuda tests/unit/test_model_cuda \
	tests/unit/test_coll_nccl tests/integration/test_trainer_device \
	tests/bench/bench_optim_cuda flotilla-trainer
# One line per program: its name and its objects (the order of the list).
FL_GPU_BUNDLE_SPEC = \
	"prog test_cuda_optim $(tests_unit_test_cuda_optim_OBJECTS)" \
	"prog test_cuda_layers $(tests_unit_test_cuda_layers_OBJECTS)" \
	"prog test_cuda_syncbn $(tests_unit_test_cuda_syncbn_OBJECTS)" \
	"prog test_graph_ops_cuda $(tests_unit_test_graph_ops_cuda_OBJECTS)" \
	"prog test_model_cuda $(tests_unit_test_model_cuda_OBJECTS)" \
	"prog test_coll_nccl $(tests_unit_test_coll_nccl_OBJECTS)" \
	"prog test_trainer_device $(tests_integration_test_trainer_device_OBJECTS)" \
	"prog bench_optim_cuda $(tests_bench_bench_optim_cuda_OBJECTS)" \
	"prog flotilla-trainer $(flotilla_trainer_OBJECTS)" \
	"lib $(libfltrainer_la_OBJECTS) $(libflotilla_la_OBJECTS) $(libflkernels_la_OBJECTS) \
		$(libflkoptim_la_OBJECTS)"

.PHONY: gpu-bundle
if HAVE_CUDA
gpu-bundle: $(FL_GPU_BUNDLE_PROGS)
	$(AM_V_GEN)printf '%s\n' $(FL_GPU_BUNDLE_SPEC) > gpu-bundle.spec && \
	CC='$(CC)' CUDA_HOME='$(CUDA_HOME)' PKG_CONFIG='$(PKG_CONFIG)' SAN_FLAGS='$(SAN_FLAGS)' \
	  sh $(srcdir)/deploy/gpu-bundle.sh gpu-bundle.spec '$(srcdir)' '$(GPU_BUNDLE_DIR)'
CLEANFILES += gpu-bundle.spec
else
gpu-bundle:
	@echo "make gpu-bundle: this tree was configured without CUDA (no nvcc found, or" >&2; \
	echo "--without-cuda): configure a separate tree with --with-cuda, e.g." >&2; \
	echo "  sh deploy/build.sh \$$PWD/build-cuda --with-cuda && make -C build-cuda gpu-bundle" >&2; \
	exit 1
endif
