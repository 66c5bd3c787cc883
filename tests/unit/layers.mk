# Unit tests of layers (Check): the layer kernels, the built-in models and
# the plugin loader.
FL_LAYERS_TEST_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit

check_PROGRAMS += tests/unit/test_layers tests/unit/test_models tests/unit/test_plugin
TESTS += tests/unit/test_layers tests/unit/test_models tests/unit/test_plugin

tests_unit_test_layers_SOURCES = tests/unit/test_layers.c tests/unit/gradcheck.h
tests_unit_test_layers_CFLAGS = $(FL_LAYERS_TEST_CFLAGS)
tests_unit_test_layers_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm

tests_unit_test_models_SOURCES = tests/unit/test_models.c tests/unit/gradcheck.h
tests_unit_test_models_CFLAGS = $(FL_LAYERS_TEST_CFLAGS)
tests_unit_test_models_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

tests_unit_test_plugin_SOURCES = tests/unit/test_plugin.c tests/unit/gradcheck.h
tests_unit_test_plugin_CFLAGS = $(FL_LAYERS_TEST_CFLAGS)
tests_unit_test_plugin_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
# test_plugin loads trainer/plugin_example.la (built with the tree) and this
# plugin built for another ABI version (built by make check).
check_LTLIBRARIES += tests/unit/plugin_badabi.la
tests_unit_plugin_badabi_la_SOURCES = tests/unit/plugin_badabi.c
tests_unit_plugin_badabi_la_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_unit_plugin_badabi_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -rpath /nowhere

# Model throughput and activation memory (plain vs recompute); not a test.
noinst_PROGRAMS += tests/bench/bench_model
tests_bench_bench_model_SOURCES = tests/bench/bench_model.c
tests_bench_bench_model_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_bench_bench_model_LDADD = libfltrainer.la $(FL_LIBS) -lm

# Batch norm's phase kernels (synchronised batch norm): bitwise against the
# one-call kernels, batch slices against the whole batch, gradients.
check_PROGRAMS += tests/unit/test_syncbn_kernels
TESTS += tests/unit/test_syncbn_kernels
tests_unit_test_syncbn_kernels_SOURCES = tests/unit/test_syncbn_kernels.c tests/unit/gradcheck.h
tests_unit_test_syncbn_kernels_CFLAGS = $(FL_LAYERS_TEST_CFLAGS)
tests_unit_test_syncbn_kernels_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm

# Their CUDA twins against the one-call CUDA kernels and the CPU phases;
# exits 77 (SKIP) without a CUDA device, including --without-cuda trees.
check_PROGRAMS += tests/unit/test_cuda_syncbn
TESTS += tests/unit/test_cuda_syncbn
tests_unit_test_cuda_syncbn_SOURCES = tests/unit/test_cuda_syncbn.c tests/unit/cuda_testutil.h
tests_unit_test_cuda_syncbn_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_cuda_syncbn_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm
