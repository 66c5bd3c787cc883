# Tests of train.device gpu (helper G): the built-in models on a CUDA
# device against the CPU (SKIP without a GPU), and flotilla-trainer with
# device: gpu (the error cases run everywhere, the training run needs a GPU).
check_PROGRAMS += tests/unit/test_model_cuda tests/integration/test_trainer_device
TESTS += tests/unit/test_model_cuda tests/integration/test_trainer_device

tests_unit_test_model_cuda_SOURCES = tests/unit/test_model_cuda.c tests/unit/cuda_testutil.h
tests_unit_test_model_cuda_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_model_cuda_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

tests_integration_test_trainer_device_SOURCES = tests/integration/test_trainer_device.c \
	tests/integration/trainer_cli_util.h tests/unit/ckpt_testutil.h
tests_integration_test_trainer_device_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_trainer_device_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)
