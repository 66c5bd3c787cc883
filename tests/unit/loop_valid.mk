# The loop's validation rules (trainer/loop_valid.c): early stopping on
# scripted sequences, metric directions, the keys, validation_split, batch-norm
# statistics averaged over ranks, keep_best and early stopping in small
# local jobs, resume keeping the best, plateau on the validation.  Seconds.
check_PROGRAMS += tests/unit/test_loop_valid
TESTS += tests/unit/test_loop_valid
tests_unit_test_loop_valid_SOURCES = tests/unit/test_loop_valid.c
tests_unit_test_loop_valid_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_loop_valid_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
