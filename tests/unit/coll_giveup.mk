# A newer elastic round named while rank 0 sends the rank table (the
# give_up seam of the rendezvous): every rank gives up cleanly.
check_PROGRAMS += tests/unit/test_coll_giveup
TESTS += tests/unit/test_coll_giveup
tests_unit_test_coll_giveup_SOURCES = tests/unit/test_coll_giveup.c tests/unit/coll_testutil.h
tests_unit_test_coll_giveup_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_giveup_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)
