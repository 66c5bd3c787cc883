# Unit tests of PServer mode (Check): block split and placement, the sparse
# table, and the pserver's update rules (sync order, duplicates, deaths,
# async/geo, barriers, bad requests, checkpoints) without a network.
FL_PS_UNIT_TESTS = tests/unit/test_ps_layout tests/unit/test_ps_sparse tests/unit/test_ps_core
check_PROGRAMS += $(FL_PS_UNIT_TESTS)
TESTS += $(FL_PS_UNIT_TESTS)
FL_PS_UNIT_CFLAGS = $(FL_PSERVER_CFLAGS) $(CHECK_CFLAGS)
FL_PS_UNIT_LDADD = $(FL_PSERVER_LIBS) $(CHECK_LIBS) -lm
tests_unit_test_ps_layout_SOURCES = tests/unit/test_ps_layout.c
tests_unit_test_ps_layout_CFLAGS = $(FL_PS_UNIT_CFLAGS)
tests_unit_test_ps_layout_LDADD = $(FL_PS_UNIT_LDADD)
tests_unit_test_ps_sparse_SOURCES = tests/unit/test_ps_sparse.c
tests_unit_test_ps_sparse_CFLAGS = $(FL_PS_UNIT_CFLAGS)
tests_unit_test_ps_sparse_LDADD = $(FL_PS_UNIT_LDADD)
tests_unit_test_ps_core_SOURCES = tests/unit/test_ps_core.c
tests_unit_test_ps_core_CFLAGS = $(FL_PS_UNIT_CFLAGS)
tests_unit_test_ps_core_LDADD = $(FL_PS_UNIT_LDADD)
# The dispatch tables of the pserver and of the trainer's client against
# the service blocks of proto/.
check_PROGRAMS += tests/unit/test_wire_service
TESTS += tests/unit/test_wire_service
tests_unit_test_wire_service_SOURCES = tests/unit/test_wire_service.c
tests_unit_test_wire_service_CFLAGS = $(FL_PS_UNIT_CFLAGS) -I$(top_srcdir)/trainer
tests_unit_test_wire_service_LDADD = libfltrainer.la $(FL_PS_UNIT_LDADD)
# The sparse rows through the core: sync equality with one trainer for 1, 2
# and 3 trainers and every sparse optimizer, read-only pulls.
check_PROGRAMS += tests/unit/test_ps_rows
TESTS += tests/unit/test_ps_rows
tests_unit_test_ps_rows_SOURCES = tests/unit/test_ps_rows.c tests/unit/ps_testutil.h
tests_unit_test_ps_rows_CFLAGS = $(FL_PS_UNIT_CFLAGS)
tests_unit_test_ps_rows_LDADD = $(FL_PS_UNIT_LDADD)
# A model's own sparse tables: per-table init_range and padding_id,
# InitSparse and DumpSparse through the core, on the wire and from the
# trainer's client.
check_PROGRAMS += tests/unit/test_ps_sparse_init
TESTS += tests/unit/test_ps_sparse_init
tests_unit_test_ps_sparse_init_SOURCES = tests/unit/test_ps_sparse_init.c tests/unit/ps_testutil.h
tests_unit_test_ps_sparse_init_CFLAGS = $(FL_PS_UNIT_CFLAGS) -I$(top_srcdir)/trainer
tests_unit_test_ps_sparse_init_LDADD = libfltrainer.la $(FL_PS_UNIT_LDADD)
