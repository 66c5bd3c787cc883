# tests/fuzz/: libFuzzer harnesses for every decoder of outside input (job
# file, checkpoints, data files, wire messages, collective handshake) and
# their committed seed corpora, tests/fuzz/corpus/<name>/.  See fuzz.h.
#   make check  replays each corpus through its harness (a Check test per
#               harness, built by the ordinary compiler, sanitizers and all);
#   make fuzz   builds the same harnesses with $(FUZZ_CC) and libFuzzer in a
#               tree of its own (fuzz-clang/ under the build tree) and fuzzes
#               each for FUZZ_SECONDS seconds; any crash, leak, UB report,
#               timeout or out-of-memory fails (tests/fuzz/run.sh).
FL_FUZZ_TARGETS = config ckpt cluster idx libsvm proto ps_core ps_ckpt rendezvous onnx npy
FL_FUZZ_PROGS = tests/fuzz/fuzz_config tests/fuzz/fuzz_ckpt tests/fuzz/fuzz_cluster \
	tests/fuzz/fuzz_idx tests/fuzz/fuzz_libsvm tests/fuzz/fuzz_proto tests/fuzz/fuzz_ps_core \
	tests/fuzz/fuzz_ps_ckpt tests/fuzz/fuzz_rendezvous tests/fuzz/fuzz_onnx tests/fuzz/fuzz_npy
check_PROGRAMS += $(FL_FUZZ_PROGS) tests/unit/test_hostile
TESTS += $(FL_FUZZ_PROGS) tests/unit/test_hostile
EXTRA_DIST += tests/fuzz/run.sh tests/fuzz/README.md tests/fuzz/corpus tests/fuzz/dict \
	tests/fuzz/make_onnx_corpus.py

FL_FUZZ_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/fuzz
FL_FUZZ_TRAINER_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/fuzz
FL_FUZZ_LDADD = $(FL_LIBS) $(CHECK_LIBS) $(ZLIB_LIBS) -lm

tests_fuzz_fuzz_config_SOURCES = tests/fuzz/fuzz_config.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_config_CFLAGS = $(FL_FUZZ_CFLAGS) -DFUZZ_NAME=config
tests_fuzz_fuzz_config_LDADD = $(FL_FUZZ_LDADD)

tests_fuzz_fuzz_ckpt_SOURCES = tests/fuzz/fuzz_ckpt.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_ckpt_CFLAGS = $(FL_FUZZ_CFLAGS) -DFUZZ_NAME=ckpt
tests_fuzz_fuzz_ckpt_LDADD = $(FL_FUZZ_LDADD)

tests_fuzz_fuzz_cluster_SOURCES = tests/fuzz/fuzz_cluster.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_cluster_CFLAGS = $(FL_FUZZ_CFLAGS) -DFUZZ_NAME=cluster
tests_fuzz_fuzz_cluster_LDADD = $(FL_FUZZ_LDADD)

tests_fuzz_fuzz_idx_SOURCES = tests/fuzz/fuzz_idx.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_idx_CFLAGS = $(FL_FUZZ_TRAINER_CFLAGS) -DFUZZ_NAME=idx
tests_fuzz_fuzz_idx_LDADD = libfltrainer.la $(FL_FUZZ_LDADD)

tests_fuzz_fuzz_libsvm_SOURCES = tests/fuzz/fuzz_libsvm.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_libsvm_CFLAGS = $(FL_FUZZ_TRAINER_CFLAGS) -DFUZZ_NAME=libsvm
tests_fuzz_fuzz_libsvm_LDADD = libfltrainer.la $(FL_FUZZ_LDADD)

tests_fuzz_fuzz_proto_SOURCES = tests/fuzz/fuzz_proto.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_proto_CFLAGS = $(FL_FUZZ_CFLAGS) -DFUZZ_NAME=proto
tests_fuzz_fuzz_proto_LDADD = $(FL_FUZZ_LDADD) $(GRPC_LIBS) $(PROTOBUFC_LIBS)

tests_fuzz_fuzz_ps_core_SOURCES = tests/fuzz/fuzz_ps_core.c tests/fuzz/replay.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_ps.h
tests_fuzz_fuzz_ps_core_CFLAGS = $(FL_PSERVER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/fuzz \
	-DFUZZ_NAME=ps_core
tests_fuzz_fuzz_ps_core_LDADD = $(FL_PSERVER_LIBS) $(CHECK_LIBS) -lm

tests_fuzz_fuzz_ps_ckpt_SOURCES = tests/fuzz/fuzz_ps_ckpt.c tests/fuzz/replay.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_ps.h
tests_fuzz_fuzz_ps_ckpt_CFLAGS = $(FL_PSERVER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/fuzz \
	-DFUZZ_NAME=ps_ckpt
tests_fuzz_fuzz_ps_ckpt_LDADD = $(FL_PSERVER_LIBS) $(CHECK_LIBS) $(ZLIB_LIBS) -lm

tests_fuzz_fuzz_rendezvous_SOURCES = tests/fuzz/fuzz_rendezvous.c tests/fuzz/replay.c \
	tests/fuzz/fuzz.h
tests_fuzz_fuzz_rendezvous_CFLAGS = $(FL_FUZZ_TRAINER_CFLAGS) -DFUZZ_NAME=rendezvous
tests_fuzz_fuzz_rendezvous_LDADD = libfltrainer.la $(FL_FUZZ_LDADD) $(UV_LIBS)

tests_fuzz_fuzz_onnx_SOURCES = tests/fuzz/fuzz_onnx.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_onnx_CFLAGS = $(FL_FUZZ_TRAINER_CFLAGS) -DFUZZ_NAME=onnx
tests_fuzz_fuzz_onnx_LDADD = libfltrainer.la $(FL_FUZZ_LDADD)

tests_fuzz_fuzz_npy_SOURCES = tests/fuzz/fuzz_npy.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_npy_CFLAGS = $(FL_FUZZ_TRAINER_CFLAGS) -DFUZZ_NAME=npy
tests_fuzz_fuzz_npy_LDADD = libfltrainer.la $(FL_FUZZ_LDADD)

# Hostile input refused with a status (job file, checkpoints, PServer wire).
tests_unit_test_hostile_SOURCES = tests/unit/test_hostile.c
tests_unit_test_hostile_CFLAGS = $(FL_PSERVER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_hostile_LDADD = $(FL_PSERVER_LIBS) $(CHECK_LIBS) $(ZLIB_LIBS) -lm

# The fuzzing pass.  FUZZ_FLAGS: extra libFuzzer flags (e.g. -seed=1).
FUZZ_CC = clang
FUZZ_SECONDS = 60
FUZZ_FLAGS =
fuzz:
	FUZZ_CC='$(FUZZ_CC)' FUZZ_SECONDS='$(FUZZ_SECONDS)' FUZZ_FLAGS='$(FUZZ_FLAGS)' \
	FUZZ_TARGETS='$(FL_FUZZ_TARGETS)' MAKE='$(MAKE)' \
	$(SHELL) $(top_srcdir)/tests/fuzz/run.sh '$(abs_top_srcdir)' '$(abs_top_builddir)/fuzz-clang'
# Generated sources the harnesses include; run.sh makes these first (an
# explicit program target does not build BUILT_SOURCES by itself).
fuzz-built-sources: $(BUILT_SOURCES)
.PHONY: fuzz fuzz-built-sources
