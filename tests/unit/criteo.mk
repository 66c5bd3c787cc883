# The Criteo TSV reader (trainer/data_criteo.c) and the exact AUC / log
# loss over all ranks (trainer/metrics_auc.c).
check_PROGRAMS += tests/unit/test_metrics_auc
TESTS += tests/unit/test_metrics_auc
tests_unit_test_metrics_auc_SOURCES = tests/unit/test_metrics_auc.c
tests_unit_test_metrics_auc_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_metrics_auc_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

check_PROGRAMS += tests/unit/test_criteo
TESTS += tests/unit/test_criteo
tests_unit_test_criteo_SOURCES = tests/unit/test_criteo.c tests/unit/log_capture.h
tests_unit_test_criteo_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_criteo_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

# The Criteo batch stream the training loop reads (trainer/data_stream.c).
check_PROGRAMS += tests/unit/test_data_stream
TESTS += tests/unit/test_data_stream
tests_unit_test_data_stream_SOURCES = tests/unit/test_data_stream.c
tests_unit_test_data_stream_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_data_stream_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
