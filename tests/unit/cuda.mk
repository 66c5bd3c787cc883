# Unit tests of the CUDA twins (Check): each compares CUDA kernels with their
# CPU twins and exits 77 (SKIP) where there is no CUDA device, including
# every --without-cuda tree, where they still compile.
FL_CUDA_TEST_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)

check_PROGRAMS += tests/unit/test_cuda_optim
TESTS += tests/unit/test_cuda_optim
tests_unit_test_cuda_optim_SOURCES = tests/unit/test_cuda_optim.c tests/unit/cuda_testutil.h
tests_unit_test_cuda_optim_CFLAGS = $(FL_CUDA_TEST_CFLAGS)
tests_unit_test_cuda_optim_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm

check_PROGRAMS += tests/unit/test_cuda_layers
TESTS += tests/unit/test_cuda_layers
tests_unit_test_cuda_layers_SOURCES = tests/unit/test_cuda_layers.c tests/unit/cuda_testutil.h
tests_unit_test_cuda_layers_CFLAGS = $(FL_CUDA_TEST_CFLAGS)
tests_unit_test_cuda_layers_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm
